package policy

import (
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Detector names, as the detect package names them (a test holds them
// equal; this package does not import detect and its store).
const (
	WatchLoop  = "watch-loop"
	Regression = "watch-rv-regression"
)

// Effect is what a detector loses when a need is not met.
type Effect string

const (
	// Blinds: the detector cannot find what it exists for.
	Blinds Effect = "blinds"
	// Weakens: the detector still works, but misses some clients or may
	// report what it would otherwise rule out.
	Weakens Effect = "weakens"
)

// Client is an identity as the apiserver authenticates it.
type Client struct {
	// Name is how people call the program ("kube-proxy").
	Name   string   `json:"name"`
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	// ByGroup, when set, is the group a rule should select to cover
	// every instance of the client (kubelets: one user per node).
	ByGroup string `json:"-"`
}

// Clients of the probes, with the groups real clusters give them.
var (
	ControllerManager = Client{Name: "kube-controller-manager", User: "system:kube-controller-manager", Groups: []string{"system:authenticated"}}
	// EndpointController is the endpoints controller's own identity when
	// kube-controller-manager runs with --use-service-account-credentials
	// (kubeadm, GCE and most installers).
	EndpointController = Client{Name: "endpoints controller (service account)", User: "system:serviceaccount:kube-system:endpoint-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	KubeProxy   = Client{Name: "kube-proxy", User: "system:kube-proxy", Groups: []string{"system:authenticated"}}
	KubeProxySA = Client{Name: "kube-proxy (service account)", User: "system:serviceaccount:kube-system:kube-proxy",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	Kubelet = Client{Name: "kubelet", User: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}, ByGroup: "system:nodes"}
	// APIServer is a kube-apiserver's own loopback client: its user agent
	// names the apiserver's version.
	APIServer = Client{Name: "kube-apiserver (loopback)", User: "system:apiserver", Groups: []string{"system:masters"}}
	// Person is anyone else: a user with kubectl, a CI pipeline.
	Person = Client{Name: "a user", User: "alice", Groups: []string{"system:authenticated"}, ByGroup: "system:authenticated"}
)

// Stage sets a probe may need: any one of the stages suffices.
var (
	// A watch is long-running: RequestReceived, ResponseStarted when its
	// headers are sent, ResponseComplete when it ends.
	watchStages = []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted, auditv1.StageResponseComplete}
	// Other requests have no ResponseStarted.
	requestStages  = []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseComplete}
	completeStages = []auditv1.Stage{auditv1.StageResponseComplete}
)

// Probe is a request a detector needs to see, and how.
type Probe struct {
	Client  Client  `json:"client"`
	Request Request `json:"-"`
	// Stages: the policy must emit at least one of them.
	Stages []auditv1.Stage `json:"stages"`
	// MinLevel is the least level that records what the detector reads.
	MinLevel auditv1.Level `json:"minLevel"`
}

// String describes the probe: "kube-proxy watches services".
func (p Probe) String() string {
	s := p.Client.Name + " " + verbPhrase(p.Request.Verb) + " " + resourceName(p.Request.APIGroup, p.Request.Resource, p.Request.Subresource)
	switch {
	case p.Request.Namespace != "":
		s += " in namespace " + p.Request.Namespace
	case p.Request.Verb == "watch" || p.Request.Verb == "list":
		s += " of all namespaces"
	}
	return s
}

func verbPhrase(v string) string {
	switch v {
	case "watch":
		return "watches"
	case "list":
		return "lists"
	case "create":
		return "creates"
	case "delete":
		return "deletes"
	case "update":
		return "updates"
	}
	return v
}

// Need is one thing a detector must see: all its probes (or, when Any,
// at least one of them).
type Need struct {
	ID     string  `json:"id"`
	Title  string  `json:"title"`
	Effect Effect  `json:"effect"`
	Any    bool    `json:"any,omitempty"`
	Probes []Probe `json:"-"`
	// Why is what the detector reads in these events, and Loss what
	// happens when the policy hides them.
	Why  string `json:"why"`
	Loss string `json:"loss"`
}

// DetectorNeeds is the needs of one detector.
type DetectorNeeds struct {
	Detector string
	Needs    []Need
}

func probe(c Client, verb, resource, namespace string, stages []auditv1.Stage) Probe {
	return groupProbe(c, verb, "", resource, namespace, stages)
}

func groupProbe(c Client, verb, group, resource, namespace string, stages []auditv1.Stage) Probe {
	r := Request{User: c.User, Groups: c.Groups, Verb: verb, APIGroup: group, Resource: resource, Namespace: namespace}
	if verb == "delete" {
		r.Name = "web"
	}
	return Probe{Client: c, Request: r, Stages: stages, MinLevel: auditv1.LevelMetadata}
}

// named sets the object name of a probe: a kubelet watches each ConfigMap
// a pod mounts by name (a metadata.name field selector, which the
// apiserver takes as the request's name).
func named(p Probe, name string) Probe {
	p.Request.Name = name
	return p
}

// Needs returns what each detector needs to see. Both read the
// resourceVersion of a watch or list from its requestURI and the response
// code from responseStatus, which every level but None records, so
// Metadata is enough for all but one alternative (a write's response
// object, RequestResponse).
func Needs() []DetectorNeeds {
	svcWrite := probe(Person, "create", "services", "default", completeStages)
	svcWrite.MinLevel = auditv1.LevelRequestResponse
	return []DetectorNeeds{
		{Detector: WatchLoop, Needs: []Need{
			{
				ID: "static-watch", Title: "watches of Services by kube-controller-manager", Effect: Blinds,
				Probes: []Probe{probe(ControllerManager, "watch", "services", "", watchStages)},
				Why: "the loop is kube-controller-manager re-watching Services from one resourceVersion (in the requestURI); any stage of a watch counts, " +
					"and a stage with a response code (ResponseStarted or ResponseComplete) tells a failed watch, which is no restart",
				Loss: "the static watches that make the loop are never seen",
			},
			{
				ID: "endpoints-churn", Title: "Endpoints deletes by the endpoints controller", Effect: Blinds,
				Probes: []Probe{
					probe(ControllerManager, "delete", "endpoints", "default", completeStages),
					probe(EndpointController, "delete", "endpoints", "default", completeStages),
				},
				Why: "the harm is Endpoints of live Services deleted right after each restart, by the same program (user-agent product) whose watch restarted; " +
					"the detector reads their ResponseComplete stage (with its 2xx code). The endpoints controller writes as kube-controller-manager, " +
					"or as its own service account with --use-service-account-credentials",
				Loss: "the churn that proves the loop hurts is never seen",
			},
			{
				ID: "endpoints-recreate", Title: "Endpoints creates by the endpoints controller", Effect: Weakens,
				Probes: []Probe{
					probe(ControllerManager, "create", "endpoints", "default", completeStages),
					probe(EndpointController, "create", "endpoints", "default", completeStages),
				},
				Why:  "the finding pairs each churned delete with its re-create, to show how long the Endpoints were gone",
				Loss: "the loop is still found, but the finding cannot say when the Endpoints came back",
			},
			{
				ID: "rv-advanced", Title: "any request that shows a newer resourceVersion", Effect: Blinds, Any: true,
				Probes: []Probe{
					probe(ControllerManager, "watch", "pods", "", watchStages),
					probe(Kubelet, "watch", "pods", "", watchStages),
					probe(Kubelet, "watch", "services", "", watchStages),
					probe(KubeProxy, "watch", "endpoints", "", watchStages),
					probe(KubeProxySA, "watch", "services", "", watchStages),
					svcWrite,
				},
				Why: "a static resourceVersion is only stale when the cluster moved past it. resourceVersions are etcd revisions, global to the cluster: " +
					"any client's watch or list of any resource from a higher one, at any time, or a write whose response object carries one (RequestResponse), proves it",
				Loss: "the detector can never show that the static resourceVersion is stale, so it reports nothing",
			},
			{
				ID: "owner-changes", Title: "Service deletes and creates by users", Effect: Weakens,
				Probes: []Probe{
					probe(Person, "delete", "services", "default", requestStages),
					probe(Person, "create", "services", "default", requestStages),
				},
				Why:  "a Service deleted or created explains the endpoints controller's Endpoints write within 10 s after it (its reaction); any stage counts",
				Loss: "a user re-creating a Service right after a restart of a static watcher can be reported as the loop (a false alarm)",
			},
			{
				ID: "apiserver-version", Title: "the kube-apiserver's own requests", Effect: Weakens,
				Probes: []Probe{probe(APIServer, "watch", "services", "", watchStages)},
				Why:    "the DELETE-event bug is the apiserver's: its version comes from its own loopback requests (user agent kube-apiserver/vX.Y.Z)",
				Loss:   "the finding cannot say whether the apiservers run an affected version (1.7.0–1.7.12, 1.8.0–1.8.7, 1.9.0–1.9.2)",
			},
		}},
		{Detector: Regression, Needs: []Need{
			{
				ID: "controller-watches", Title: "watches of Services by kube-controller-manager", Effect: Blinds,
				Probes: []Probe{probe(ControllerManager, "watch", "services", "", watchStages)},
				Why:    "the DELETE-event bug sent kube-controller-manager's Services reflector back to an old resourceVersion (seed 001); the detector compares the resourceVersion in successive watches' requestURI",
				Loss:   "the regression the detector exists for is never seen",
			},
			{
				ID: "other-watches", Title: "watches by node agents", Effect: Weakens,
				Probes: []Probe{
					probe(KubeProxy, "watch", "services", "", watchStages),
					probe(KubeProxy, "watch", "endpoints", "", watchStages),
					probe(KubeProxySA, "watch", "services", "", watchStages),
					groupProbe(KubeProxySA, "watch", "discovery.k8s.io", "endpointslices", "", watchStages),
					probe(Kubelet, "watch", "services", "", watchStages),
					probe(Kubelet, "watch", "pods", "", watchStages),
					named(probe(Kubelet, "watch", "configmaps", "default", watchStages), "app-config"),
				},
				Why:  "the bug hit every client and every resource; kube-proxy and kubelets are most of a cluster's watches",
				Loss: "these clients' regressions (and an etcd restored from an old backup, which sends every client back) go unseen",
			},
			{
				ID: "relists", Title: "lists by the same clients", Effect: Weakens,
				Probes: []Probe{
					probe(ControllerManager, "list", "services", "", requestStages),
					probe(KubeProxy, "list", "services", "", requestStages),
					probe(Kubelet, "list", "pods", "", requestStages),
				},
				Why:  "a relist legitimately starts a client over, possibly from a lower resourceVersion (an apiserver whose cache is behind); the detector resets its comparison at each list",
				Loss: "a client that relisted from a lagging apiserver can be reported as a regression (a false alarm)",
			},
		}},
	}
}
