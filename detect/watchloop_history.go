package detect

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// What the watch-loop detector remembers between evaluations (in the
// detector_state table, through a StateStore): one history per reflector
// and static resourceVersion that was ever followed by churn, and one head
// per cluster.

// history is one reflector's watches from one static resourceVersion.
type history struct {
	Reflector reflector `json:"reflector"`
	RV        string    `json:"rv"`
	// UserAgent is the newest user agent of the reflector's watches;
	// SourceIPs the addresses they came from (up to 16).
	UserAgent string   `json:"user_agent"`
	SourceIPs []string `json:"source_ips,omitempty"`
	// FirstSeen and LastSeen are the first and latest restart from RV;
	// CountedUntil the latest restart already counted.
	FirstSeen    time.Time `json:"first_seen"`
	LastSeen     time.Time `json:"last_seen"`
	CountedUntil time.Time `json:"counted_until"`
	// Restarts counts the restarts from RV (quick retries once);
	// Iterations those that churn followed, the last at LastIteration.
	Restarts      int       `json:"restarts"`
	Iterations    int       `json:"iterations"`
	LastIteration time.Time `json:"last_iteration,omitzero"`
	// Victims are the churned objects (up to maxVictims).
	Victims []Object `json:"victims,omitempty"`
	// Confirmed is set once the history made a finding: from then on every
	// restart from RV extends it.
	Confirmed bool `json:"confirmed,omitempty"`
	// Advance is the request that first proved the cluster past RV.
	Advance *rvSeen `json:"advance,omitempty"`
}

func newHistory(g watchGroup) *history {
	return &history{Reflector: g.reflector, RV: g.RV, UserAgent: g.UserAgent}
}

func (h *history) clone() history {
	c := *h
	c.SourceIPs = slices.Clone(h.SourceIPs)
	c.Victims = slices.Clone(h.Victims)
	return c
}

func (h *history) key() string { return stateKey(h.Reflector.Cluster, h.Reflector.Ident, h.RV) }

// rvSeen is one request that showed a resourceVersion.
type rvSeen struct {
	RV      string    `json:"rv"`
	AuditID string    `json:"audit_id"`
	Time    time.Time `json:"time"`
}

// head is what a cluster showed of itself: the highest resourceVersion
// any request carried, and the kube-apiservers' own user agents (their
// version is the one the DELETE-event bug depends on).
type head struct {
	Top        rvSeen   `json:"top"`
	APIServers []string `json:"apiservers,omitempty"`
}

// beyond reports whether the cluster was seen past rv.
func (h *head) beyond(rv string) bool {
	c, ok := compareRV(h.Top.RV, rv)
	return ok && c > 0
}

const headKey = "head"

// memory is the detector's state for one evaluation: what was loaded,
// and which heads changed.
type memory struct {
	hists       map[string]*history // by stateKey
	heads       map[string]*head    // by cluster
	headChanged map[string]bool
	until       time.Time
}

func stateKey(cluster, ident, rv string) string { return cluster + "\x00" + ident + "/" + rv }

// load reads the remembered histories and heads of the window's clusters
// (nothing without a StateStore).
func (d *WatchLoop) load(ctx context.Context, st StateStore, w Window) (*memory, error) {
	m := &memory{hists: map[string]*history{}, heads: map[string]*head{}, headChanged: map[string]bool{}, until: w.Until}
	if st == nil {
		return m, nil
	}
	recs, err := st.LoadState(ctx, WatchLoopName, w.Clusters, w.Since.Add(-d.cfg.Remember))
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
		if h.Reflector.Cluster != r.Cluster || h.Reflector.Ident+"/"+h.RV != r.Key {
			continue // not what this version of the detector wrote
		}
		m.hists[h.key()] = &h
	}
	return m, nil
}

// keys returns the identities of the remembered histories, as the watch
// groups query names them ("ident/rv").
func (m *memory) keys() []string {
	out := make([]string, 0, len(m.hists))
	for _, h := range m.hists {
		out = append(out, h.Reflector.Ident+"/"+h.RV)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// observeHeads merges what the window showed of each cluster.
func (m *memory) observeHeads(rows []headRow) {
	for _, r := range rows {
		h := m.heads[r.Cluster]
		if h == nil {
			h = &head{}
			m.heads[r.Cluster] = h
		}
		if r.Top > 0 {
			if c, ok := compareRV(fmtRV(r.Top), h.Top.RV); h.Top.RV == "" || ok && c > 0 {
				h.Top = rvSeen{RV: fmtRV(r.Top), AuditID: r.TopID, Time: micros(r.TopUS)}
				m.headChanged[r.Cluster] = true
			}
		}
		if merged := mergeStrings(h.APIServers, r.APIServers); !slices.Equal(merged, h.APIServers) {
			h.APIServers = merged
			m.headChanged[r.Cluster] = true
		}
	}
}

// save stores the histories and the heads that changed.
func (m *memory) save(ctx context.Context, st StateStore, hists []*history) error {
	if st == nil {
		return nil
	}
	var recs []StateRecord
	for _, h := range hists {
		body, err := json.Marshal(h)
		if err != nil {
			return err
		}
		recs = append(recs, StateRecord{Detector: WatchLoopName, Cluster: h.Reflector.Cluster,
			Key: h.Reflector.Ident + "/" + h.RV, LastSeen: h.LastSeen, Body: body})
	}
	for _, cluster := range sortedKeys(m.headChanged) {
		h := m.heads[cluster]
		body, err := json.Marshal(h)
		if err != nil {
			return err
		}
		recs = append(recs, StateRecord{Detector: WatchLoopName, Cluster: cluster, Key: headKey, LastSeen: m.until, Body: body})
	}
	return st.SaveState(ctx, recs)
}

// headRow is what one window showed of a cluster.
type headRow struct {
	Cluster    string   `json:"cluster"`
	Top        uint64   `json:"top"`
	TopID      string   `json:"top_id"`
	TopUS      int64    `json:"top_us"`
	APIServers []string `json:"apiservers"`
}

// headsSQL finds the highest integer resourceVersion any request of the
// window carried (asked for in a watch or list, in objectRef, or in a
// response), and the kube-apiservers' own user agents. It reads without
// FINAL: maxima do not change with duplicate rows.
const headsSQL = `SELECT cluster, max(v) AS top, argMax(audit_id, v) AS top_id, argMax(toUnixTimestamp64Micro(ts), v) AS top_us,
       arraySort(groupUniqArrayIf(16)(toString(user_agent), startsWith(user_agent, 'kube-apiserver/'))) AS apiservers
FROM (
    SELECT cluster, audit_id, ts, user_agent,
           greatest(toUInt64OrZero(req_rv), toUInt64OrZero(response_rv), toUInt64OrZero(object_rv)) AS v
    FROM audit_events
    WHERE %WINDOW%
)
GROUP BY cluster`

func selectHeads(ctx context.Context, q Querier, w Window) ([]headRow, error) {
	p := store.Params{}
	var out []headRow
	err := selectRows(ctx, q, "resourceVersions seen", strings.Replace(headsSQL, "%WINDOW%", windowParams(w, p), 1), p,
		func(r headRow) error {
			out = append(out, r)
			return nil
		})
	return out, err
}
