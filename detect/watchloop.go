package detect

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// WatchLoopName is the name of the watch-loop detector.
const WatchLoopName = "watch-loop"

// Evidence roles of watch-loop findings.
const (
	// RoleStaticWatch is a watch the client started from the static
	// resourceVersion.
	RoleStaticWatch = "static-watch"
	// RoleRVAdvanced is an event showing the resource at a higher
	// resourceVersion than the static one: another client's watch or
	// list, or a write.
	RoleRVAdvanced = "rv-advanced"
)

// WatchLoopConfig holds the watch-loop detector's parameters. Zero fields
// take the defaults, which work both at real time scales (watches restart
// every 5–10 minutes and the replay follows each restart within seconds)
// and at compressed test scales (restarts every 10–20 seconds).
type WatchLoopConfig struct {
	// Resources are the watched resources whose loop the detector looks
	// for (default: services). The Endpoints churn of the incident comes
	// from a loop on Services; the same loop on ConfigMaps or Secrets
	// leaves no churn in the audit log to prove it.
	Resources []string
	// ChurnResource is the resource whose delete→create pairs are the
	// symptom (default: endpoints), and OwnerResource the resource of the
	// same namespace/name that, when someone deleted or created it in the
	// window, explains a pair (default: services).
	ChurnResource, OwnerResource string
	// MinRestarts is the fewest watch restarts from one resourceVersion
	// that count as "re-watching from a static resourceVersion" (default 3).
	MinRestarts int
	// RetrySpacing: a watch started less than this after the previous
	// watch from the same resourceVersion is a quick retry (a failed
	// watch, the apiserver starting up), counted with it as one restart
	// (default 5s).
	RetrySpacing time.Duration
	// FollowWithin is how soon after a watch restart a delete counts as
	// following it (default 30s). The replay reaches the client as soon
	// as its watch starts, and its controllers act within seconds.
	FollowWithin time.Duration
	// PairWithin is the longest time between a delete and the create of
	// the same object that make a pair (default 15m: Endpoints of the
	// incident vanished for minutes).
	PairWithin time.Duration
	// MinIterations is the fewest restarts followed by churn that make a
	// loop (default 2).
	MinIterations int
	// MinFollowedRatio is the least share of the client's restarts that
	// must be followed by churn (default 0.5). In the incident every
	// restart replays; a client that merely happened to restart before
	// someone else's churn now and then falls well below.
	MinFollowedRatio float64
	// IgnoreChurnBy lists users whose deletes and creates are never the
	// symptom (default: system:apiserver, whose endpoint reconciler
	// rewrites default/kubernetes at start-up).
	IgnoreChurnBy []string
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *WatchLoopConfig) setDefaults() {
	if len(c.Resources) == 0 {
		c.Resources = []string{"services"}
	}
	if c.ChurnResource == "" {
		c.ChurnResource = "endpoints"
	}
	if c.OwnerResource == "" {
		c.OwnerResource = "services"
	}
	if c.MinRestarts <= 0 {
		c.MinRestarts = 3
	}
	if c.RetrySpacing <= 0 {
		c.RetrySpacing = 5 * time.Second
	}
	if c.FollowWithin <= 0 {
		c.FollowWithin = 30 * time.Second
	}
	if c.PairWithin <= 0 {
		c.PairWithin = 15 * time.Minute
	}
	if c.MinIterations <= 0 {
		c.MinIterations = 2
	}
	if c.MinFollowedRatio <= 0 {
		c.MinFollowedRatio = 0.5
	}
	if c.IgnoreChurnBy == nil {
		c.IgnoreChurnBy = []string{"system:apiserver"}
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = DefaultMaxEvidence
	}
}

// WatchLoop detects the static-resourceVersion watch loop behind vanishing
// Endpoints (DOMAIN.md, seeds 000 and 001): a client (user, user agent,
// address) re-watches a resource from the same requested resourceVersion
// across at least MinRestarts restarts, while that resource's
// resourceVersion demonstrably advanced in the same window (another
// client watched or listed it from a higher one, or a write returned a
// higher one), and at least MinIterations of those restarts, and
// MinFollowedRatio of them, were followed within FollowWithin by
// delete→create pairs (within PairWithin) of the same Endpoints, of
// Services nobody deleted or created in the window.
//
// Each churn pair is attributed to the nearest watch restart before its
// delete, among every client re-watching from a static resourceVersion in
// the cluster, so one client's loop is not blamed on another that merely
// restarted nearby. resourceVersions compare as integers; one that is not
// an integer is compared only for equality (the API calls them opaque).
//
// A finding's subjects name the client, the resource, the static
// resourceVersion, the restarts and the iterations; its objects are every
// churned Endpoints; its evidence holds the static watches, the churn
// events (each linked by watch_audit_id to the watch that preceded it)
// and the events that show the resourceVersion advanced.
type WatchLoop struct{ cfg WatchLoopConfig }

// NewWatchLoop returns the detector with cfg's parameters.
func NewWatchLoop(cfg WatchLoopConfig) *WatchLoop {
	cfg.setDefaults()
	return &WatchLoop{cfg: cfg}
}

// Name implements Detector.
func (d *WatchLoop) Name() string { return WatchLoopName }

// Config returns the parameters in effect.
func (d *WatchLoop) Config() WatchLoopConfig { return d.cfg }

func (d *WatchLoop) deleteRole() string { return d.cfg.ChurnResource + "-delete" }
func (d *WatchLoop) createRole() string { return d.cfg.ChurnResource + "-create" }

// candidate is a client re-watching from one resourceVersion.
type candidate struct {
	watchGroup
	burstOf  []int // restart (burst) index of each watch
	restarts int
	pairs    []attributed
}

type attributed struct {
	watch int // index into Watches
	pair  churnPair
}

type churnPair struct{ del, create eventRow }

// Evaluate implements Detector.
func (d *WatchLoop) Evaluate(ctx context.Context, q Querier, w Window) ([]Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	groups, err := selectWatchGroups(ctx, q, w, d.cfg.Resources, d.cfg.MinRestarts, d.cfg.RetrySpacing)
	if err != nil {
		return nil, err
	}
	var cands []*candidate
	clusters := map[string]bool{}
	for _, g := range groups {
		times := make([]time.Time, len(g.Watches))
		for i, ws := range g.Watches {
			times[i] = ws.Time
		}
		burstOf, n := bursts(times, d.cfg.RetrySpacing)
		if n < d.cfg.MinRestarts {
			continue
		}
		cands = append(cands, &candidate{watchGroup: g, burstOf: burstOf, restarts: n})
		clusters[g.Cluster] = true
	}
	if len(cands) == 0 {
		return nil, nil
	}
	cw := w
	cw.Clusters = sortedKeys(clusters)

	pairs, err := d.churnPairs(ctx, q, cw)
	if err != nil {
		return nil, err
	}
	d.attribute(cands, pairs)

	var loops []*candidate
	for _, c := range cands {
		it := iterations(c)
		if it >= d.cfg.MinIterations && float64(it) >= d.cfg.MinFollowedRatio*float64(c.restarts) {
			loops = append(loops, c)
		}
	}
	if len(loops) == 0 {
		return nil, nil
	}
	obs, err := selectRVObservations(ctx, q, cw, loops)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, c := range loops {
		adv, ok := advancedBeyond(c, obs)
		if !ok {
			continue
		}
		f, err := d.finding(ctx, q, cw, c, adv)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func iterations(c *candidate) int {
	seen := map[int]bool{}
	for _, a := range c.pairs {
		seen[c.burstOf[a.watch]] = true
	}
	return len(seen)
}

// churnSQL selects the deletes and creates of the churn resource that a
// delete or create of its owner (the Service of the same namespace and
// name) in the window does not explain. An owner write counts at any
// stage, and without a status as a success: an explained pair must never
// be blamed on a loop. An owner created without a recorded name
// (generateName, or a policy that omits it) explains its whole namespace.
//
// The subqueries are GLOBAL: on a cluster audit_events is a Distributed
// table, and a plain IN would have each shard run the subquery over the
// whole cluster again (which ClickHouse refuses by default,
// distributed_product_mode = 'deny'); GLOBAL runs it once on the
// initiator and sends the (small) set of owner writes to the shards, so
// the result does not depend on how rows are sharded. On a single node
// GLOBAL IN is a plain IN.
const churnSQL = `SELECT ` + eventColumns + `
FROM audit_events FINAL
WHERE %WINDOW% AND resource = {churn:String} AND api_group = '' AND subresource = ''
  AND verb IN ('delete', 'create') AND stage = 'ResponseComplete' AND code >= 200 AND code < 300%IGNORED%
  AND (cluster, namespace, name) GLOBAL NOT IN (SELECT cluster, namespace, name FROM owner_changes)
  AND (cluster, namespace) GLOBAL NOT IN (SELECT cluster, namespace FROM owner_changes WHERE name = '')
ORDER BY cluster, namespace, name, ts, audit_id`

// ownerChangesSQL is the owner writes for churnSQL. DISTINCT makes
// duplicate rows harmless, so it reads without FINAL.
const ownerChangesSQL = `WITH owner_changes AS (
    SELECT DISTINCT cluster, namespace, name FROM audit_events
    WHERE %WINDOW% AND resource = {owner:String} AND api_group = '' AND subresource = ''
      AND verb IN ('delete', 'create', 'deletecollection') AND (code = 0 OR (code >= 200 AND code < 300))
)
`

// churnPairs returns the unexplained delete→create pairs of the churn
// resource in the window, by cluster.
func (d *WatchLoop) churnPairs(ctx context.Context, q Querier, w Window) (map[string][]churnPair, error) {
	p := store.Params{"churn": stringParam(d.cfg.ChurnResource), "owner": stringParam(d.cfg.OwnerResource)}
	cond := windowParams(w, p)
	ignored := ""
	if len(d.cfg.IgnoreChurnBy) > 0 {
		p["ignored"] = arrayParam(d.cfg.IgnoreChurnBy)
		ignored = " AND user NOT IN {ignored:Array(String)}"
	}
	sql := strings.ReplaceAll(ownerChangesSQL+churnSQL, "%WINDOW%", cond)
	sql = strings.Replace(sql, "%IGNORED%", ignored, 1)
	out := map[string][]churnPair{}
	var prev *eventRow
	err := selectRows(ctx, q, d.cfg.ChurnResource+" deletes and creates", sql, p, func(r eventRow) error {
		defer func() { prev = &r }()
		if prev == nil || r.Verb != "create" || prev.Verb != "delete" ||
			prev.Cluster != r.Cluster || prev.Namespace != r.Namespace || prev.Name != r.Name || r.Name == "" ||
			micros(r.TS).Sub(micros(prev.TS)) > d.cfg.PairWithin {
			return nil
		}
		out[r.Cluster] = append(out[r.Cluster], churnPair{del: *prev, create: r})
		return nil
	})
	return out, err
}

// attribute gives each pair to the watch restart it followed: among the
// restarts of every candidate of the cluster within FollowWithin before
// the delete, the latest one by the same program that wrote the delete
// (same source address, or same user-agent product: the endpoints
// controller runs inside the kube-controller-manager whose informer
// replays), else the latest one.
func (d *WatchLoop) attribute(cands []*candidate, pairs map[string][]churnPair) {
	type ref struct {
		t     time.Time
		cand  int
		watch int
	}
	byCluster := map[string][]ref{}
	for ci, c := range cands {
		for wi, ws := range c.Watches {
			byCluster[c.Cluster] = append(byCluster[c.Cluster], ref{ws.Time, ci, wi})
		}
	}
	for cluster, refs := range byCluster {
		slices.SortStableFunc(refs, func(a, b ref) int { return a.t.Compare(b.t) })
		for _, p := range pairs[cluster] {
			del := micros(p.del.TS)
			last := sort.Search(len(refs), func(i int) bool { return refs[i].t.After(del) }) - 1
			pick := -1
			for i := last; i >= 0 && del.Sub(refs[i].t) <= d.cfg.FollowWithin; i-- {
				if pick < 0 {
					pick = i
				}
				c := cands[refs[i].cand]
				if sameProgram(c.client, p.del) {
					pick = i
					break
				}
			}
			if pick < 0 {
				continue
			}
			c := cands[refs[pick].cand]
			c.pairs = append(c.pairs, attributed{watch: refs[pick].watch, pair: p})
		}
	}
}

// sameProgram reports whether the event was sent by the program that
// runs the reflector c: the same source address or user-agent product.
func sameProgram(c client, e eventRow) bool {
	if c.SourceIP != "" && c.SourceIP == e.SourceIP {
		return true
	}
	p := programName(c.UserAgent, "")
	return p != "" && p == programName(e.UserAgent, "")
}

// rvObservation is what one client of a resource showed of its
// resourceVersion in the window.
type rvObservation struct {
	Cluster   string `json:"cluster"`
	APIGroup  string `json:"api_group"`
	Resource  string `json:"resource"`
	User      string `json:"user"`
	UserAgent string `json:"user_agent"`
	SourceIP  string `json:"source_ip"`
	// The highest resourceVersion the client asked for in a watch or
	// list, and that request.
	ReadMax   uint64 `json:"read_max"`
	ReadMaxID string `json:"read_max_id"`
	// The highest resourceVersion of a response or a request object of
	// any of its requests (writes, lists), and that request.
	WriteMax   uint64 `json:"write_max"`
	WriteMaxID string `json:"write_max_id"`
	// For resourceVersions that are not integers: the last one asked for,
	// and the last one a response carried.
	ReadLast   string `json:"read_last"`
	ReadLastID string `json:"read_last_id"`
	ReadLastUS int64  `json:"read_last_us"`
	RespLast   string `json:"resp_last"`
	RespLastID string `json:"resp_last_id"`
	RespLastUS int64  `json:"resp_last_us"`
}

// rvObservationsSQL reads without FINAL: maxima are the same with
// duplicate rows. Of the clients of each resource it keeps those that
// can prove an advance: the {keep} highest readers (one of them may be
// the loop's own client) and the highest writer, by integer and by time.
const rvObservationsSQL = `SELECT * FROM (
  SELECT *,
         row_number() OVER (PARTITION BY cluster, api_group, resource ORDER BY read_max DESC) AS r1,
         row_number() OVER (PARTITION BY cluster, api_group, resource ORDER BY write_max DESC) AS r2,
         row_number() OVER (PARTITION BY cluster, api_group, resource ORDER BY read_last_us DESC) AS r3,
         row_number() OVER (PARTITION BY cluster, api_group, resource ORDER BY resp_last_us DESC) AS r4
  FROM (
SELECT cluster, api_group, resource, user, user_agent, source_ip,
       maxIf(toUInt64OrZero(req_rv), verb IN ('watch', 'list')) AS read_max,
       argMaxIf(audit_id, toUInt64OrZero(req_rv), verb IN ('watch', 'list')) AS read_max_id,
       max(greatest(toUInt64OrZero(response_rv), toUInt64OrZero(object_rv))) AS write_max,
       argMax(audit_id, greatest(toUInt64OrZero(response_rv), toUInt64OrZero(object_rv))) AS write_max_id,
       argMaxIf(req_rv, ts, verb IN ('watch', 'list') AND req_rv != '' AND req_rv != '0') AS read_last,
       argMaxIf(audit_id, ts, verb IN ('watch', 'list') AND req_rv != '' AND req_rv != '0') AS read_last_id,
       maxIf(toUnixTimestamp64Micro(ts), verb IN ('watch', 'list') AND req_rv != '' AND req_rv != '0') AS read_last_us,
       argMaxIf(response_rv, ts, response_rv != '') AS resp_last,
       argMaxIf(audit_id, ts, response_rv != '') AS resp_last_id,
       maxIf(toUnixTimestamp64Micro(ts), response_rv != '') AS resp_last_us
FROM audit_events
WHERE %WINDOW% AND resource IN {resources:Array(String)}
GROUP BY cluster, api_group, resource, user, user_agent, source_ip
  )
)
WHERE r1 <= {keep:UInt32} OR r2 = 1 OR r3 <= {keep:UInt32} OR r4 = 1`

func selectRVObservations(ctx context.Context, q Querier, w Window, loops []*candidate) ([]rvObservation, error) {
	res := map[string]bool{}
	for _, c := range loops {
		res[c.Resource] = true
	}
	// One more than the loops: the loop's own client may be the top reader.
	p := store.Params{"resources": arrayParam(sortedKeys(res)), "keep": itoa(len(loops) + 1)}
	var out []rvObservation
	err := selectRows(ctx, q, "resourceVersions seen", strings.Replace(rvObservationsSQL, "%WINDOW%", windowParams(w, p), 1), p,
		func(r rvObservation) error {
			out = append(out, r)
			return nil
		})
	return out, err
}

// advance is the proof that a resource moved past the static
// resourceVersion: audit IDs of the requests that show it, with the
// resourceVersion each showed.
type advance struct {
	ids map[string]string // audit ID → resourceVersion shown
	top string            // the highest resourceVersion shown
}

// advancedBeyond reports whether the resource c watches demonstrably
// advanced past c.RV in the window: another client watched or listed it
// from a higher resourceVersion, or a request or response object carried
// a higher one. For a resourceVersion that is not an integer, a different
// one seen after the client's first static watch counts.
func advancedBeyond(c *candidate, obs []rvObservation) (advance, bool) {
	adv := advance{ids: map[string]string{}}
	first := c.Watches[0].Time
	numeric := numericRV(c.RV)
	var static uint64
	if numeric {
		static = parseRV(c.RV)
	}
	var bestRead, bestWrite *rvObservation
	for i := range obs {
		o := &obs[i]
		if o.Cluster != c.Cluster || o.APIGroup != c.APIGroup || o.Resource != c.Resource {
			continue
		}
		other := !(o.User == c.User && o.UserAgent == c.UserAgent && o.SourceIP == c.SourceIP)
		if numeric {
			if other && o.ReadMax > static && (bestRead == nil || o.ReadMax > bestRead.ReadMax) {
				bestRead = o
			}
			if o.WriteMax > static && (bestWrite == nil || o.WriteMax > bestWrite.WriteMax) {
				bestWrite = o
			}
			continue
		}
		if other && o.ReadLastID != "" && o.ReadLast != c.RV && micros(o.ReadLastUS).After(first) {
			adv.ids[o.ReadLastID] = o.ReadLast
			adv.top = o.ReadLast
		}
		if o.RespLastID != "" && o.RespLast != c.RV && micros(o.RespLastUS).After(first) {
			adv.ids[o.RespLastID] = o.RespLast
			adv.top = o.RespLast
		}
	}
	if bestRead != nil {
		adv.ids[bestRead.ReadMaxID] = fmtRV(bestRead.ReadMax)
		adv.top = fmtRV(bestRead.ReadMax)
	}
	if bestWrite != nil {
		adv.ids[bestWrite.WriteMaxID] = fmtRV(bestWrite.WriteMax)
		if bestRead == nil || bestWrite.WriteMax > bestRead.ReadMax {
			adv.top = fmtRV(bestWrite.WriteMax)
		}
	}
	return adv, len(adv.ids) > 0
}

// finding builds the finding of one loop.
func (d *WatchLoop) finding(ctx context.Context, q Querier, w Window, c *candidate, adv advance) (Finding, error) {
	f := Finding{
		ID:       FindingID(WatchLoopName, c.Cluster, c.User, c.UserAgent, c.SourceIP, c.APIGroup, c.Resource, c.Namespace, c.LabelSelector, c.FieldSelector, c.RV),
		Detector: WatchLoopName,
		Cluster:  c.Cluster,
		Severity: Critical,
		Subjects: Subjects{
			User: c.User, UserAgent: c.UserAgent, Resource: c.Resource, APIGroup: c.APIGroup, ResourceVersion: c.RV,
			SourceIP: c.SourceIP, Namespace: c.Namespace, LabelSelector: c.LabelSelector, FieldSelector: c.FieldSelector,
		},
	}
	for _, ws := range c.Watches {
		f.Evidence = append(f.Evidence, ws.evidence(c.client, c.RV, RoleStaticWatch))
	}
	for _, a := range c.pairs {
		watchID := c.Watches[a.watch].AuditID
		for _, e := range []struct {
			row  eventRow
			role string
		}{{a.pair.del, d.deleteRole()}, {a.pair.create, d.createRole()}} {
			ev := e.row.evidence(e.role, "")
			ev.ResourceVersion = e.row.ResponseRV
			ev.WatchAuditID = watchID
			f.Evidence = append(f.Evidence, ev)
		}
		f.Objects = append(f.Objects, Object{Resource: d.cfg.ChurnResource, Namespace: a.pair.del.Namespace, Name: a.pair.del.Name})
	}
	ids := sortedKeys(adv.ids)
	rows, err := selectEvents(ctx, q, w, c.Cluster, ids)
	if err != nil {
		return Finding{}, err
	}
	for _, id := range ids {
		if r, ok := firstStage(rows[id]); ok {
			f.Evidence = append(f.Evidence, r.evidence(RoleRVAdvanced, adv.ids[id]))
		}
	}
	f.normalize()
	f.FirstSeen = c.Watches[0].Time
	f.LastSeen = f.FirstSeen
	for _, e := range f.Evidence {
		if e.Role != RoleRVAdvanced && e.Time.After(f.LastSeen) {
			f.LastSeen = e.Time
		}
	}
	d.describe(&f)
	return f, nil
}

// loopCounts recomputes the restarts and iterations a finding's evidence
// shows.
func (d *WatchLoop) loopCounts(ev []Evidence) (restarts, iterations int) {
	var times []time.Time
	var ids []string
	followed := map[string]bool{}
	for _, e := range ev {
		switch e.Role {
		case RoleStaticWatch:
			times = append(times, e.Time)
			ids = append(ids, e.AuditID)
		case d.deleteRole():
			followed[e.WatchAuditID] = true
		}
	}
	burstOf, n := bursts(times, d.cfg.RetrySpacing)
	seen := map[int]bool{}
	for i, id := range ids {
		if followed[id] {
			seen[burstOf[i]] = true
		}
	}
	return n, len(seen)
}

// Merge implements Merger: the generic merge, then counts, confidence
// and text from the merged evidence.
func (d *WatchLoop) Merge(prev, next Finding) Finding {
	// The proof that the resource advanced is kept from the first
	// evaluation that had one: later windows show ever higher
	// resourceVersions, which would change the finding at every
	// evaluation without telling more.
	if slices.ContainsFunc(prev.Evidence, isAdvance) {
		next.Evidence = slices.DeleteFunc(slices.Clone(next.Evidence), isAdvance)
	}
	f := Merge(prev, next, d.cfg.MaxEvidence)
	f.normalize()
	d.describe(&f)
	// Thinned evidence undercounts; a count never goes down.
	f.Subjects.WatchRestarts = max(f.Subjects.WatchRestarts, prev.Subjects.WatchRestarts, next.Subjects.WatchRestarts)
	f.Subjects.Iterations = max(f.Subjects.Iterations, prev.Subjects.Iterations, next.Subjects.Iterations)
	return f
}

func isAdvance(e Evidence) bool { return e.Role == RoleRVAdvanced }

// describe sets the counts, confidence, title, summary and remediation
// of a finding from its subjects, objects and evidence.
func (d *WatchLoop) describe(f *Finding) {
	s := &f.Subjects
	s.WatchRestarts, s.Iterations = d.loopCounts(f.Evidence)
	pairs := 0
	top := ""
	for _, e := range f.Evidence {
		switch e.Role {
		case d.deleteRole():
			pairs++
		case RoleRVAdvanced:
			if c, ok := compareRV(e.ResourceVersion, top); top == "" || (ok && c > 0) {
				top = e.ResourceVersion
			}
		}
	}
	prog := programName(s.UserAgent, s.User)
	ver, affected := affectedVersion(s.UserAgent)

	// Confidence: two iterations make a loop (0.7); each further one up to
	// four adds 0.1; a loop that replays at nearly every restart, and a
	// client of an affected version, add a little more.
	conf := 0.6 + 0.1*float64(min(max(s.Iterations-1, 0), 3))
	if s.WatchRestarts > 0 && float64(s.Iterations) >= 0.8*float64(s.WatchRestarts) {
		conf += 0.05
	}
	if affected {
		conf += 0.04
	}
	f.Confidence = round2(min(conf, 0.99))

	owner := strings.TrimSuffix(d.cfg.OwnerResource, "s")
	f.Title = fmt.Sprintf("%s re-watches %s from stale resourceVersion %s; %d %s deleted and re-created after its restarts",
		prog, s.Resource, s.ResourceVersion, len(f.Objects), plural(len(f.Objects), d.cfg.ChurnResource+" object", d.cfg.ChurnResource+" objects"))

	var b strings.Builder
	fmt.Fprintf(&b, "Client %s (user agent %q", s.User, s.UserAgent)
	if s.SourceIP != "" {
		fmt.Fprintf(&b, ", from %s", s.SourceIP)
	}
	fmt.Fprintf(&b, ") restarted its watch of %s %d times from the same resourceVersion %s between %s and %s",
		s.Resource, s.WatchRestarts, s.ResourceVersion, f.FirstSeen.Format(time.RFC3339), f.LastSeen.Format(time.RFC3339))
	if top != "" {
		fmt.Fprintf(&b, ", although other clients and writes show %s at resourceVersion %s", s.Resource, top)
	}
	fmt.Fprintf(&b, ". After %d of those restarts, within seconds, %s of %ss that nobody deleted or re-created were deleted and created again (%d %s): %s. ",
		s.Iterations, d.cfg.ChurnResource, owner, pairs, plural(pairs, "delete→create pair", "delete→create pairs"), objectList(f.Objects, 8))
	fmt.Fprintf(&b, "Each restart replays the %s event history from that old resourceVersion, the client drops live %ss from its cache, "+
		"and the endpoints controller deletes their %s as orphans and re-creates them: the %ss stop serving until then, at every restart. ",
		s.Resource, owner, d.cfg.ChurnResource, owner)
	if affected {
		fmt.Fprintf(&b, "%s %s is in the affected range of the watch-cache DELETE-event bug. ", prog, ver)
	}
	fmt.Fprintf(&b, "Break the loop now by restarting %s or by touching any %s (see remediation); fix it by upgrading the apiservers.", prog, owner)
	f.Summary = b.String()
	f.Remediation = loopRemediation(prog, owner)
}

func loopRemediation(prog, owner string) string {
	return "Cause: the watch-cache bug of Kubernetes 1.7.0–1.7.12, 1.8.0–1.8.7 and 1.9.0–1.9.2 (introduced by PR #46223, " +
		"fixed by PR #58547 in 1.10.0 and backported to 1.9.3, 1.8.8 and 1.7.13; issue #58545): a DELETE watch event carried " +
		"the deleted object's old resourceVersion, so a reflector that saw it last resumed its watch from that old " +
		"resourceVersion and replayed history at every restart. Fix: upgrade the kube-apiservers to a fixed version. " +
		"Workarounds that break the loop at once: restart " + prog + " (it relists and resumes from a fresh " +
		"resourceVersion); create any " + owner + "; or touch any " + owner + " (for example `kubectl label " + owner +
		" <name> touched=1`), so that a fresh resourceVersion lands at the end of the " + owner + " event stream. " +
		"Workarounds that do not help: deleting pods or deployments (they do not touch the " + owner + " event stream). " +
		"Other rarely-changing resources (ConfigMaps, Secrets) loop the same way: apps with config hot-reload restart " +
		"repeatedly, and controller logs show \"watch of *v1.ConfigMap ended with: too old resource version\"."
}

// programName is the product of a user agent ("kube-controller-manager"
// of "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/…"), or the
// user when there is none.
func programName(userAgent, user string) string {
	if p, _, ok := strings.Cut(userAgent, "/"); ok && p != "" {
		return p
	}
	if userAgent != "" {
		return userAgent
	}
	return user
}

// affectedVersion returns the version in a Kubernetes component's user
// agent and whether it is in a range affected by the DELETE-event bug:
// 1.7.0–1.7.12, 1.8.0–1.8.7, 1.9.0–1.9.2.
func affectedVersion(userAgent string) (string, bool) {
	_, rest, ok := strings.Cut(userAgent, "/")
	if !ok {
		return "", false
	}
	ver, _, _ := strings.Cut(rest, " ")
	var major, minor, patch int
	if n, _ := fmt.Sscanf(strings.TrimPrefix(ver, "v"), "%d.%d.%d", &major, &minor, &patch); n != 3 || major != 1 {
		return ver, false
	}
	switch minor {
	case 7:
		return ver, patch <= 12
	case 8:
		return ver, patch <= 7
	case 9:
		return ver, patch <= 2
	}
	return ver, false
}

func objectList(objs []Object, limit int) string {
	var names []string
	for i, o := range objs {
		if i == limit {
			names = append(names, fmt.Sprintf("and %d more", len(objs)-limit))
			break
		}
		if o.Namespace == "" {
			names = append(names, o.Name)
		} else {
			names = append(names, o.Namespace+"/"+o.Name)
		}
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func parseRV(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

func fmtRV(v uint64) string { return strconv.FormatUint(v, 10) }
