package relist

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/store"

	refl "github.com/auditlens/auditlens/internal/reflector"
)

// HerdName is the name of the relist-herd detector.
const HerdName = "relist-herd"

// herdCauses are the detectors whose findings explain a relist herd: when
// one covers the herd's time in its cluster, the herd is part of it.
var herdCauses = []string{heartbeatloss.Name, rollback.Name}

// HerdConfig holds the relist-herd detector's parameters. Zero
// fields take the defaults.
type HerdConfig struct {
	// Resources limits the detector to these resources (default: all).
	Resources []string
	// MinClients is the fewest distinct clients relisting one resource
	// within a minute that make a herd (default 10).
	MinClients int
	// Factor: a herd is at least Factor times the cluster's usual number
	// of clients relisting the resource in a minute (default 5). The usual
	// number is the median over the window's minutes (60 s windows every
	// 30 s, from the cluster's first to its last event in the window), so
	// it is learnt from the same hour that shows the herd.
	Factor float64
	// LinkBefore and LinkAfter widen a heartbeat-loss or rv-rollback
	// finding's first_seen–last_seen when looking for the herds it
	// explains (defaults 2m and 10m): kubelets relist when they reconnect,
	// at the end of a heartbeat gap; clients relist after a restore once
	// the apiserver is back.
	LinkBefore, LinkAfter time.Duration
	// LookBack is how far before the window the detector reads the
	// clients' earlier requests, so that a read early in the window of a
	// target its client had read before the window is a relist (default
	// 30m: longer than a watch lasts, 5–10 minutes, so a client that
	// holds a target shows a request of it in the look-back).
	LookBack time.Duration
	// Remember is how long a herd is remembered, so that later windows,
	// which see its start cut off, give it the same ID (default 2h).
	Remember time.Duration
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *HerdConfig) setDefaults() {
	if c.MinClients <= 0 {
		c.MinClients = 10
	}
	if c.Factor <= 0 {
		c.Factor = 5
	}
	if c.LinkBefore <= 0 {
		c.LinkBefore = 2 * time.Minute
	}
	if c.LinkAfter <= 0 {
		c.LinkAfter = 10 * time.Minute
	}
	if c.LookBack <= 0 {
		c.LookBack = 30 * time.Minute
	}
	if c.Remember <= 0 {
		c.Remember = 2 * time.Hour
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = detect.DefaultMaxEvidence
	}
}

// Herd detects many clients relisting the same resource at once: a
// cluster-wide relist herd, as when every kubelet reconnects after a load
// balancer dropped their connections (seed 004), or every client relists
// after etcd was restored and the apiserver restarted (seed 003). Each
// relist is a full list the apiservers serve; thousands at once can
// overload them and etcd.
//
// A relist is as internal/reflector defines it: a list (a list without a
// continue token — the pages of a paginated list are one relist — or a
// watch-list, sendInitialEvents=true, how reflectors relist since 1.32)
// of a target (resource, namespace, name and selectors: the same
// collection or object) that the same client had already read or watched
// earlier in the window or in the LookBack before it. A client's first
// read of a target is no relist: nodes or controllers starting together,
// or the kubelets a Deployment's rollout lands pods on, each reading the
// pod's ConfigMaps and Secrets for the first time (one field-selected
// read per object). A client is a program instance: user, user-agent
// product, address (the kubelets of different nodes, the kube-proxies of
// different nodes, the pods of a Deployment are different clients; one
// program's many informers are one); a kubelet is one client whatever its
// address.
//
// What it claims: within 60 seconds at least MinClients distinct clients
// relisted one resource, and at least Factor times as many as the
// cluster's median for that resource over the window (a
// kube-controller-manager starting lists every resource, but it is one
// client). Overlapping 60 s windows of a herd are one herd.
//
// One finding per herd (cluster, resource, start). Evidence: RoleRelist,
// each client's first relist in the herd (User is the client). Severity
// warning; when a heartbeat-loss or rv-rollback finding of the same
// cluster covers the herd's time (their detectors run before this one),
// the herd is part of that incident: Subjects.PartOf names it and the herd
// is information.
type Herd struct {
	cfg HerdConfig
	// figs keeps, by finding ID, the figures of the latest evaluations,
	// which the text of a merged finding names.
	figs *recent[herdFigures]
}

// NewHerd returns the detector with cfg's parameters.
func NewHerd(cfg HerdConfig) *Herd {
	cfg.setDefaults()
	return &Herd{cfg: cfg, figs: newRecent[herdFigures](recentFindings)}
}

// Name implements Detector.
func (d *Herd) Name() string { return HerdName }

// Follows implements Follower: a herd is explained by the heartbeat-loss
// and rv-rollback findings around it.
func (d *Herd) Follows() []string { return herdCauses }

// Config returns the parameters in effect.
func (d *Herd) Config() HerdConfig { return d.cfg }

const herdStep = 30 * time.Second

// herdRequestsSQL returns one row per request (audit ID) that read or
// watched a resource (reflector.SeenSQL) from the look-back's start
// (window: the window widened by LookBack), with r_relist true for
// the relists (reflector.RelistSQL of the lists, reflector.ListSQL) and
// r_in for the requests the window holds (a stage at or after {judge}).
// columns are further columns of each request (aggregates of its stages,
// named g_*); where narrows the rows. A request that failed
// read nothing: a kubelet's watch-list of a new Pod's ConfigMap that the
// Node authorizer refuses (403, its graph not yet updated) and the list it
// falls back to at once are one first read, not a read and a relist.
// Each request's r_epoch is its namespace's last deletion before it
// (reflector.EpochSQL).
func herdRequestsSQL(window, columns, where string) string {
	return `SELECT *, ` + refl.RelistSQL + ` AS r_relist
FROM (` + refl.EpochSQL(`
        SELECT cluster, audit_id, any(api_group) AS r_api_group, any(resource) AS r_resource, any(namespace) AS r_namespace,
               any(g_client) AS r_client, any(g_target) AS r_target, min(g_start) AS r_start, max(g_read) AS r_read,
               max(ts) >= {judge:DateTime64(6, 'UTC')} AS r_in, max(code) AS r_code`+columns+`
        FROM (
            SELECT *, request_uri, received_at, `+refl.ClientSQL+` AS g_client, `+refl.TargetSQL+` AS g_target,
                   `+refl.StartSQL+` AS g_start, `+refl.ListSQL+` AS g_read
            FROM audit_events -- a subquery: the aliases above would shadow these columns in WHERE
            WHERE `+window+` AND `+refl.SeenSQL+where+`
        )
        GROUP BY cluster, audit_id
        HAVING r_code = 0 OR (r_code >= 200 AND r_code < 300)`, window) + `
)`
}

// herdCountsSQL counts, for each resource, the distinct clients that
// relisted it in each 60 s window starting every 30 s (each request counts
// in the two windows that hold its 30 s step), and keeps the resources
// with a window of at least min_clients: their windows' counts, for the
// median, and the windows themselves.
func herdCountsSQL(window, judged, resources string) string {
	return `SELECT cluster, r_api_group AS api_group, r_resource AS resource, groupArray(win) AS wins, groupArray(clients) AS counts
FROM (
    SELECT cluster, r_api_group, r_resource, win, uniqExact(r_client) AS clients
    FROM (
        SELECT cluster, r_api_group, r_resource, r_client, intDiv(r_start, 30000000) * 30 AS r_step
        FROM (` + herdRequestsSQL(window, "", resources+" AND (cluster, g_client, g_target) GLOBAL IN ("+herdPairsSQL(judged, resources)+")") + `)
        WHERE r_relist AND r_in
    )
    ARRAY JOIN [r_step, r_step - 30] AS win
    GROUP BY cluster, r_api_group, r_resource, win
)
GROUP BY cluster, r_api_group, r_resource
HAVING max(clients) >= {min_clients:UInt32}`
}

// herdPairsSQL narrows herdCountsSQL, exactly, to the clients and targets
// that can relist in a herd: a relist in the window is a list there
// ({j_…}: the window itself), of one of the resources that herdResourcesSQL
// found ({herd_resources}). Lists are a small share of the reads: the
// costly grouping by request and the window function then read only these
// pairs' requests, look-back included.
func herdPairsSQL(judged, resources string) string {
	return `SELECT cluster, p_client, p_target FROM (
                SELECT cluster, api_group AS p_group, resource AS p_resource, ` + refl.ClientSQL + ` AS p_client, ` + refl.TargetSQL + ` AS p_target
                FROM audit_events
                WHERE ` + judged + ` AND ` + refl.ListSQL + resources + `
            )
            WHERE (cluster, p_group, p_resource) IN {herd_resources:Array(Tuple(String, String, String))}
            GROUP BY cluster, p_client, p_target`
}

// herdResourcesSQL selects the resources that some 60 s window of the
// window ({j_…}) shows listed by at least min_clients clients: the only
// ones a herd can be of, since a herd's relisting clients list it (and
// more may list it for the first time). It is cheap and runs first: when
// it finds none (an idle cluster, or one where few clients list),
// herdCountsSQL, whose planning alone costs the engine tens of
// milliseconds, does not run. Where many kubelets list their new Pods'
// objects every minute, it finds some and herdCountsSQL decides.
func herdResourcesSQL(judged, resources string) string {
	return `SELECT DISTINCT cluster, q_group AS api_group, q_resource AS resource FROM (
    SELECT cluster, api_group AS q_group, resource AS q_resource, ` + refl.ClientSQL + ` AS q_client,
           intDiv(` + refl.StartSQL + `, 30000000) AS q_step
    FROM audit_events
    WHERE ` + judged + ` AND ` + refl.ListSQL + resources + `
)
ARRAY JOIN [q_step, q_step - 1] AS q_win
GROUP BY cluster, q_group, q_resource, q_win
HAVING uniqExact(q_client) >= {min_clients:UInt32}`
}

func clusterSpanSQL(window string) string {
	return `SELECT cluster, toUnixTimestamp64Micro(min(ts)) AS first, toUnixTimestamp64Micro(max(ts)) AS last
FROM audit_events WHERE ` + window + ` GROUP BY cluster`
}

// herdClientsSQL returns each client's first relist of a resource in a
// herd's span (h: a relist the window holds that started in [from_us,
// to_us)) and how many relists it sent there.
func herdClientsSQL(window string) string {
	return `SELECT toString(r_client) AS client, argMin(audit_id, r_start) AS audit_id, argMin(g_stage, r_start) AS stage,
       min(r_start) AS start, argMin(g_user, r_start) AS user, argMin(g_user_agent, r_start) AS user_agent,
       argMin(g_source_ip, r_start) AS source_ip, argMin(g_verb, r_start) AS verb, argMin(g_namespace, r_start) AS namespace,
       argMin(g_name, r_start) AS name, argMin(g_uri, r_start) AS uri, argMin(g_code, r_start) AS code,
       argMin(g_rv, r_start) AS rv, count() AS relists
FROM (` + herdRequestsSQL(window, `,
           argMin(stage, ts) AS g_stage, any(user) AS g_user, any(toString(user_agent)) AS g_user_agent,
           any(toString(source_ip)) AS g_source_ip, any(verb) AS g_verb, any(namespace) AS g_namespace, any(name) AS g_name,
           any(request_uri) AS g_uri, max(code) AS g_code, any(req_rv) AS g_rv`,
		` AND cluster = {cluster:String} AND api_group = {group:String} AND resource = {resource:String}`) + `)
WHERE r_relist AND r_in AND r_start >= {from_us:Int64} AND r_start < {to_us:Int64}
GROUP BY r_client
ORDER BY start, client`
}

type herdKey struct {
	Cluster  string `json:"cluster"`
	APIGroup string `json:"api_group"`
	Resource string `json:"resource"`
}

// herdRun is a stretch of 60 s windows that each held a herd.
type herdRun struct {
	herdKey
	from, to time.Time // the first window's start, the last window's end
	peak     int       // most clients in one window
	baseline float64
	id       string
}

type herdClient struct {
	Client    string `json:"client"`
	AuditID   string `json:"audit_id"`
	Stage     string `json:"stage"`
	Start     int64  `json:"start"`
	User      string `json:"user"`
	UserAgent string `json:"user_agent"`
	SourceIP  string `json:"source_ip"`
	Verb      string `json:"verb"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	URI       string `json:"uri"`
	Code      int32  `json:"code"`
	RV        string `json:"rv"`
	Relists   int    `json:"relists"`
}

// Evaluate implements Detector: one window, nothing remembered.
func (d *Herd) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: herds remembered from earlier
// evaluations keep their IDs when a later window sees them cut.
func (d *Herd) EvaluateState(ctx context.Context, q detect.Querier, st detect.StateStore, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	p := store.Params{"min_clients": events.Itoa(d.cfg.MinClients)}
	res := ""
	if len(d.cfg.Resources) > 0 {
		p["resources"] = store.StringArrayParam(d.cfg.Resources)
		res = " AND resource IN {resources:Array(String)}"
	}
	// The relists are judged against the look-back before the window.
	reads := store.Params{"judge": store.TimeParam(w.Since)}
	for k, v := range p {
		reads[k] = v
	}
	lookBack := d.lookBack(w)
	// The resources with a window of enough clients, with all their
	// windows.
	type resourceCounts struct {
		herdKey
		Wins   []int64 `json:"wins"`
		Counts []int   `json:"counts"`
	}
	judged := detect.WindowCond(w, reads, "j_")
	var listed [][]string
	err := detect.SelectRows(ctx, q, "resources listed by many clients", herdResourcesSQL(judged, res), reads, func(r herdKey) error {
		listed = append(listed, []string{r.Cluster, r.APIGroup, r.Resource})
		return nil
	})
	if err != nil || len(listed) == 0 {
		return nil, err
	}
	reads["herd_resources"] = store.StringTupleArrayParam(listed)
	var cands []resourceCounts
	countsSQL := herdCountsSQL(detect.WindowParams(lookBack, reads), judged, res)
	err = detect.SelectRows(ctx, q, "relists by resource and minute", countsSQL, reads, func(r resourceCounts) error {
		cands = append(cands, r)
		return nil
	})
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	slices.SortFunc(cands, func(a, b resourceCounts) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.APIGroup, b.APIGroup), cmp.Compare(a.Resource, b.Resource))
	})
	spans := map[string][2]int64{}
	err = detect.SelectRows(ctx, q, "the clusters' spans", clusterSpanSQL(detect.WindowParams(w, p)), p, func(r struct {
		Cluster string `json:"cluster"`
		First   int64  `json:"first"`
		Last    int64  `json:"last"`
	}) error {
		spans[r.Cluster] = [2]int64{r.First, r.Last}
		return nil
	})
	if err != nil {
		return nil, err
	}

	var runs []*herdRun
	for _, rc := range cands {
		sp := spans[rc.Cluster]
		// 60 s windows starting every 30 s that lie in the span.
		n := int((sp[1]/1e6)/30-(sp[0]/1e6)/30) + 2
		base := median(rc.Counts, n)
		order := make([]int, len(rc.Wins))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rc.Wins[a], rc.Wins[b]) })
		var cur *herdRun
		for _, i := range order {
			clients := rc.Counts[i]
			if clients < d.cfg.MinClients || float64(clients) < d.cfg.Factor*max(base, 1) {
				continue
			}
			from := time.Unix(rc.Wins[i], 0).UTC()
			if cur != nil && !from.After(cur.to) {
				cur.to = from.Add(2 * herdStep)
				cur.peak = max(cur.peak, clients)
				continue
			}
			cur = &herdRun{herdKey: rc.herdKey, from: from, to: from.Add(2 * herdStep), peak: clients, baseline: base}
			runs = append(runs, cur)
		}
	}
	if len(runs) == 0 {
		return nil, nil
	}
	mem, err := d.load(ctx, st, w)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		r.id = detect.FindingID(HerdName, r.Cluster, r.APIGroup, r.Resource, r.from.Format(time.RFC3339))
		for _, m := range mem[r.herdKey] {
			if !r.from.After(m.To) && !m.From.After(r.to) {
				r.id = m.ID // the same herd, seen cut by a later window
				r.from, r.to = events.MinTime(r.from, m.From), events.MaxTime(r.to, m.To)
				r.peak = max(r.peak, m.Peak)
				break
			}
		}
	}
	var out []detect.Finding
	for _, r := range runs {
		f, err := d.finding(ctx, q, w, r)
		if err != nil {
			return nil, err
		}
		if f.Evidence != nil {
			out = append(out, f)
		}
	}
	if err := d.link(ctx, q, out); err != nil {
		return nil, err
	}
	if err := d.save(ctx, st, runs); err != nil {
		return nil, err
	}
	return out, nil
}

// median is the median of counts padded with zeros to n values.
func median(counts []int, n int) float64 {
	v := slices.Clone(counts)
	for len(v) < n {
		v = append(v, 0)
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return float64(v[len(v)/2])
	}
	return float64(v[len(v)/2-1]+v[len(v)/2]) / 2
}

// lookBack is the window widened by LookBack: the rows that judge its
// reads.
func (d *Herd) lookBack(w detect.Window) detect.Window {
	return detect.Window{Since: w.Since.Add(-d.cfg.LookBack), Until: w.Until, Clusters: w.Clusters}
}

// finding builds the finding of one herd from its clients' relists.
func (d *Herd) finding(ctx context.Context, q detect.Querier, w detect.Window, r *herdRun) (detect.Finding, error) {
	p := store.Params{"cluster": store.StringParam(r.Cluster), "group": store.StringParam(r.APIGroup), "resource": store.StringParam(r.Resource),
		"from_us": strconv.FormatInt(r.from.UnixMicro(), 10), "to_us": strconv.FormatInt(r.to.UnixMicro(), 10),
		"judge": store.TimeParam(w.Since)}
	ww := d.lookBack(w)
	ww.Until, ww.Clusters = events.MinTime(w.Until, r.to.Add(time.Minute)), nil
	sql := herdClientsSQL(detect.WindowParams(ww, p))
	f := detect.Finding{
		ID: r.id, Detector: HerdName, Cluster: r.Cluster, Severity: detect.Warning,
		Subjects: detect.Subjects{Resource: r.Resource, APIGroup: r.APIGroup},
	}
	err := detect.SelectRows(ctx, q, "the herd's clients", sql, p, func(c herdClient) error {
		f.Evidence = append(f.Evidence, detect.Evidence{AuditID: c.AuditID, Stage: c.Stage, Time: detect.Micros(c.Start), Verb: c.Verb,
			Resource: r.Resource, Namespace: c.Namespace, Name: c.Name, User: c.User, RequestURI: c.URI, Code: c.Code,
			Role: detect.RoleRelist, ResourceVersion: c.RV})
		return nil
	})
	if err != nil || len(f.Evidence) == 0 {
		return detect.Finding{}, err
	}
	f.Normalize()
	f.Evidence = trimHerd(f.Evidence, d.cfg.MinClients)
	if n := float64(len(f.Evidence)); n < float64(d.cfg.MinClients) || n < d.cfg.Factor*max(r.baseline, 1) {
		return detect.Finding{}, nil // bystanders at the edges made the count
	}
	f.FirstSeen, f.LastSeen = f.Evidence[0].Time, f.Evidence[len(f.Evidence)-1].Time
	fig := herdFigures{Baseline: r.baseline, Peak: r.peak}
	d.figs.Store(f.ID, fig)
	d.describe(&f, fig)
	return f, nil
}

// herdGap: a client whose relist is this far from every other one at the
// edge of a herd's minute is a bystander, not part of the herd.
const herdGap = 10 * time.Second

// trimHerd drops bystanders from the edges of a herd's relists (by
// time): the 60 s windows that found it reach up to 30 s beyond it.
func trimHerd(ev []detect.Evidence, minClients int) []detect.Evidence {
	for len(ev) > minClients {
		switch {
		case ev[1].Time.Sub(ev[0].Time) > herdGap:
			ev = ev[1:]
		case ev[len(ev)-1].Time.Sub(ev[len(ev)-2].Time) > herdGap:
			ev = ev[:len(ev)-1]
		default:
			return ev
		}
	}
	return ev
}

// herdFigures are what a herd's text says beyond its evidence.
type herdFigures struct {
	Baseline float64
	Peak     int
}

// link makes the herds that a heartbeat-loss or rv-rollback finding
// explains part of it: information naming it.
func (d *Herd) link(ctx context.Context, q detect.Querier, fs []detect.Finding) error {
	if len(fs) == 0 {
		return nil
	}
	var clusters []string
	for _, f := range fs {
		clusters = append(clusters, f.Cluster)
	}
	slices.Sort(clusters)
	type cause struct {
		ID       string `json:"id"`
		Detector string `json:"detector"`
		Cluster  string `json:"cluster"`
		First    int64  `json:"first"`
		Last     int64  `json:"last"`
	}
	var causes []cause
	err := detect.SelectRows(ctx, q, "findings that explain relist herds",
		`SELECT id, f_detector AS detector, f_cluster AS cluster, first, last FROM (
    SELECT id, any(detector) AS f_detector, any(cluster) AS f_cluster,
           toUnixTimestamp64Micro(argMax(first_seen, updated_at)) AS first, toUnixTimestamp64Micro(argMax(last_seen, updated_at)) AS last
    FROM findings WHERE detector IN {detectors:Array(String)} AND cluster IN {clusters:Array(String)}
    GROUP BY id
)
ORDER BY first, id`,
		store.Params{"detectors": store.StringArrayParam(herdCauses), "clusters": store.StringArrayParam(slices.Compact(clusters))}, func(c cause) error {
			causes = append(causes, c)
			return nil
		})
	if err != nil {
		return err
	}
	for i := range fs {
		f := &fs[i]
		for _, c := range causes {
			if c.Cluster == f.Cluster && !f.FirstSeen.Before(detect.Micros(c.First).Add(-d.cfg.LinkBefore)) &&
				!f.FirstSeen.After(detect.Micros(c.Last).Add(d.cfg.LinkAfter)) {
				f.Subjects.PartOf = c.ID
				d.describe(f, d.figures(f.ID))
				break
			}
		}
	}
	return nil
}

// figures returns the figures of a herd's latest evaluation.
func (d *Herd) figures(id string) herdFigures {
	fig, _ := d.figs.Load(id)
	return fig
}

// Merge implements Merger: a herd is seen whole by some window; the view
// with more clients wins, times widen, and a link once made stays.
func (d *Herd) Merge(prev, next detect.Finding) detect.Finding {
	partOf := cmp.Or(next.Subjects.PartOf, prev.Subjects.PartOf)
	base := next
	if len(prev.Evidence) > len(next.Evidence) {
		base = prev
	}
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Evidence = base.Evidence
	f.Normalize()
	f.Title, f.Summary, f.Remediation = base.Title, base.Summary, base.Remediation
	if f.Subjects.PartOf != partOf {
		f.Subjects.PartOf = partOf
		d.describe(&f, d.figures(f.ID))
	}
	return f
}

// herdMemory is a herd remembered in the detector state.
type herdMemory struct {
	ID   string    `json:"id"`
	Key  herdKey   `json:"key"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Peak int       `json:"peak"`
}

func (d *Herd) load(ctx context.Context, st detect.StateStore, w detect.Window) (map[herdKey][]herdMemory, error) {
	out := map[herdKey][]herdMemory{}
	if st == nil {
		return out, nil
	}
	recs, err := st.LoadState(ctx, HerdName, w.Clusters, w.Since.Add(-d.cfg.Remember))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		var m herdMemory
		if err := json.Unmarshal(r.Body, &m); err != nil {
			return nil, fmt.Errorf("decoding remembered relist herd %s of cluster %s: %w", r.Key, r.Cluster, err)
		}
		if m.Key.Cluster != r.Cluster || m.ID != r.Key {
			continue
		}
		out[m.Key] = append(out[m.Key], m)
	}
	return out, nil
}

func (d *Herd) save(ctx context.Context, st detect.StateStore, runs []*herdRun) error {
	if st == nil || len(runs) == 0 {
		return nil
	}
	var recs []detect.StateRecord
	for _, r := range runs {
		body, err := json.Marshal(herdMemory{ID: r.id, Key: r.herdKey, From: r.from, To: r.to, Peak: r.peak})
		if err != nil {
			return err
		}
		recs = append(recs, detect.StateRecord{Detector: HerdName, Cluster: r.Cluster, Key: r.id, LastSeen: r.to, Body: body})
	}
	return st.SaveState(ctx, recs)
}

// describe sets the severity, confidence, title, summary and remediation
// of a herd's finding from its evidence (one relist per client).
func (d *Herd) describe(f *detect.Finding, fig herdFigures) {
	s := &f.Subjects
	clients := 0
	byProgram := map[string]int{}
	for _, e := range f.Evidence {
		if e.Role != detect.RoleRelist {
			continue
		}
		clients++
		byProgram[herdProgram(e)]++
	}
	f.Severity = detect.Warning
	if s.PartOf != "" {
		f.Severity = detect.Info
	}
	conf := 0.7
	if clients >= 2*d.cfg.MinClients {
		conf += 0.1
	}
	if float64(clients) >= 2*d.cfg.Factor*max(fig.Baseline, 1) {
		conf += 0.1
	}
	f.Confidence = detect.Round2(min(conf, 0.95))
	span := f.LastSeen.Sub(f.FirstSeen)
	f.Title = fmt.Sprintf("%d clients relisted %s within %s at %s (usually %s a minute)", clients, s.Resource,
		roundDuration(max(span, time.Second)), f.FirstSeen.Format("15:04:05"), strconv.FormatFloat(fig.Baseline, 'f', -1, 64))

	var progs []string
	for _, p := range slices.Sorted(maps.Keys(byProgram)) {
		if n := byProgram[p]; p == "kubelet" {
			progs = append(progs, fmt.Sprintf("%d %s", n, detect.Plural(n, "kubelet", "kubelets")))
		} else {
			progs = append(progs, fmt.Sprintf("%d as %s", n, p))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Between %s and %s, %d distinct clients relisted %s (a full list, or a watch-list): %s. ",
		f.FirstSeen.Format(time.RFC3339), f.LastSeen.Format(time.RFC3339), clients, s.Resource, strings.Join(progs, ", "))
	fmt.Fprintf(&b, "The usual number of clients relisting %s in a minute in this cluster is %s", s.Resource,
		strconv.FormatFloat(fig.Baseline, 'f', -1, 64))
	if fig.Peak > 0 {
		fmt.Fprintf(&b, "; at the peak, %d relisted within one minute", fig.Peak)
	}
	b.WriteString(". Clients relist together when they all lose their watches at once and the resourceVersion they " +
		"resume from is no longer served (410 Expired): an apiserver restart or failover, a load balancer dropping " +
		"connections (kubelets reconnecting after a heartbeat gap), etcd restored from a backup. Each relist is a full " +
		"list the apiservers serve at once; thousands of them can overload the apiservers and etcd. ")
	if s.PartOf != "" {
		fmt.Fprintf(&b, "It is part of the incident of finding %s, which explains it.", s.PartOf)
	} else {
		b.WriteString("No heartbeat-loss or rv-rollback finding covers its time: look for an apiserver restart or a " +
			"network event at that moment.")
	}
	f.Summary = b.String()
	f.Remediation = "Find and fix what made the clients lose their watches (see the linked finding, if any; apiserver " +
		"restarts and load balancer failovers). To soften herds: keep enough apiservers behind the load balancer that one " +
		"restart does not move every client; let API Priority and Fairness (FlowSchemas for system:nodes) queue the " +
		"lists; raise --watch-cache-sizes so that reconnecting clients can resume their watches instead of relisting; run " +
		"clients with watch-list (WatchListClient, client-go 1.32+), whose relists stream from the watch cache."
}

// herdProgram names a relisting client's program for the summary:
// kubelets by their group of users.
func herdProgram(e detect.Evidence) string {
	if strings.HasPrefix(e.User, "system:node:") {
		return "kubelet"
	}
	return e.User
}
