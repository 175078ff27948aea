// Package auditgen generates realistic Kubernetes audit events for tests and
// benchmarks, deterministically from a seed.
//
// Events are built with the upstream audit.k8s.io/v1 types and encoded with
// encoding/json, as kube-apiserver encodes them, so field order, escaping
// ("\u0026" in requestURI) and timestamps (metav1.MicroTime, 6 fractional
// digits, UTC) are what the log and webhook backends write. The mix follows
// the research note performance-ceilings.md: about 1.2 KB per event (Metadata
// level ~0.95 KB, RequestResponse ~2.1 KB), 80% ResponseComplete, 10%
// ResponseStarted (watches), 10% RequestReceived, a fifth at level
// RequestResponse with request and response objects. Clients are the
// control plane (kube-controller-manager informers and per-controller
// service accounts, kube-scheduler), kubelets (system:node:node-N: Lease
// heartbeats, node status, ConfigMap and Secret gets and watches),
// kube-proxy, in-cluster operators and an admin using kubectl.
package auditgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// KubeVersion is the version in generated user agents.
const KubeVersion = "v1.37.2"

const (
	nodes     = 50
	gitCommit = "abc1234"
)

// Gen generates audit events. It is not safe for concurrent use.
type Gen struct {
	rng  *rand.Rand
	now  time.Time
	rv   int64     // the cluster's resourceVersion, bumped by writes
	born time.Time // creationTimestamp of generated objects
	// revs samples rv over the last minutes, for the resourceVersion a
	// watch asked for when it started (see watchFrom).
	revs []revAt
	// gap is the mean time between events after the first microsecond
	// (default 250µs: about 4,000 events a second).
	gap time.Duration
}

type revAt struct {
	t  time.Time
	rv int64
}

// New returns a generator whose first event happens just after start. The
// same seed and start give the same events.
func New(seed int64, start time.Time) *Gen {
	return &Gen{
		rng:  rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		now:  start.UTC().Truncate(time.Microsecond),
		rv:   1_000_000 + seed%1000,
		born: start.UTC().Add(-90 * 24 * time.Hour).Truncate(time.Second),
		gap:  250 * time.Microsecond,
	}
}

// DefaultRate is about how many events a second New's generator makes.
const DefaultRate = 3984

// SetRate sets about how many events a second of event time the generator
// makes (the default is DefaultRate, a busy single apiserver); a large
// cluster's several apiservers send tens of thousands. The events are the
// same mix, closer together.
func (g *Gen) SetRate(perSecond float64) {
	if perSecond <= 0 {
		return
	}
	g.gap = max(time.Duration(float64(time.Second)/perSecond)-time.Microsecond, 0)
}

// Next returns the next event. Its stageTimestamp is later than that of the
// event before (a few hundred microseconds on average, as from a busy
// apiserver). Kind and apiVersion are left empty, as in a webhook EventList.
func (g *Gen) Next() auditv1.Event {
	g.now = g.now.Add(time.Microsecond + time.Duration(g.rng.ExpFloat64()*float64(g.gap)).Truncate(time.Microsecond))
	if n := len(g.revs); n == 0 || g.now.Sub(g.revs[n-1].t) >= 100*time.Millisecond {
		if n >= 18000 { // 30 minutes: keep the last 15 (watches last at most 10)
			g.revs = append(g.revs[:0], g.revs[n/2:]...)
		}
		g.revs = append(g.revs, revAt{g.now, g.rv})
	}

	var stage auditv1.Stage
	switch r := g.rng.IntN(10); {
	case r == 0:
		stage = auditv1.StageRequestReceived
	case r == 1:
		stage = auditv1.StageResponseStarted
	default:
		stage = auditv1.StageResponseComplete
	}
	var q request
	if stage == auditv1.StageResponseStarted {
		q = g.watch(g.client())
	} else {
		q = g.request()
	}

	ev := auditv1.Event{
		Level:      q.level,
		AuditID:    types.UID(g.uuid()),
		Stage:      stage,
		RequestURI: q.uri,
		Verb:       q.verb,
		User:       q.user.info,
		SourceIPs:  []string{q.user.ip},
		UserAgent:  q.user.agent,
		ObjectRef:  &q.ref,
	}
	var latency time.Duration
	switch stage {
	case auditv1.StageRequestReceived:
		// Before authorization: no decision, no status, no objects yet.
	case auditv1.StageResponseStarted:
		latency = g.micros(300, 3000)
		ev.ResponseStatus = &metav1.Status{Code: 200}
		ev.Annotations = q.user.authz()
	case auditv1.StageResponseComplete:
		latency = q.latency
		ev.ResponseStatus = q.status
		ev.Annotations = q.user.authz()
		if q.level == auditv1.LevelRequestResponse {
			ev.RequestObject = unknown(q.reqObj)
			ev.ResponseObject = unknown(q.respObj)
		}
	}
	if q.verb == "watch" {
		ev.RequestURI = g.watchFrom(q, g.now.Add(-latency))
	}
	ev.StageTimestamp = metav1.NewMicroTime(g.now)
	ev.RequestReceivedTimestamp = metav1.NewMicroTime(g.now.Add(-latency))
	return ev
}

// watchFrom sets the resourceVersion of a watch that started at start as
// a client-go reflector would have it: a little behind the cluster's
// resourceVersion at that time (the last event it received), by a lag
// fixed per client and watched collection. So each client's successive
// watches never go back, as real ones do not (watch detectors look for
// those that do).
func (g *Gen) watchFrom(q request, start time.Time) string {
	i := sort.Search(len(g.revs), func(i int) bool { return g.revs[i].t.After(start) }) - 1
	var rv int64
	if i >= 0 {
		rv = g.revs[i].rv
	} else { // before the first sample: older by a revision a millisecond
		rv = g.revs[0].rv - int64(g.revs[0].t.Sub(start)/time.Millisecond)
	}
	path, query, _ := strings.Cut(q.uri, "?")
	h := fnv.New32a()
	h.Write([]byte(q.user.info.Username + "\x00" + q.user.agent + "\x00" + q.user.ip + "\x00" + path))
	for _, kv := range strings.Split(query, "&") {
		if strings.HasPrefix(kv, "fieldSelector=") {
			h.Write([]byte(kv))
		}
	}
	rv -= int64(h.Sum32() % 5000)
	pre, rest, ok := strings.Cut(q.uri, "resourceVersion=")
	if !ok {
		return q.uri
	}
	_, after, _ := strings.Cut(rest, "&")
	return pre + "resourceVersion=" + strconv.FormatInt(max(rv, 1), 10) + "&" + after
}

// WriteLog writes n events to w as the log backend writes them: one JSON
// object per line, with kind Event and apiVersion audit.k8s.io/v1.
func (g *Gen) WriteLog(w io.Writer, n int) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw) // what the apiserver's JSON serializer uses
	for range n {
		ev := g.Next()
		ev.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: auditv1.SchemeGroupVersion.String()}
		if err := enc.Encode(&ev); err != nil {
			return fmt.Errorf("writing audit log line: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing audit log: %w", err)
	}
	return nil
}

// EventListBody returns a webhook request body of n events, as the webhook
// backend POSTs it: an audit.k8s.io/v1 EventList whose items have no kind or
// apiVersion.
func (g *Gen) EventListBody(n int) []byte {
	list := auditv1.EventList{
		TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: auditv1.SchemeGroupVersion.String()},
		Items:    make([]auditv1.Event, n),
	}
	for i := range list.Items {
		list.Items[i] = g.Next()
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(&list); err != nil {
		panic(fmt.Sprintf("auditgen: encoding an EventList: %v", err)) // the types always encode
	}
	return buf.Bytes()
}

// client is who sends a request.
type client struct {
	info  authnv1.UserInfo
	agent string
	ip    string
	// reason is the authorizer's reason, "" for the node and privileged
	// group authorizers.
	reason string
}

func (c client) authz() map[string]string {
	return map[string]string{
		"authorization.k8s.io/decision": "allow",
		"authorization.k8s.io/reason":   c.reason,
	}
}

// request is one API request before it is cut into stages.
type request struct {
	user    client
	verb    string
	uri     string
	ref     auditv1.ObjectReference
	level   auditv1.Level
	status  *metav1.Status
	latency time.Duration
	reqObj  []byte
	respObj []byte
}

func agent(component, suffix string) string {
	a := component + "/" + KubeVersion + " (linux/amd64) kubernetes/" + gitCommit
	if suffix != "" {
		a += "/" + suffix
	}
	return a
}

func rbac(user, role string) string {
	return fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to User %q", role, role, user)
}

var authenticated = []string{"system:authenticated"}

func (g *Gen) controllerManager(controller string) client {
	const u = "system:kube-controller-manager"
	return client{info: authnv1.UserInfo{Username: u, Groups: authenticated},
		agent: agent("kube-controller-manager", controller), ip: "10.0.0.10", reason: rbac(u, u)}
}

// controllerSA is a controller of kube-controller-manager writing with its
// own service account (--use-service-account-credentials, kubeadm's default).
func (g *Gen) controllerSA(controller string) client {
	u := "system:serviceaccount:kube-system:" + controller
	return client{
		info: authnv1.UserInfo{
			Username: u,
			UID:      g.stableUID(u),
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
			Extra: map[string]authnv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=" + g.stableUID("jti/"+u)},
			},
		},
		agent: agent("kube-controller-manager", u), ip: "10.0.0.10",
		reason: fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to ServiceAccount %q",
			"system:controller:"+controller, "system:controller:"+controller, controller+"/kube-system"),
	}
}

func (g *Gen) scheduler() client {
	const u = "system:kube-scheduler"
	return client{info: authnv1.UserInfo{Username: u, Groups: authenticated},
		agent: agent("kube-scheduler", "scheduler"), ip: "10.0.0.10", reason: rbac(u, u)}
}

func (g *Gen) kubeProxy(node int) client {
	const u = "system:kube-proxy"
	return client{info: authnv1.UserInfo{Username: u, Groups: authenticated},
		agent: agent("kube-proxy", ""), ip: nodeIP(node), reason: rbac(u, "system:node-proxier")}
}

func (g *Gen) kubelet(node int) client {
	return client{info: authnv1.UserInfo{Username: "system:node:" + nodeName(node), Groups: []string{"system:nodes", "system:authenticated"}},
		agent: agent("kubelet", ""), ip: nodeIP(node)}
}

// serviceAccount is the pod of service account ns/sa on node (one per
// service account and node) making a request with its projected token. As
// from a real pod, what its token's claims put in the event stays the same
// from request to request: user.uid is the service account's UID, extra
// names the pod, its node and their UIDs, and the pod keeps its IP. Only
// the credential ID changes, when the kubelet rotates the token (at 80% of
// its one-hour life: every 48 minutes, at a different moment for each pod).
func (g *Gen) serviceAccount(ns, sa, agent string, node int) client {
	u := "system:serviceaccount:" + ns + ":" + sa
	podKey := u + "/" + nodeName(node)
	h := stableHash(podKey)
	pod := sa + "-" + stableSuffix(podKey)
	const rotation = 48 * 60 // seconds
	token := (g.now.Unix() + int64(h%rotation)) / rotation
	return client{
		info: authnv1.UserInfo{
			Username: u,
			UID:      g.stableUID(u),
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra: map[string]authnv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=" + g.stableUID("jti/"+podKey+"/"+strconv.FormatInt(token, 10))},
				"authentication.kubernetes.io/node-name":     {nodeName(node)},
				"authentication.kubernetes.io/node-uid":      {g.stableUID("node/" + nodeName(node))},
				"authentication.kubernetes.io/pod-name":      {pod},
				"authentication.kubernetes.io/pod-uid":       {g.stableUID("pod/" + podKey)},
			},
		},
		agent: agent, ip: podIP(node, int(h>>32%250)),
		reason: fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to ServiceAccount %q", sa, sa, sa+"/"+ns),
	}
}

func (g *Gen) admin() client {
	return client{info: authnv1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
		agent: agent("kubectl", ""), ip: "192.168.1.23"}
}

func nodeName(n int) string { return "node-" + strconv.Itoa(n) }
func nodeIP(n int) string   { return "10.0." + strconv.Itoa(1+n/250) + "." + strconv.Itoa(1+n%250) }
func podIP(n, i int) string { return "10.244." + strconv.Itoa(n) + "." + strconv.Itoa(2+i) }

// resource describes an API resource the generated clients use.
type resource struct {
	group, version, name, kind string
	namespaced                 bool
}

func (r resource) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// path returns the collection path, in namespace ns if r is namespaced.
func (r resource) path(ns string) string {
	p := "/api/" + r.version
	if r.group != "" {
		p = "/apis/" + r.group + "/" + r.version
	}
	if r.namespaced && ns != "" {
		p += "/namespaces/" + ns
	}
	return p + "/" + r.name
}

var (
	pods           = resource{"", "v1", "pods", "Pod", true}
	services       = resource{"", "v1", "services", "Service", true}
	endpoints      = resource{"", "v1", "endpoints", "Endpoints", true}
	configmaps     = resource{"", "v1", "configmaps", "ConfigMap", true}
	secrets        = resource{"", "v1", "secrets", "Secret", true}
	nodesRes       = resource{"", "v1", "nodes", "Node", false}
	namespacesRes  = resource{"", "v1", "namespaces", "Namespace", false}
	events         = resource{"", "v1", "events", "Event", true}
	leases         = resource{"coordination.k8s.io", "v1", "leases", "Lease", true}
	endpointslices = resource{"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true}
	deployments    = resource{"apps", "v1", "deployments", "Deployment", true}
	replicasets    = resource{"apps", "v1", "replicasets", "ReplicaSet", true}
	informed       = []resource{pods, services, endpoints, configmaps, secrets, nodesRes, namespacesRes,
		leases, endpointslices, deployments, replicasets}
	namespaces = []string{"default", "kube-system", "monitoring", "payments", "web", "batch"}
	apps       = []string{"api", "web", "worker", "cache", "gateway", "billing", "search", "auth"}
)

// client picks a client that watches and lists.
func (g *Gen) client() client {
	switch g.rng.IntN(8) {
	case 0, 1:
		return g.controllerManager("shared-informers")
	case 2:
		return g.scheduler()
	case 3:
		return g.kubeProxy(g.rng.IntN(nodes))
	case 4:
		return g.kubelet(g.rng.IntN(nodes))
	case 5:
		return g.serviceAccount("kube-system", "coredns", "coredns/v1.12.1 (linux/amd64) kubernetes/"+gitCommit, g.rng.IntN(nodes))
	case 6:
		return g.serviceAccount("kube-system", "cilium", "cilium-agent/v1.16.5 (linux/amd64) kubernetes/$Format", g.rng.IntN(nodes))
	default:
		return g.serviceAccount("monitoring", "prometheus-k8s", "Prometheus/3.2.1", g.rng.IntN(nodes))
	}
}

// request picks a request by how common it is in a quiet production cluster.
func (g *Gen) request() request {
	switch r := g.rng.IntN(100); {
	case r < 18: // kubelet heartbeats: Lease updates
		return g.leaseUpdate()
	case r < 25:
		return g.nodeStatusPatch()
	case r < 37:
		return g.watch(g.client())
	case r < 46:
		return g.list(g.lister())
	case r < 64:
		return g.get()
	case r < 73:
		return g.endpointsWrite()
	case r < 80:
		return g.eventCreate()
	case r < 84:
		return g.leaderElection()
	case r < 94:
		return g.operatorLease()
	default:
		return g.adminRequest()
	}
}

func (g *Gen) watch(c client) request {
	res := informed[g.rng.IntN(len(informed))]
	// client-go's reflector, with the query keys sorted as url.Values.Encode sorts them.
	ns, selector := "", ""
	if strings.HasPrefix(c.info.Username, "system:node:") {
		// kubelets watch the objects of their pods, one by one.
		res, ns = configmaps, namespaces[g.rng.IntN(len(namespaces))]
		selector = "fieldSelector=metadata.name%3D" + apps[g.rng.IntN(len(apps))] + "-config&"
	}
	// Next replaces the resourceVersion once it knows when the watch
	// started (watchFrom); drawing it here keeps the random sequence.
	q := fmt.Sprintf("allowWatchBookmarks=true&%sresourceVersion=%d&timeoutSeconds=%d&watch=true",
		selector, g.rv-int64(g.rng.IntN(5000)), 300+g.rng.IntN(300))
	return request{
		user: c, verb: "watch", uri: res.path(ns) + "?" + q,
		ref:     auditv1.ObjectReference{Resource: res.name, Namespace: ns, APIGroup: res.group, APIVersion: res.version},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.seconds(300, 600),
	}
}

// lister picks a client that lists in a healthy cluster's steady state:
// the people and tools that poll — kubectl, a GitOps controller, a backup
// job, a dashboard. Informers list once when they start and then watch;
// they list again only after a watch failed, rarely. (Lists by random
// informer clients, again and again, are a herd of relists that no healthy
// cluster shows: relist-herd found 11 in a generated gigabyte.)
func (g *Gen) lister() client {
	switch g.rng.IntN(4) {
	case 0:
		return g.admin()
	case 1:
		return g.serviceAccount("argocd", "argocd-application-controller", "argocd-application-controller/v2.13.2 (linux/amd64) kubernetes/"+gitCommit, 3)
	case 2:
		return g.serviceAccount("velero", "velero", "velero/v1.15.1 (linux/amd64) kubernetes/$Format", 7)
	default:
		return g.serviceAccount("kubernetes-dashboard", "kubernetes-dashboard", "dashboard/v2.7.0", 11)
	}
}

// list is a paginated list of a collection (its first page), as kubectl
// and list-polling tools send it: served from etcd, no resourceVersion.
func (g *Gen) list(c client) request {
	res := informed[g.rng.IntN(len(informed))]
	ns := ""
	if res.namespaced && g.rng.IntN(2) == 0 {
		ns = namespaces[g.rng.IntN(len(namespaces))]
	}
	return request{
		user: c, verb: "list", uri: res.path(ns) + "?limit=500",
		ref:     auditv1.ObjectReference{Resource: res.name, Namespace: ns, APIGroup: res.group, APIVersion: res.version},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(2000, 80000),
	}
}

func (g *Gen) get() request {
	node := g.rng.IntN(nodes)
	c := g.kubelet(node)
	ns := namespaces[g.rng.IntN(len(namespaces))]
	res := configmaps
	name := apps[g.rng.IntN(len(apps))] + "-config"
	if g.rng.IntN(3) == 0 {
		res, name = secrets, apps[g.rng.IntN(len(apps))]+"-token"
	}
	if g.rng.IntN(2) == 0 {
		c = g.serviceAccount(ns, apps[g.rng.IntN(len(apps))], "Go-http-client/2.0", node)
		res, name = pods, apps[g.rng.IntN(len(apps))]+"-"+g.suffix()
	}
	q := request{
		user: c, verb: "get", uri: res.path(ns) + "/" + name,
		ref:     auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIVersion: res.version},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(500, 5000),
	}
	if g.rng.IntN(20) == 0 {
		q.status = notFound(res, name)
	}
	return q
}

func (g *Gen) leaseUpdate() request {
	node := g.rng.IntN(nodes)
	name := nodeName(node)
	oldRV := g.rv - int64(g.rng.IntN(400))
	g.rv++
	q := request{
		user: g.kubelet(node), verb: "update",
		uri: leases.path("kube-node-lease") + "/" + name + "?timeout=10s",
		ref: auditv1.ObjectReference{Resource: "leases", Namespace: "kube-node-lease", Name: name,
			UID: types.UID(g.stableUID("kube-node-lease/" + name)), APIGroup: "coordination.k8s.io", APIVersion: "v1", ResourceVersion: strconv.FormatInt(oldRV, 10)},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(1500, 12000),
	}
	if g.rng.IntN(3) == 0 {
		q.level = auditv1.LevelRequestResponse
		q.reqObj = g.lease(name, "kube-node-lease", oldRV, "kubelet", name)
		q.respObj = g.lease(name, "kube-node-lease", g.rv, "kubelet", name)
	}
	if g.rng.IntN(50) == 0 {
		q.status = conflict("leases.coordination.k8s.io", name)
		q.respObj = statusObject(q.status)
	}
	return q
}

func (g *Gen) leaderElection() request {
	component := []string{"kube-controller-manager", "kube-scheduler"}[g.rng.IntN(2)]
	c := g.controllerManager("leader-election")
	if component == "kube-scheduler" {
		c = g.scheduler()
		c.agent = agent("kube-scheduler", "leader-election")
	}
	holder := "control-plane-1_" + g.stableUID(component)
	g.rv++
	return request{
		user: c, verb: "update", uri: leases.path("kube-system") + "/" + component + "?timeout=5s",
		ref: auditv1.ObjectReference{Resource: "leases", Namespace: "kube-system", Name: component,
			UID: types.UID(g.stableUID("kube-system/" + component)), APIGroup: "coordination.k8s.io", APIVersion: "v1", ResourceVersion: strconv.FormatInt(g.rv-1, 10)},
		level:   auditv1.LevelRequestResponse,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(1500, 10000),
		reqObj:  g.lease(component, "kube-system", g.rv-1, component, holder),
		respObj: g.lease(component, "kube-system", g.rv, component, holder),
	}
}

// operators are in-cluster controllers that renew leader-election Leases
// every few seconds with pod-bound service account tokens.
var operators = []struct{ ns, sa, agent string }{
	{"cert-manager", "cert-manager", "cert-manager-controller/v1.16.2 (linux/amd64) cert-manager/4a2b6f0"},
	{"cert-manager", "cert-manager-cainjector", "cainjector/v1.16.2 (linux/amd64) cert-manager/4a2b6f0"},
	{"ingress-nginx", "ingress-nginx", "nginx-ingress-controller/v1.12.0 (linux/amd64) ingress-nginx/fbc4c6e"},
	{"monitoring", "prometheus-operator", "PrometheusOperator/0.79.2"},
	{"kube-system", "cilium-operator", "cilium-operator-generic/v1.16.5 (linux/amd64) kubernetes/$Format"},
}

func (g *Gen) operatorLease() request {
	op := operators[g.rng.IntN(len(operators))]
	node := int(stableHash(op.sa) % nodes) // the leader's pod
	name := op.sa + "-leader"
	q := request{
		user: g.serviceAccount(op.ns, op.sa, op.agent, node),
		verb: "get", uri: leases.path(op.ns) + "/" + name,
		ref: auditv1.ObjectReference{Resource: "leases", Namespace: op.ns, Name: name,
			APIGroup: "coordination.k8s.io", APIVersion: "v1"},
		level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}, latency: g.micros(500, 4000),
	}
	if g.rng.IntN(2) == 0 {
		oldRV := g.rv - int64(g.rng.IntN(400))
		g.rv++
		q.verb = "update"
		q.ref.UID = types.UID(g.stableUID(op.ns + "/" + name))
		q.ref.ResourceVersion = strconv.FormatInt(oldRV, 10)
		if g.rng.IntN(5) == 0 {
			holder := op.sa + "-" + stableSuffix("system:serviceaccount:"+op.ns+":"+op.sa+"/"+nodeName(node)) + "_" + g.stableUID(name)
			q.level = auditv1.LevelRequestResponse
			q.reqObj = g.lease(name, op.ns, oldRV, op.sa, holder)
			q.respObj = g.lease(name, op.ns, g.rv, op.sa, holder)
		}
	}
	return q
}

func (g *Gen) nodeStatusPatch() request {
	node := g.rng.IntN(nodes)
	name := nodeName(node)
	g.rv++
	return request{
		user: g.kubelet(node), verb: "patch", uri: nodesRes.path("") + "/" + name + "/status?timeout=10s",
		ref:     auditv1.ObjectReference{Resource: "nodes", Name: name, APIVersion: "v1", Subresource: "status"},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(2000, 15000),
	}
}

func (g *Gen) endpointsWrite() request {
	ns := namespaces[g.rng.IntN(len(namespaces))]
	name := apps[g.rng.IntN(len(apps))]
	res, controller := endpoints, "endpoint-controller"
	if g.rng.IntN(2) == 0 {
		res, controller, name = endpointslices, "endpointslice-controller", name+"-"+g.suffix()
	}
	q := request{
		user:  g.controllerSA(controller),
		ref:   auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIGroup: res.group, APIVersion: res.version},
		level: auditv1.LevelRequestResponse, latency: g.micros(2000, 20000),
	}
	oldRV := g.rv - int64(g.rng.IntN(100))
	g.rv++
	obj := g.endpointsObject(res, ns, name, g.rv)
	switch r := g.rng.IntN(10); {
	case r < 6:
		q.verb, q.uri = "update", res.path(ns)+"/"+name
		q.ref.ResourceVersion = strconv.FormatInt(oldRV, 10)
		q.status = &metav1.Status{Code: 200}
		q.reqObj, q.respObj = g.endpointsObject(res, ns, name, oldRV), obj
	case r < 8:
		q.verb, q.uri = "create", res.path(ns)
		q.status = &metav1.Status{Code: 201}
		q.reqObj, q.respObj = obj, obj
		if g.rng.IntN(10) == 0 {
			q.status = &metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonAlreadyExists,
				Message: fmt.Sprintf("%s %q already exists", res.name, name),
				Details: &metav1.StatusDetails{Name: name, Kind: res.name}}
			q.respObj = statusObject(q.status)
		}
	default:
		q.verb, q.uri = "delete", res.path(ns)+"/"+name
		q.status = &metav1.Status{Status: metav1.StatusSuccess, Code: 200}
		q.reqObj = []byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/__internal","propagationPolicy":"Background"}`)
		q.respObj = statusObject(&metav1.Status{Status: metav1.StatusSuccess,
			Details: &metav1.StatusDetails{Name: name, Kind: res.name, UID: types.UID(g.uuid())}})
		if g.rng.IntN(10) == 0 {
			q.status = notFound(res, name)
			q.respObj = statusObject(q.status)
		}
	}
	return q
}

func (g *Gen) eventCreate() request {
	node := g.rng.IntN(nodes)
	ns := namespaces[g.rng.IntN(len(namespaces))]
	c := g.kubelet(node)
	if g.rng.IntN(3) == 0 {
		c = g.controllerSA("replicaset-controller")
	}
	g.rv++
	return request{
		user: c, verb: "create", uri: events.path(ns),
		ref:     auditv1.ObjectReference{Resource: "events", Namespace: ns, APIVersion: "v1"},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 201},
		latency: g.micros(1000, 8000),
	}
}

func (g *Gen) adminRequest() request {
	ns := namespaces[g.rng.IntN(len(namespaces))]
	name := apps[g.rng.IntN(len(apps))]
	res := []resource{deployments, services, configmaps, pods}[g.rng.IntN(4)]
	q := request{
		user:    g.admin(),
		ref:     auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIGroup: res.group, APIVersion: res.version},
		level:   auditv1.LevelMetadata,
		status:  &metav1.Status{Code: 200},
		latency: g.micros(2000, 30000),
	}
	switch g.rng.IntN(5) {
	case 0:
		q.verb, q.uri = "list", res.path(ns)+"?limit=500"
		q.ref.Name = ""
	case 1, 2:
		q.verb, q.uri = "get", res.path(ns)+"/"+name
	case 3:
		g.rv++
		q.verb, q.uri = "patch", res.path(ns)+"/"+name+"?fieldManager=kubectl-edit"
		q.level = auditv1.LevelRequestResponse
		q.reqObj = []byte(`{"metadata":{"labels":{"audited":"` + g.suffix() + `"}}}`)
		q.respObj = g.labelled(res, ns, name, g.rv)
	default:
		g.rv++
		q.verb, q.uri = "delete", res.path(ns)+"/"+name
		q.level = auditv1.LevelRequestResponse
		q.reqObj = []byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/__internal","propagationPolicy":"Background"}`)
		q.respObj = statusObject(&metav1.Status{Status: metav1.StatusSuccess,
			Details: &metav1.StatusDetails{Name: name, Kind: res.name, UID: types.UID(g.uuid())}})
	}
	return q
}

// objectMeta is metav1.ObjectMeta in the order the apiserver encodes it.
type objectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid"`
	ResourceVersion   string            `json:"resourceVersion"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []ownerReference  `json:"ownerReferences,omitempty"`
	ManagedFields     []managedField    `json:"managedFields"`
}

type ownerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         bool   `json:"controller"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion"`
}

type managedField struct {
	Manager    string          `json:"manager"`
	Operation  string          `json:"operation"`
	APIVersion string          `json:"apiVersion"`
	Time       string          `json:"time"`
	FieldsType string          `json:"fieldsType"`
	FieldsV1   json.RawMessage `json:"fieldsV1"`
}

func (g *Gen) meta(name, ns string, rv int64, manager, apiVersion, fields string) objectMeta {
	return objectMeta{
		Name: name, Namespace: ns, UID: g.stableUID(ns + "/" + name),
		ResourceVersion:   strconv.FormatInt(rv, 10),
		CreationTimestamp: g.born.Format(time.RFC3339),
		ManagedFields: []managedField{{
			Manager: manager, Operation: "Update", APIVersion: apiVersion,
			Time: g.now.Truncate(time.Second).Format(time.RFC3339), FieldsType: "FieldsV1", FieldsV1: json.RawMessage(fields),
		}},
	}
}

func (g *Gen) lease(name, ns string, rv int64, manager, holder string) []byte {
	type spec struct {
		HolderIdentity       string `json:"holderIdentity"`
		LeaseDurationSeconds int    `json:"leaseDurationSeconds"`
		RenewTime            string `json:"renewTime"`
	}
	return mustJSON(struct {
		Kind       string     `json:"kind"`
		APIVersion string     `json:"apiVersion"`
		Metadata   objectMeta `json:"metadata"`
		Spec       spec       `json:"spec"`
	}{"Lease", "coordination.k8s.io/v1",
		g.meta(name, ns, rv, manager, "coordination.k8s.io/v1", `{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`),
		spec{holder, 40, g.now.Format("2006-01-02T15:04:05.000000Z07:00")}})
}

func (g *Gen) endpointsObject(res resource, ns, name string, rv int64) []byte {
	ip := podIP(g.rng.IntN(nodes), g.rng.IntN(250))
	m := g.meta(name, ns, rv, "kube-controller-manager", res.apiVersion(), `{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:subsets":{}}`)
	m.Labels = map[string]string{"app": name}
	m.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": g.now.Add(-g.micros(1000, 900000)).Truncate(time.Second).Format(time.RFC3339)}
	if res.name == "endpointslices" {
		m.Labels["kubernetes.io/service-name"] = name
		m.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
		m.OwnerReferences = []ownerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: g.stableUID(ns + "/svc/" + name), Controller: true, BlockOwnerDeletion: true}}
		return mustJSON(struct {
			Kind        string     `json:"kind"`
			APIVersion  string     `json:"apiVersion"`
			Metadata    objectMeta `json:"metadata"`
			AddressType string     `json:"addressType"`
			Endpoints   []any      `json:"endpoints"`
			Ports       []any      `json:"ports"`
		}{"EndpointSlice", "discovery.k8s.io/v1", m, "IPv4",
			[]any{map[string]any{"addresses": []string{ip}, "conditions": map[string]bool{"ready": true}}},
			[]any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}}})
	}
	return mustJSON(struct {
		Kind       string     `json:"kind"`
		APIVersion string     `json:"apiVersion"`
		Metadata   objectMeta `json:"metadata"`
		Subsets    []any      `json:"subsets"`
	}{"Endpoints", "v1", m, []any{map[string]any{
		"addresses": []any{map[string]any{"ip": ip, "targetRef": map[string]string{"kind": "Pod", "namespace": ns, "name": name + "-" + g.suffix()}}},
		"ports":     []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}},
	}}})
}

func (g *Gen) labelled(res resource, ns, name string, rv int64) []byte {
	m := g.meta(name, ns, rv, "kubectl-edit", res.apiVersion(), `{"f:metadata":{"f:labels":{"f:audited":{}}}}`)
	m.Labels = map[string]string{"app": name, "audited": "yes"}
	return mustJSON(struct {
		Kind       string     `json:"kind"`
		APIVersion string     `json:"apiVersion"`
		Metadata   objectMeta `json:"metadata"`
	}{res.kind, res.apiVersion(), m})
}

func statusObject(s *metav1.Status) []byte {
	st := *s
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return mustJSON(&st)
}

func notFound(res resource, name string) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("%s %q not found", res.name, name),
		Details: &metav1.StatusDetails{Name: name, Kind: res.name}}
}

func conflict(kind, name string) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonConflict,
		Message: fmt.Sprintf("Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", kind, name),
		Details: &metav1.StatusDetails{Name: name, Kind: kind}}
}

func unknown(raw []byte) *runtime.Unknown {
	if raw == nil {
		return nil
	}
	return &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("auditgen: %v", err))
	}
	return b
}

// uuid returns a random version 4 UUID.
func (g *Gen) uuid() string { return UUID(g.rng) }

// stableUID returns the same UUID-shaped string for the same key.
func (g *Gen) stableUID(key string) string { return StableUID(key) }

// suffix returns a pod-name-like random suffix.
func (g *Gen) suffix() string { return NameSuffix(g.rng) }

// UUID returns a random version 4 UUID drawn from rng.
func UUID(rng *rand.Rand) string {
	hi, lo := rng.Uint64(), rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
		hi>>32, (hi>>16)&0xffff, hi&0xfff, 0x8000|(lo>>48)&0x3fff, lo&0xffffffffffff)
}

// StableUID returns a UUID-shaped string that depends only on key.
func StableUID(key string) string {
	h := stableHash(key)
	lo := h * 0x9e3779b97f4a7c15
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
		h>>32, (h>>16)&0xffff, h&0xfff, 0x8000|(lo>>48)&0x3fff, lo&0xffffffffffff)
}

// stableHash is FNV-1a of key.
func stableHash(key string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	return h
}

// stableSuffix is a pod-name-like suffix that depends only on key.
func stableSuffix(key string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := stableHash(key)
	var b [5]byte
	for i := range b {
		b[i] = alphabet[h%uint64(len(alphabet))]
		h /= uint64(len(alphabet))
	}
	return string(b[:])
}

// NameSuffix returns a random suffix like those of generated pod names.
func NameSuffix(rng *rand.Rand) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	var b [5]byte
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b[:])
}

func (g *Gen) micros(lo, hi int) time.Duration {
	return time.Duration(lo+g.rng.IntN(hi-lo)) * time.Microsecond
}

func (g *Gen) seconds(lo, hi int) time.Duration {
	return time.Duration(lo+g.rng.IntN(hi-lo))*time.Second + g.micros(0, 1_000_000)
}
