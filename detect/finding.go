package detect

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Severity grades a finding. The zero value is invalid.
type Severity string

// Severities, from the least to the most urgent.
const (
	Info     Severity = "info"
	Warning  Severity = "warning"
	Critical Severity = "critical"
)

// rank orders severities; an unknown severity ranks below Info.
func (s Severity) rank() int {
	switch s {
	case Info:
		return 1
	case Warning:
		return 2
	case Critical:
		return 3
	}
	return 0
}

// AtLeast reports whether s is as urgent as min or more.
func (s Severity) AtLeast(min Severity) bool { return s.rank() >= min.rank() }

// ParseSeverity returns the severity named s (case-insensitive).
func ParseSeverity(s string) (Severity, error) {
	v := Severity(strings.ToLower(strings.TrimSpace(s)))
	if v.rank() == 0 {
		return "", fmt.Errorf("severity %q: want info, warning or critical", s)
	}
	return v, nil
}

// Finding is one incident a detector found: the JSON document of the
// findings API and of `auditlens detect` and `scan`. Its ID is stable: the
// same incident found again, in an overlapping window or a later run, has
// the same ID and is merged into the stored finding (see Merge).
type Finding struct {
	ID       string   `json:"id"`
	Detector string   `json:"detector"`
	Cluster  string   `json:"cluster"`
	Severity Severity `json:"severity"`
	// Confidence is how sure the detector is, from 0 to 1.
	Confidence float64 `json:"confidence"`
	Title      string  `json:"title"`
	// Summary is a paragraph a person can act on.
	Summary   string    `json:"summary"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	Subjects  Subjects  `json:"subjects"`
	// Objects are the API objects the incident hurt, sorted.
	Objects []Object `json:"objects"`
	// Evidence are the audit events that prove the finding, by time.
	Evidence    []Evidence `json:"evidence"`
	Remediation string     `json:"remediation"`
}

// Subjects name who did what to which resource. The first five are always
// present (empty when they do not apply); the rest only when a detector
// sets them.
type Subjects struct {
	User            string `json:"user"`
	UserAgent       string `json:"user_agent"`
	Resource        string `json:"resource"`
	APIGroup        string `json:"api_group"`
	ResourceVersion string `json:"resource_version"`
	// SourceIP is the client's address: several instances of one client
	// (kube-proxy on every node) share a user and user agent.
	SourceIP string `json:"source_ip,omitempty"`
	// Namespace of a namespaced watch; empty for a cluster-wide one.
	Namespace string `json:"namespace,omitempty"`
	// LabelSelector and FieldSelector of the watch, when it had them.
	LabelSelector string `json:"label_selector,omitempty"`
	FieldSelector string `json:"field_selector,omitempty"`
	// PreviousResourceVersion is, for a regression, the highest
	// resourceVersion the client had used before.
	PreviousResourceVersion string `json:"previous_resource_version,omitempty"`
	// StaleRVs are, for a watch loop, every stale resourceVersion the
	// reflector resumed from, by first use; ResourceVersion is the first.
	StaleRVs []StaleRV `json:"stale_rvs,omitempty"`
	// WatchRestarts counts the watches the client started from
	// ResourceVersion (quick retries counted once); for a watch loop, its
	// restarts from any of StaleRVs.
	WatchRestarts int `json:"watch_restarts,omitempty"`
	// Iterations counts the loop's turns: the watch restarts that were
	// followed by churn.
	Iterations int `json:"iterations,omitempty"`
	// APIServers are the user agents of the cluster's kube-apiservers
	// (their versions), as their own requests showed them.
	APIServers []string `json:"apiservers,omitempty"`
	// PartOf names the finding of the incident this one is part of (a
	// watch-rv-regression that began a watch loop).
	PartOf string `json:"part_of,omitempty"`
	// NodesLost counts the nodes a heartbeat-loss wave cut off, of the
	// NodesSeen heartbeating before it; PodsEvicted the pods deleted or
	// evicted by the node-lifecycle and taint-eviction controllers during
	// the wave.
	NodesLost   int `json:"nodes_lost,omitempty"`
	NodesSeen   int `json:"nodes_seen,omitempty"`
	PodsEvicted int `json:"pods_evicted,omitempty"`
	// LifecycleActive: the node-lifecycle controller's identity made
	// requests during the wave, so its reaction to lost nodes would show.
	LifecycleActive bool `json:"lifecycle_active,omitempty"`
	// Conflicts counts the writes answered 409 Conflict, and Relists the
	// lists, that an incident caused (rv-rollback: after the drop).
	Conflicts int `json:"conflicts,omitempty"`
	Relists   int `json:"relists,omitempty"`
	// Stuck are, for rv-rollback, the clients left watching or listing
	// from resourceVersions above the new head, by program.
	Stuck []StuckClient `json:"stuck,omitempty"`
}

// StaleRV is one stale resourceVersion a looping reflector resumed
// from: its first and latest restart from it and how many there were.
type StaleRV struct {
	RV       string    `json:"rv"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Restarts int       `json:"restarts"`
}

// CompareStaleRVs orders stale resourceVersions by first use.
func CompareStaleRVs(a, b StaleRV) int {
	if c := a.First.Compare(b.First); c != 0 {
		return c
	}
	return strings.Compare(a.RV, b.RV)
}

// MergeStaleRVs unions two lists of stale resourceVersions: per
// resourceVersion the earliest first use, the latest last and the larger
// count (each list may hold all of another's restarts).
func MergeStaleRVs(a, b []StaleRV) []StaleRV {
	out := slices.Clone(a)
	for _, s := range b {
		i := slices.IndexFunc(out, func(o StaleRV) bool { return o.RV == s.RV })
		if i < 0 {
			out = append(out, s)
			continue
		}
		o := &out[i]
		if s.First.Before(o.First) {
			o.First = s.First
		}
		if s.Last.After(o.Last) {
			o.Last = s.Last
		}
		o.Restarts = max(o.Restarts, s.Restarts)
	}
	slices.SortFunc(out, CompareStaleRVs)
	if len(out) > MaxStaleRVs {
		out = out[:MaxStaleRVs]
	}
	return out
}

// StuckClient is one program's requests from resourceVersions above a
// rolled-back cluster's head: from when, until when (the head passed the
// resourceVersion, or its last such request ended), how many instances
// (users and addresses), which resources, and the lowest and highest
// resourceVersion asked for.
type StuckClient struct {
	Program   string    `json:"program"`
	Instances int       `json:"instances"`
	Resources []string  `json:"resources"`
	MinRV     string    `json:"min_rv"`
	MaxRV     string    `json:"max_rv"`
	From      time.Time `json:"from"`
	Until     time.Time `json:"until"`
}

// Object names one API object.
type Object struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String names the object as kubectl would: "endpoints web/frontend".
func (o Object) String() string {
	if o.Namespace == "" {
		return o.Resource + "/" + o.Name
	}
	return o.Resource + " " + o.Namespace + "/" + o.Name
}

// CompareObjects orders objects by resource, namespace and name.
func CompareObjects(a, b Object) int {
	return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// Evidence is the key fields of one audit event that supports a finding.
type Evidence struct {
	AuditID    string    `json:"audit_id"`
	Stage      string    `json:"stage"`
	Time       time.Time `json:"time"`
	Verb       string    `json:"verb"`
	Resource   string    `json:"resource"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	User       string    `json:"user"`
	RequestURI string    `json:"request_uri"`
	Code       int32     `json:"code"`
	// Role says what the event shows; each detector documents its roles.
	Role string `json:"role,omitempty"`
	// ResourceVersion is the resourceVersion the event shows: the one a
	// watch or list asked for, or the one a write produced.
	ResourceVersion string `json:"resource_version,omitempty"`
	// WatchAuditID links the event to the watch it followed.
	WatchAuditID string `json:"watch_audit_id,omitempty"`
}

// key identifies an evidence event: one request in one role, whatever
// stage of it a window happened to hold.
func (e Evidence) key() string { return e.AuditID + "\x00" + e.Role }

// stageRank orders the stages of a request.
func stageRank(stage string) int {
	switch stage {
	case "RequestReceived":
		return 0
	case "ResponseStarted":
		return 1
	case "ResponseComplete":
		return 2
	}
	return 3
}

func compareEvidence(a, b Evidence) int {
	return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.AuditID, b.AuditID),
		cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Role, b.Role))
}

// FindingID returns the stable ID of an incident: a hash of the detector,
// the cluster and the parts that identify the incident (for the watch
// loop: the client, the resource and the static resourceVersion). The same
// parts always give the same ID.
func FindingID(detector, cluster string, identity ...string) string {
	h := sha256.New()
	for _, s := range append([]string{detector, cluster}, identity...) {
		// Length-prefixed, so that ("ab","c") and ("a","bc") differ.
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return detector + "-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// DefaultMaxEvidence bounds the evidence of a merged finding.
const DefaultMaxEvidence = 1000

// Merge combines a stored finding with the same incident found again:
// first_seen is the earliest and last_seen the latest of both, objects and
// evidence are the union (evidence deduplicated by audit ID and role,
// keeping the earliest stage of a request, sorted by time, and thinned to maxEvidence items by dropping from
// the middle: the start and the latest turns of an incident matter most),
// severity and confidence are the higher of both, and the rest (title,
// summary, subjects, remediation) comes from next. Detectors whose
// findings carry counts recompute them after Merge (see Merger).
func Merge(prev, next Finding, maxEvidence int) Finding {
	if maxEvidence <= 0 {
		maxEvidence = DefaultMaxEvidence
	}
	out := next
	if !prev.FirstSeen.IsZero() && (out.FirstSeen.IsZero() || prev.FirstSeen.Before(out.FirstSeen)) {
		out.FirstSeen = prev.FirstSeen
	}
	if prev.LastSeen.After(out.LastSeen) {
		out.LastSeen = prev.LastSeen
	}
	if prev.Severity.rank() > out.Severity.rank() {
		out.Severity = prev.Severity
	}
	out.Confidence = max(out.Confidence, prev.Confidence)

	objs := append(slices.Clone(prev.Objects), next.Objects...)
	slices.SortFunc(objs, CompareObjects)
	out.Objects = slices.Compact(objs)

	at := make(map[string]int, len(prev.Evidence)+len(next.Evidence))
	ev := make([]Evidence, 0, len(prev.Evidence)+len(next.Evidence))
	for _, list := range [][]Evidence{prev.Evidence, next.Evidence} {
		for _, e := range list {
			i, ok := at[e.key()]
			switch {
			case !ok:
				at[e.key()] = len(ev)
				ev = append(ev, e)
			case stageRank(e.Stage) < stageRank(ev[i].Stage):
				// Two windows held different stages of one request: keep
				// the earliest, when it was made.
				ev[i] = e
			}
		}
	}
	slices.SortFunc(ev, compareEvidence)
	if len(ev) > maxEvidence {
		head := maxEvidence / 2
		ev = append(ev[:head:head], ev[len(ev)-(maxEvidence-head):]...)
	}
	out.Evidence = ev
	return out
}

// Normalize puts a finding in its canonical form: UTC times, sorted
// objects and evidence, empty lists rather than null.
func (f *Finding) Normalize() {
	f.FirstSeen, f.LastSeen = f.FirstSeen.UTC(), f.LastSeen.UTC()
	if f.Objects == nil {
		f.Objects = []Object{}
	}
	if f.Evidence == nil {
		f.Evidence = []Evidence{}
	}
	for i := range f.Evidence {
		f.Evidence[i].Time = f.Evidence[i].Time.UTC()
	}
	slices.SortFunc(f.Objects, CompareObjects)
	f.Objects = slices.Compact(f.Objects)
	slices.SortFunc(f.Evidence, compareEvidence)
}

// SortFindings orders findings by severity (most urgent first), then by
// last_seen (newest first), then by ID.
func SortFindings(fs []Finding) {
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(b.Severity.rank(), a.Severity.rank()), b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.ID, b.ID))
	})
}

// MaxStaleRVs bounds the stale resourceVersions a history remembers.
const MaxStaleRVs = 64

// RoleRelist is the evidence role of a client's list (or watch-list) that
// started it over: a lost node's kubelet after it came back
// (heartbeat-loss), a client after a rollback (rv-rollback), each client
// of a herd (relist-herd), the list after a short watch (relist-loop).
const RoleRelist = "relist"
