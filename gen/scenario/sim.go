package scenario

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/gen/auditgen"
)

// sim is a small model of a cluster's API traffic as its apiserver audits
// it: objects with resourceVersions, writes, watches and lists by
// clients, and the events the apiserver's audit backend writes for them.
//
// resourceVersions are etcd revisions. Rather than counting writes in the
// order a scenario script happens to issue them (scripts write resource by
// resource), a write's revision comes from its time: rev0 plus tenths of a
// millisecond since the start, so revisions always increase with time, as
// etcd's do, with gaps for the writes the audit log does not show.
type sim struct {
	rng   *rand.Rand
	scale Scale
	t0    time.Time
	end   time.Time
	// buggy makes DELETE watch events of Services carry the deleted
	// object's old resourceVersion, as the watch cache of Kubernetes
	// 1.7.0–1.9.2 did (for every resource; the model keeps it to the
	// resource of the incident).
	buggy bool
	// bookmarksOn: reflectors ask for bookmarks and resume from the
	// resourceVersion of the latest one even when their resource is idle
	// (Kubernetes 1.15 and later).
	bookmarksOn bool
	version     string // Kubernetes version in user agents, e.g. v1.9.2
	commit      string
	rev0        int64
	// initials are the resourceVersions reflectors hold at the start.
	initials map[string]int64

	events []auditv1.Event
	objs   map[objKey]*object
	hist   map[string][]histEntry // resource → its watch events, by time
	used   map[int64]bool         // revisions taken

	// reflectors' resourceVersions since their last list, for the
	// regressions truth.
	seen map[reflectorKey]*rvSeen
	want Want

	// route, when set, names the kube-apiserver of an HA control plane
	// that serves a request (see Trace.APIServers); servers keeps it by
	// audit ID.
	route   func(c Client, t time.Time) string
	servers map[string]string
}

type objKey struct{ resource, ns, name string }

type object struct {
	rv      int64
	uid     string
	created time.Time
}

// histEntry is one watch event of a resource: when it happened, the
// revision of the write, and the resourceVersion watchers received with
// it (older than the write's for a DELETE in a buggy apiserver).
type histEntry struct {
	t         time.Time
	real      int64
	delivered int64
}

// reflectorKey is one reflector of the regressions truth: a client's
// watches of a resource in a namespace, with a field selector (a
// kubelet's per-object reflectors).
type reflectorKey struct{ client, resource, ns, sel string }

type rvSeen struct {
	max   int64
	maxID string
}

func newSim(seed int64, scale Scale, start time.Time, version, commit string) *sim {
	return &sim{
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x5ca1ab1e)),
		scale:   scale,
		t0:      start.UTC().Truncate(time.Microsecond),
		version: version,
		commit:  commit,
		rev0:    4_000_000,
		objs:    map[objKey]*object{},
		hist:    map[string][]histEntry{},
		used:    map[int64]bool{},
		seen:    map[reflectorKey]*rvSeen{},
	}
}

// at returns the time d after the start.
func (s *sim) at(d time.Duration) time.Time { return s.t0.Add(d) }

// period is the mean time between two watch restarts at the scale.
func (s *sim) period() time.Duration { return (s.scale.RestartMin + s.scale.RestartMax) / 2 }

// between returns a random duration in [lo, hi).
func (s *sim) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo))).Truncate(time.Microsecond)
}

// revAt returns the revision of a write at t: strictly increasing with
// time, never reused.
func (s *sim) revAt(t time.Time) int64 {
	r := s.rev0 + int64(t.Sub(s.t0)/(100*time.Microsecond))
	for s.used[r] {
		r++
	}
	s.used[r] = true
	return r
}

// currentRev is the revision a list at t returns: the newest revision so
// far (the list does not write).
func (s *sim) currentRev(t time.Time) int64 {
	r := s.rev0 + int64(t.Sub(s.t0)/(100*time.Microsecond))
	for s.used[r+1] {
		r++
	}
	return r
}

// seed creates an object that existed before the trace, last written
// age before the start.
func (s *sim) seed(resource, ns, name string, rv int64) {
	s.objs[objKey{resource, ns, name}] = &object{rv: rv, uid: s.uid(resource + "/" + ns + "/" + name),
		created: s.t0.Add(-90 * 24 * time.Hour).Truncate(time.Second)}
}

// delivered returns the resourceVersion a watcher of resource that was
// watching up to t resumes from: the one delivered with the resource's
// last watch event before t, or initial when there is none.
func (s *sim) delivered(resource string, t time.Time, initial int64) int64 {
	h := s.hist[resource]
	i, _ := slices.BinarySearchFunc(h, t, func(e histEntry, t time.Time) int { return e.t.Compare(t) })
	if i == 0 {
		return initial
	}
	return h[i-1].delivered
}

func (s *sim) record(resource string, e histEntry) {
	h := append(s.hist[resource], e)
	slices.SortStableFunc(h, func(a, b histEntry) int { return a.t.Compare(b.t) })
	s.hist[resource] = h
}

// Client is who sends requests: an authenticated user, the user agent
// and the source address.
type Client struct {
	User      string   `json:"user"`
	Groups    []string `json:"-"`
	UserAgent string   `json:"user_agent"`
	SourceIP  string   `json:"source_ip"`
	// via pins the client to one kube-apiserver of an HA control plane
	// (a loopback client is served by its own apiserver).
	via string
}

func (c Client) key() string { return c.User + "\x00" + c.UserAgent + "\x00" + c.SourceIP }

func (s *sim) agent(component, suffix string) string {
	a := component + "/" + s.version + " (linux/amd64) kubernetes/" + s.commit
	if suffix != "" {
		a += "/" + suffix
	}
	return a
}

// request is one API request before it is cut into audit stages.
type request struct {
	c       Client
	verb    string
	uri     string
	ref     auditv1.ObjectReference
	level   auditv1.Level
	status  *metav1.Status
	reqObj  []byte
	respObj []byte
}

// do emits the audit events of a request made at t that took latency:
// RequestReceived, then ResponseComplete (with a ResponseStarted for a
// watch). Events past the end of the trace are not written: the log ends
// there. It returns the audit ID.
func (s *sim) do(t time.Time, latency time.Duration, r request) string {
	id := s.uuid()
	t = t.UTC().Truncate(time.Microsecond)
	base := auditv1.Event{
		Level: r.level, AuditID: types.UID(id), RequestURI: r.uri, Verb: r.verb,
		User:      authnv1.UserInfo{Username: r.c.User, Groups: r.c.Groups},
		SourceIPs: []string{r.c.SourceIP}, UserAgent: r.c.UserAgent, ObjectRef: &r.ref,
		RequestReceivedTimestamp: metav1.NewMicroTime(t),
	}
	authz := map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""}
	emit := func(stage auditv1.Stage, at time.Time, complete bool) {
		if at.After(s.end) {
			return
		}
		ev := base
		ref := r.ref
		ev.ObjectRef = &ref
		ev.Stage = stage
		ev.StageTimestamp = metav1.NewMicroTime(at.UTC().Truncate(time.Microsecond))
		if stage != auditv1.StageRequestReceived {
			ev.ResponseStatus = r.status
			ev.Annotations = authz
		}
		if complete && r.level == auditv1.LevelRequestResponse {
			ev.RequestObject = unknown(r.reqObj)
			ev.ResponseObject = unknown(r.respObj)
		}
		s.events = append(s.events, ev)
	}
	if s.route != nil {
		srv := r.c.via
		if srv == "" {
			srv = s.route(r.c, t)
		}
		s.servers[id] = srv
	}
	emit(auditv1.StageRequestReceived, t, false)
	if r.verb == "watch" {
		emit(auditv1.StageResponseStarted, t.Add(s.between(300*time.Microsecond, 3*time.Millisecond)), false)
	}
	emit(auditv1.StageResponseComplete, t.Add(latency), true)
	return id
}

// resource is an API resource of the core group.
type resource struct{ name, kind string }

var (
	services   = resource{"services", "Service"}
	endpoints  = resource{"endpoints", "Endpoints"}
	pods       = resource{"pods", "Pod"}
	nodes      = resource{"nodes", "Node"}
	configmaps = resource{"configmaps", "ConfigMap"}
	namespaces = resource{"namespaces", "Namespace"}
	events     = resource{"events", "Event"}
)

var kinds = map[string]resource{}

func init() {
	for _, r := range []resource{services, endpoints, pods, nodes, configmaps, namespaces, events} {
		kinds[r.name] = r
	}
}

// path returns the collection path of resource in ns ("" for all or a
// cluster-scoped resource).
func path(res, ns string) string {
	if ns == "" {
		return "/api/v1/" + res
	}
	return "/api/v1/namespaces/" + ns + "/" + res
}

// write is a create, update or delete of one object. The audit level is
// RequestResponse when full is set, Metadata otherwise (the policy's
// choice). It returns the audit ID and the write's revision (0 for a
// failed write).
func (s *sim) write(t time.Time, c Client, verb string, res resource, ns, name string, full bool) (string, int64) {
	k := objKey{res.name, ns, name}
	obj := s.objs[k]
	r := request{c: c, verb: verb, level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIVersion: "v1"}}
	if full {
		r.level = auditv1.LevelRequestResponse
	}
	latency := s.between(2*time.Millisecond, 25*time.Millisecond)
	done := t.Add(latency)
	var rev int64
	switch verb {
	case "create":
		r.uri = path(res.name, ns)
		if obj != nil {
			r.status = &metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonAlreadyExists,
				Message: fmt.Sprintf("%s %q already exists", res.name, name), Details: &metav1.StatusDetails{Name: name, Kind: res.name}}
			r.respObj = statusJSON(r.status)
			break
		}
		rev = s.revAt(done)
		obj = &object{rv: rev, uid: s.uuid(), created: done.Truncate(time.Second)}
		s.objs[k] = obj
		r.status = &metav1.Status{Code: 201}
		r.ref.UID = types.UID(obj.uid)
		r.reqObj = s.objectJSON(res, ns, name, nil, 0)
		r.respObj = s.objectJSON(res, ns, name, obj, rev)
		s.record(res.name, histEntry{t: done, real: rev, delivered: rev})
	case "update":
		r.uri = path(res.name, ns) + "/" + name
		if obj == nil {
			r.status = notFound(res.name, name)
			r.respObj = statusJSON(r.status)
			break
		}
		r.ref.UID = types.UID(obj.uid)
		r.ref.ResourceVersion = strconv.FormatInt(obj.rv, 10) // from the request body
		r.reqObj = s.objectJSON(res, ns, name, obj, obj.rv)
		rev = s.revAt(done)
		obj.rv = rev
		r.status = &metav1.Status{Code: 200}
		r.respObj = s.objectJSON(res, ns, name, obj, rev)
		s.record(res.name, histEntry{t: done, real: rev, delivered: rev})
	case "delete":
		r.uri = path(res.name, ns) + "/" + name
		r.reqObj = []byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/__internal","propagationPolicy":"Background"}`)
		if obj == nil {
			r.status = notFound(res.name, name)
			r.respObj = statusJSON(r.status)
			break
		}
		rev = s.revAt(done)
		r.status = &metav1.Status{Status: metav1.StatusSuccess, Code: 200}
		r.respObj = statusJSON(&metav1.Status{Status: metav1.StatusSuccess,
			Details: &metav1.StatusDetails{Name: name, Kind: res.name, UID: types.UID(obj.uid)}})
		delivered := rev
		if s.buggy && res.name == "services" {
			delivered = obj.rv // the DELETE event carries the object's old resourceVersion
		}
		s.record(res.name, histEntry{t: done, real: rev, delivered: delivered})
		delete(s.objs, k)
	default:
		panic("scenario: write verb " + verb)
	}
	return s.do(t, latency, r), rev
}

// watch emits one watch of res (in ns, "" for all namespaces) from
// resourceVersion rv, started at t and ending after timeout; it returns
// the audit ID.
func (s *sim) watch(t time.Time, timeout time.Duration, c Client, res, ns, rv string, code int32) string {
	q := "resourceVersion=" + rv + "&timeoutSeconds=" + strconv.Itoa(int(timeout.Seconds())) + "&watch=true"
	if s.bookmarks() {
		q = "allowWatchBookmarks=true&" + q
	}
	if code == 0 {
		code = 200
	}
	st := &metav1.Status{Code: code}
	if code != 200 {
		st = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonTooManyRequests,
			Message: "storage is (re)initializing", Details: &metav1.StatusDetails{RetryAfterSeconds: 1}}
		timeout = s.between(time.Millisecond, 5*time.Millisecond)
	}
	id := s.do(t, timeout, request{c: c, verb: "watch", uri: path(res, ns) + "?" + q, level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res, Namespace: ns, APIVersion: "v1"}, status: st})
	s.noteWatch(c, res, ns, "", rv, id)
	return id
}

// list emits a list of res as a reflector makes it (resourceVersion=0,
// served from the watch cache) and returns the revision it returns.
func (s *sim) list(t time.Time, c Client, res, ns string) int64 {
	rev := s.currentRev(t)
	s.do(t, s.between(3*time.Millisecond, 40*time.Millisecond), request{c: c, verb: "list",
		uri: path(res, ns) + "?limit=500&resourceVersion=0", level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res, Namespace: ns, APIVersion: "v1"}, status: &metav1.Status{Code: 200}})
	delete(s.seen, reflectorKey{c.key(), res, ns, ""})
	return rev
}

// fullList emits a list as kubectl makes it, logged with its response
// (the list's resourceVersion in responseObject.metadata).
func (s *sim) fullList(t time.Time, c Client, res resource) int64 {
	rev := s.currentRev(t)
	body, _ := json.Marshal(map[string]any{"kind": res.kind + "List", "apiVersion": "v1",
		"metadata": map[string]string{"resourceVersion": strconv.FormatInt(rev, 10)}, "items": []any{}})
	s.do(t, s.between(5*time.Millisecond, 60*time.Millisecond), request{c: c, verb: "list",
		uri: path(res.name, "") + "?limit=500", level: auditv1.LevelRequestResponse,
		ref: auditv1.ObjectReference{Resource: res.name, APIVersion: "v1"}, status: &metav1.Status{Code: 200}, respObj: body})
	return rev
}

func (s *sim) bookmarks() bool { return s.bookmarksOn }

// watchList emits a watch-list (Kubernetes 1.27 and later: a list served
// as the initial events of a watch, sendInitialEvents=true) of res from
// rv, as a reflector relists; it ends after d (the initial events never
// reached their end bookmark, so the reflector will send it again). It
// resets the reflector's regressions truth, as a list does.
func (s *sim) watchList(t time.Time, d time.Duration, c Client, res, ns, rv string) string {
	q := "allowWatchBookmarks=true&"
	if rv != "" {
		q += "resourceVersion=" + rv + "&"
	}
	q += "resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=" + strconv.Itoa(int(s.scale.RestartMax.Seconds())) + "&watch=true"
	id := s.do(t, d, request{c: c, verb: "watch", uri: path(res, ns) + "?" + q, level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res, Namespace: ns, APIVersion: "v1"}, status: &metav1.Status{Code: 200}})
	delete(s.seen, reflectorKey{c.key(), res, ns, ""})
	return id
}

// noteWatch keeps the truth about regressions: a watch from a numeric
// resourceVersion below the highest the same reflector used since its
// last list.
func (s *sim) noteWatch(c Client, res, ns, sel, rv, id string) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n == 0 {
		return
	}
	k := reflectorKey{c.key(), res, ns, sel}
	seen := s.seen[k]
	if seen == nil {
		s.seen[k] = &rvSeen{max: n, maxID: id}
		return
	}
	if n < seen.max {
		reg := Regression{Client: c, Resource: res, Namespace: ns, ResourceVersion: rv, Previous: strconv.FormatInt(seen.max, 10)}
		if !slices.ContainsFunc(s.want.Regressions, func(r Regression) bool { return r.same(reg) }) {
			s.want.Regressions = append(s.want.Regressions, reg)
		}
		return
	}
	if n > seen.max {
		seen.max, seen.maxID = n, id
	}
}

// reflector is a client-go reflector: it watches one resource back to
// back, each watch ending at its timeout, and resumes from the
// resourceVersion rvAt gives for the restart time.
type reflector struct {
	c        Client
	clientAt func(t time.Time) Client // when set, the client of the watch at t (a reconnect through another address)
	res, ns  string
	rvAt     func(t time.Time) string
	onWatch  func(t time.Time, rv, auditID string) // called after each watch starts
	retries  func(t time.Time) int                 // failed attempts before a watch at t succeeds
	timeouts [2]time.Duration                      // default: the scale's restart interval
}

// run emits the reflector's watches from from until until.
func (s *sim) run(r reflector, from, until time.Time) {
	lo, hi := r.timeouts[0], r.timeouts[1]
	if lo == 0 {
		lo, hi = s.scale.RestartMin, s.scale.RestartMax
	}
	for t := from; t.Before(until); {
		rv := r.rvAt(t)
		c := r.c
		if r.clientAt != nil {
			c = r.clientAt(t)
		}
		if r.retries != nil {
			for range r.retries(t) {
				s.watch(t, 0, c, r.res, r.ns, rv, 429)
				t = t.Add(s.between(900*time.Millisecond, 1200*time.Millisecond))
			}
		}
		timeout := s.between(lo, hi).Truncate(time.Second)
		id := s.watch(t, timeout, c, r.res, r.ns, rv, 200)
		if r.onWatch != nil {
			r.onWatch(t, rv, id)
		}
		t = t.Add(timeout + s.between(time.Millisecond, 150*time.Millisecond))
	}
}

// objectJSON renders a Service or Endpoints object (other kinds get only
// metadata), with rv when obj is set.
func (s *sim) objectJSON(res resource, ns, name string, obj *object, rv int64) []byte {
	meta := map[string]any{"name": name, "namespace": ns}
	if obj != nil {
		meta["uid"] = obj.uid
		meta["resourceVersion"] = strconv.FormatInt(rv, 10)
		meta["creationTimestamp"] = obj.created.Format(time.RFC3339)
	}
	m := map[string]any{"kind": res.kind, "apiVersion": "v1", "metadata": meta}
	switch res.name {
	case "services":
		m["spec"] = map[string]any{"ports": []any{map[string]any{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}},
			"selector": map[string]string{"app": name}, "type": "ClusterIP"}
	case "endpoints":
		m["subsets"] = []any{map[string]any{
			"addresses": []any{map[string]any{"ip": fmt.Sprintf("10.244.%d.%d", s.rng.IntN(4), 2+s.rng.IntN(250)),
				"targetRef": map[string]string{"kind": "Pod", "namespace": ns, "name": name + "-" + s.suffix()}}},
			"ports": []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}}}}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("scenario: %v", err))
	}
	return b
}

func statusJSON(st *metav1.Status) []byte {
	v := *st
	v.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	b, err := json.Marshal(&v)
	if err != nil {
		panic(fmt.Sprintf("scenario: %v", err))
	}
	return b
}

func notFound(res, name string) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("%s %q not found", res, name), Details: &metav1.StatusDetails{Name: name, Kind: res}}
}

func unknown(raw []byte) *runtime.Unknown {
	if raw == nil {
		return nil
	}
	return &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
}

// uuid returns a random version 4 UUID.
func (s *sim) uuid() string { return auditgen.UUID(s.rng) }

// uid returns a UUID-shaped string that depends only on key.
func (s *sim) uid(key string) string { return auditgen.StableUID(key) }

func (s *sim) suffix() string { return auditgen.NameSuffix(s.rng) }

// sortEvents orders the events as the log backend writes them: by stage
// time.
func (s *sim) sortEvents() {
	slices.SortStableFunc(s.events, func(a, b auditv1.Event) int {
		return cmp.Or(a.StageTimestamp.Time.Compare(b.StageTimestamp.Time), cmp.Compare(string(a.AuditID), string(b.AuditID)))
	})
}
