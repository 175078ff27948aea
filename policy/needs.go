package policy

import (
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
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
	WatchStages = []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted, auditv1.StageResponseComplete}
	// Other requests have no ResponseStarted.
	RequestStages = []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseComplete}
	// CompleteStages: the detector reads the response code.
	CompleteStages = []auditv1.Stage{auditv1.StageResponseComplete}
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

// NewProbe is a request by c at level Metadata (set MinLevel for more):
// verb on resource of group ("" for the core group) in namespace ("" for
// cluster-scoped resources and for lists and watches of all namespaces).
// A delete names an object, as every delete does.
func NewProbe(c Client, verb, group, resource, namespace string, stages []auditv1.Stage) Probe {
	r := Request{User: c.User, Groups: c.Groups, Verb: verb, APIGroup: group, Resource: resource, Namespace: namespace}
	if verb == "delete" {
		r.Name = "web"
	}
	return Probe{Client: c, Request: r, Stages: stages, MinLevel: auditv1.LevelMetadata}
}

// Named sets the object name of a probe: a kubelet watches each ConfigMap
// a pod mounts by name (a metadata.name field selector, which the
// apiserver takes as the request's name).
func Named(p Probe, name string) Probe {
	p.Request.Name = name
	return p
}
