package watchloop

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"

	"github.com/auditlens/auditlens/store"
)

// What the watch-loop detector remembers between evaluations (in the
// detector_state table, through a StateStore): one history per reflector
// that was ever followed by churn, and one head per cluster.

// history is one reflector's walk through its watch restarts: where it
// stands (the highest resourceVersion it used since it last relisted,
// whether a loop episode is under way) and what the loop it made so far
// counts.
type history struct {
	Reflector events.Reflector `json:"reflector"`
	// UserAgent is the newest user agent of the reflector's watches;
	// SourceIPs the addresses they came from (up to 16).
	UserAgent string   `json:"user_agent"`
	SourceIPs []string `json:"source_ips,omitempty"`
	// Streams are where the walk stands in each client of the program
	// that watches the resource, by user agent: each resumes from its own
	// resourceVersion (kube-controller-manager's typed and metadata
	// informers are two; a new process of the program, after a leader
	// change or an upgrade, starts over with a list anyway).
	Streams map[string]*stream `json:"streams,omitempty"`
	// LastRV and CountedUntil are the resourceVersion and start of the
	// latest request walked: a later watch from LastRV within
	// RetrySpacing is a quick retry of it.
	LastRV       string    `json:"last_rv,omitempty"`
	CountedUntil time.Time `json:"counted_until"`
	// FirstSeen and LastSeen are the first and latest restart of the
	// loop.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Restarts counts the loop's restarts (quick retries once);
	// Iterations those that churn followed, the last at LastIteration.
	Restarts      int       `json:"restarts"`
	Iterations    int       `json:"iterations"`
	LastIteration time.Time `json:"last_iteration,omitzero"`
	// StaleRVs are the stale resourceVersions the loop resumed from, by
	// first use (up to maxStaleRVs): it drifts when other objects of the
	// resource are deleted while it runs.
	StaleRVs []detect.StaleRV `json:"stale_rvs,omitempty"`
	// Victims are the churned objects (up to maxVictims).
	Victims []detect.Object `json:"victims,omitempty"`
	// Confirmed is set once the history made a finding: from then on every
	// episode of the reflector extends it.
	Confirmed bool `json:"confirmed,omitempty"`
	// Advance is the request that proved the cluster past the highest
	// stale resourceVersion.
	Advance *rvSeen `json:"advance,omitempty"`
}

// stream is where one client's walk stands.
type stream struct {
	// High is the highest integer resourceVersion the client resumed
	// from since its last relist (0: unknown). A restart from it or below
	// is stale: the client had already been there.
	High uint64 `json:"high,omitempty"`
	// Listed: the walk saw the client relist, so the first watch after
	// it resumes from what the list returned, a fresh resourceVersion,
	// although High does not know it yet.
	Listed bool `json:"listed,omitempty"`
	// InLoop: an episode of the loop is under way — from a restart that
	// went back below High, or one churn followed from a stale
	// resourceVersion (see Pending), until the client relists or resumes
	// from above High.
	InLoop bool `json:"in_loop,omitempty"`
	// Held: the episode began with churn, not with a restart that went
	// back; its restarts are held in Pending.
	Held bool `json:"held,omitempty"`
	// Lead is the run of restarts from one resourceVersion that the walk
	// began with, before it knew any higher one (the log or the detector
	// came after the loop began): when churn follows the run, the loop
	// had begun before it, and the run is counted with it.
	Lead *detect.StaleRV `json:"lead,omitempty"`
	// Pending are the restarts of an episode that churn began (not a
	// restart that went back) and that has not yet shown enough to be the
	// loop's on its own (MinRestarts, MinIterations, MinFollowedRatio):
	// a quiet reflector whose restarts happen to precede unrelated churn
	// is no loop. They join the history once it has; an episode that ends
	// before is forgotten.
	Pending []pendingRestarts `json:"pending,omitempty"`
	// pendingBursts are this evaluation's bursts among Pending.
	pendingBursts []int
}

// pendingRestarts are n restarts of an episode from one resourceVersion,
// the first at First and the last at Last, iterations of them followed by
// churn.
type pendingRestarts struct {
	RV          string    `json:"rv"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	N           int       `json:"n"`
	Iterations  int       `json:"iterations,omitempty"`
	LastChurned time.Time `json:"last_churned,omitzero"`
}

// maxPending bounds the restarts an episode holds back.
const maxPending = 64

// stream returns the walk of a client, created when new.
func (h *history) stream(agent string) *stream {
	if h.Streams == nil {
		h.Streams = map[string]*stream{}
	}
	s := h.Streams[agent]
	if s == nil {
		if len(h.Streams) >= maxStreams {
			return &stream{} // not remembered: a program with that many clients on one resource is no reflector
		}
		s = &stream{}
		h.Streams[agent] = s
	}
	return s
}

// maxStreams bounds the clients of one program a history walks.
const maxStreams = 16

func newHistory(g events.WatchGroup) *history {
	return &history{Reflector: g.Reflector, UserAgent: g.UserAgent}
}

func (h *history) clone() history {
	c := *h
	if h.Streams != nil {
		c.Streams = make(map[string]*stream, len(h.Streams))
		for k, v := range h.Streams {
			sc := *v
			if v.Lead != nil {
				l := *v.Lead
				sc.Lead = &l
			}
			sc.Pending = slices.Clone(v.Pending)
			sc.pendingBursts = slices.Clone(v.pendingBursts)
			c.Streams[k] = &sc
		}
	}
	c.SourceIPs = slices.Clone(h.SourceIPs)
	c.Victims = slices.Clone(h.Victims)
	c.StaleRVs = slices.Clone(h.StaleRVs)
	return c
}

func (h *history) key() string { return events.StateKey(h.Reflector.Cluster, h.Reflector.Ident) }

// stale records n restarts of the loop from rv, the first at t, the last
// at last.
func (h *history) stale(rv string, t, last time.Time, n int) {
	for i := range h.StaleRVs {
		if h.StaleRVs[i].RV == rv {
			s := &h.StaleRVs[i]
			s.Restarts += n
			if t.Before(s.First) {
				s.First = t
			}
			if last.After(s.Last) {
				s.Last = last
			}
			return
		}
	}
	if len(h.StaleRVs) < detect.MaxStaleRVs {
		h.StaleRVs = append(h.StaleRVs, detect.StaleRV{RV: rv, First: t, Last: last, Restarts: n})
		slices.SortFunc(h.StaleRVs, detect.CompareStaleRVs)
	}
}

// maxStaleRV is the highest integer stale resourceVersion.
func (h *history) maxStaleRV() string {
	top, v := "", uint64(0)
	for _, s := range h.StaleRVs {
		if n, err := strconv.ParseUint(s.RV, 10, 64); err == nil && (top == "" || n > v) {
			top, v = s.RV, n
		}
	}
	return top
}

// remembered is the time the history is kept from: its loop's latest
// restart, or the latest request walked when it counted none.
func (h *history) remembered() time.Time {
	if h.LastSeen.IsZero() {
		return h.CountedUntil
	}
	return h.LastSeen
}

// rvSeen is one request that showed a resourceVersion.
type rvSeen struct {
	RV      string    `json:"rv"`
	AuditID string    `json:"audit_id"`
	Time    time.Time `json:"time"`
}

// rv is the resourceVersion seen ("" for none).
func (r *rvSeen) rv() string {
	if r == nil {
		return ""
	}
	return r.RV
}

// head is what the detector remembers of a cluster: the highest
// resourceVersion a proof of advance found (a cache: a loop from a lower
// one needs no query), and the kube-apiservers' own user agents (their
// version is the one the DELETE-event bug depends on).
type head struct {
	Top        rvSeen   `json:"top"`
	APIServers []string `json:"apiservers,omitempty"`
}

// beyond reports whether the cluster was seen past rv.
func (h *head) beyond(rv string) bool {
	c, ok := detect.CompareRV(h.Top.RV, rv)
	return ok && c > 0
}

const headKey = "head"

// memory is the detector's state for one evaluation: what was loaded,
// and which heads changed.
type memory struct {
	hists       map[string]*history // by stateKey
	heads       map[string]*head    // by cluster
	headChanged map[string]bool
	uaRead      map[string]bool // clusters whose apiserver user agents this evaluation read
	until       time.Time
}

// historyKey is the detector_state key of a reflector's history. Keys of
// the detector's earlier, per-resourceVersion histories ("ident/rv") never
// take this form, so load skips them.
func historyKey(ident string) string { return "loop/" + ident }

// load reads the remembered histories and heads of the window's clusters
// (nothing without a StateStore).
func (d *WatchLoop) load(ctx context.Context, st detect.StateStore, w detect.Window) (*memory, error) {
	m := &memory{hists: map[string]*history{}, heads: map[string]*head{}, headChanged: map[string]bool{}, uaRead: map[string]bool{}, until: w.Until}
	if st == nil {
		return m, nil
	}
	recs, err := st.LoadState(ctx, Name, w.Clusters, w.Since.Add(-d.cfg.Remember))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Key == headKey {
			var h head
			if err := json.Unmarshal(r.Body, &h); err != nil {
				return nil, fmt.Errorf("decoding the remembered head of cluster %s: %w", r.Cluster, err)
			}
			m.heads[r.Cluster] = &h
			continue
		}
		var h history
		if err := json.Unmarshal(r.Body, &h); err != nil {
			return nil, fmt.Errorf("decoding remembered watch history %s of cluster %s: %w", r.Key, r.Cluster, err)
		}
		if h.Reflector.Cluster != r.Cluster || historyKey(h.Reflector.Ident) != r.Key {
			continue // not what this version of the detector wrote
		}
		m.hists[h.key()] = &h
	}
	return m, nil
}

// keys returns the idents of the remembered reflectors.
func (m *memory) keys() []string {
	out := make([]string, 0, len(m.hists))
	for _, h := range m.hists {
		out = append(out, h.Reflector.Ident)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// advance returns the proof that cluster moved past rv: the history's
// own (known), else the cluster's remembered head when it is higher, else
// the first request of the window that showed a higher resourceVersion
// (remembered as the head when it is higher than the head). nil when there is none, or rv is not an
// integer (resourceVersions are opaque to clients; only etcd's integers
// order).
func (m *memory) advance(ctx context.Context, q detect.Querier, w detect.Window, cluster, rv string, known *rvSeen) (*rvSeen, error) {
	if known != nil {
		return known, nil
	}
	if h := m.heads[cluster]; h != nil && h.beyond(rv) {
		top := h.Top
		return &top, nil
	}
	if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
		return nil, nil
	}
	cw := w
	cw.Clusters = []string{cluster}
	p := store.Params{"rv": rv}
	var found *rvSeen
	for _, sql := range proofSQLs {
		err := detect.SelectRows(ctx, q, "a newer resourceVersion", sql(detect.WindowParams(cw, p)), p,
			func(r struct {
				AuditID string `json:"audit_id"`
				V       uint64 `json:"v"`
				T       int64  `json:"t"`
			}) error {
				found = &rvSeen{RV: detect.FormatRV(r.V), AuditID: r.AuditID, Time: detect.Micros(r.T)}
				return nil
			})
		if err != nil {
			return nil, err
		}
		if found != nil {
			break
		}
	}
	if found == nil {
		return nil, nil
	}
	h := m.head(cluster)
	if c, ok := detect.CompareRV(found.RV, h.Top.RV); h.Top.RV == "" || ok && c > 0 {
		h.Top = *found
		m.headChanged[cluster] = true
	}
	return found, nil
}

func (m *memory) head(cluster string) *head {
	h := m.heads[cluster]
	if h == nil {
		h = &head{}
		m.heads[cluster] = h
	}
	return h
}

// apiservers returns the cluster's head with the kube-apiservers' user
// agents the window shows added (once per evaluation).
func (m *memory) apiservers(ctx context.Context, q detect.Querier, w detect.Window, cluster string) (*head, error) {
	h := m.head(cluster)
	if m.uaRead[cluster] {
		return h, nil
	}
	m.uaRead[cluster] = true
	cw := w
	cw.Clusters = []string{cluster}
	p := store.Params{}
	err := detect.SelectRows(ctx, q, "kube-apiserver user agents", apiserverAgentsSQL(detect.WindowParams(cw, p)), p,
		func(r struct {
			Agents []string `json:"agents"`
		}) error {
			if merged := detect.MergeStrings(h.APIServers, r.Agents); !slices.Equal(merged, h.APIServers) {
				h.APIServers = merged
				m.headChanged[cluster] = true
			}
			return nil
		})
	return h, err
}

// proofSQLs find the first request of the window that showed an integer
// resourceVersion above {rv}: first among watches and lists (a small part
// of the events, which the sort key lets the engine find), then among all
// requests (objectRef, response objects).
var proofSQLs = []func(window string) string{
	func(window string) string {
		return `SELECT audit_id, toUInt64OrZero(req_rv) AS v, toUnixTimestamp64Micro(ts) AS t
FROM audit_events
WHERE ` + window + ` AND verb IN ('watch', 'list') AND toUInt64OrZero(req_rv) > {rv:UInt64}
ORDER BY ts, audit_id
LIMIT 1`
	},
	func(window string) string {
		return `SELECT audit_id, v, toUnixTimestamp64Micro(ts) AS t FROM (
    SELECT audit_id, ts, greatest(toUInt64OrZero(req_rv), toUInt64OrZero(response_rv), toUInt64OrZero(object_rv)) AS v
    FROM audit_events
    WHERE ` + window + `
)
WHERE v > {rv:UInt64}
ORDER BY ts, audit_id
LIMIT 1`
	},
}

// apiserverAgentsSQL reads the kube-apiservers' own user agents: their
// loopback requests name their version.
func apiserverAgentsSQL(window string) string {
	return `SELECT arraySort(groupUniqArray(16)(toString(user_agent))) AS agents
FROM audit_events
WHERE ` + window + ` AND startsWith(user_agent, 'kube-apiserver/')`
}

// save stores the histories and the heads that changed.
func (m *memory) save(ctx context.Context, st detect.StateStore, hists []*history) error {
	if st == nil {
		return nil
	}
	var recs []detect.StateRecord
	for _, h := range hists {
		body, err := json.Marshal(h)
		if err != nil {
			return err
		}
		recs = append(recs, detect.StateRecord{Detector: Name, Cluster: h.Reflector.Cluster,
			Key: historyKey(h.Reflector.Ident), LastSeen: h.remembered(), Body: body})
	}
	for _, cluster := range slices.Sorted(maps.Keys(m.headChanged)) {
		h := m.heads[cluster]
		body, err := json.Marshal(h)
		if err != nil {
			return err
		}
		recs = append(recs, detect.StateRecord{Detector: Name, Cluster: cluster, Key: headKey, LastSeen: m.until, Body: body})
	}
	return st.SaveState(ctx, recs)
}
