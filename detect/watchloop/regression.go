package watchloop

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
	"github.com/auditlens/auditlens/store"

	"github.com/auditlens/auditlens/internal/auditsql"
	refl "github.com/auditlens/auditlens/internal/reflector"
)

// RegressionName is the name of the watch-rv-regression detector.
const RegressionName = "watch-rv-regression"

// Evidence roles of watch-rv-regression findings.
const (
	// RoleHighWatch is the client's watch from the highest
	// resourceVersion it used before going back.
	RoleHighWatch = "watch-before"
	// RoleRegressedWatch is a watch from the lower resourceVersion.
	RoleRegressedWatch = "watch-regressed"
)

// RegressionConfig holds the watch-rv-regression detector's parameters.
// Zero fields take the defaults.
type RegressionConfig struct {
	// Resources limits the detector to these resources (default: every
	// resource; the bug hit every kind).
	Resources []string
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *RegressionConfig) setDefaults() {
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = detect.DefaultMaxEvidence
	}
}

// Regression detects a client whose successive watches of a resource
// restart from a resourceVersion lower than one it already used — the
// DELETE-event bug of seed 001: a watch event carrying a deleted object's
// old resourceVersion sends the client's reflector back in history.
//
// A client is one reflector: user, user agent, source address, resource,
// namespace and selectors. Its watches and lists in the window are taken
// in order; a watch whose integer resourceVersion is below the highest
// one the client watched from since its last list is a regression (a list
// resets the comparison: a relist legitimately starts over, and in an HA
// control plane the list may come from an apiserver whose cache is a
// little behind). resourceVersions "", "0" and ones that are not integers
// are not compared.
//
// One finding per client and lower resourceVersion: its subjects name the
// client, resource_version (the lower one) and previous_resource_version
// (the highest used before); watch_restarts counts the watches from the
// lower one. Severity warning: the regression alone replays history once;
// repeated restarts from it make the loop the watch-loop detector reports.
type Regression struct{ cfg RegressionConfig }

// NewRegression returns the detector with cfg's parameters.
func NewRegression(cfg RegressionConfig) *Regression {
	cfg.setDefaults()
	return &Regression{cfg: cfg}
}

// Name implements Detector.
func (d *Regression) Name() string { return RegressionName }

// Follows implements Follower: a regression names the watch-loop finding
// of the same watch when there is one.
func (d *Regression) Follows() []string { return []string{Name} }

// reflectorKey hashes what identifies a reflector here: unlike the watch
// loop's program identity, the address stays in it, because a regression
// compares the successive watches of one instance, and the instances of a
// program that runs on every node (kube-proxy) share user and user agent.
// Loopback informers (system:apiserver, all from 127.0.0.1) are told apart
// by their apiserver.
const reflectorKey = "cityHash64(user, user_agent, source_ip, api_group, resource, namespace, label_selector, field_selector, " + apiserverInstanceSQL + ")"

// apiserverInstanceSQL names the apiserver of a loopback request.
const apiserverInstanceSQL = "if(user = 'system:apiserver', toString(apiserver), '')"

// suspectsSQL finds, cheaply, the reflectors whose watches went back: a
// reflector's first step back since its last list is a watch whose
// resourceVersion is below that of the request just before it (up to
// there its watches only went up), so one pass over each reflector's
// requests in time order finds them. It reads the stages of a request as
// they are: they share the request's start and resourceVersion, so copies
// and duplicates never look like a step back, and FINAL is not needed.
//
// Each request is one UInt128 (suspectKeySQL): its start in the high 64
// bits, in the low ones 0 for a list or watch-list (a relist starts over)
// and resourceVersion+1 for a watch (1 when it is not an integer, as 0
// was before: such a watch after an integer one is a suspect, which
// regressionSQL then weighs exactly). Sorting these integers orders the
// requests by start, then lists before watches, then resourceVersion, the
// order the pass needs; requests that tie on all of it are the same to
// the comparison, so no further tie-breaker is needed. On the 100M-event
// bench store this pass sorts every watch and list of the window (30M
// rows): as tuples of (start, resourceVersion, is-list, hash of the audit
// ID) it took 9.2-9.6 s.
func suspectsSQL(window, resources string) string {
	return `SELECT ident FROM (
    SELECT cluster, ` + reflectorKey + ` AS ident, arraySort(groupArray(` + suspectKeySQL + `)) AS s
    FROM audit_events
    WHERE ` + window + ` AND (` + refl.ListSQL + ` OR (verb = 'watch' AND req_rv != '' AND req_rv != '0'))` + resources + `
    GROUP BY cluster, ident
)
WHERE arrayExists((cur, prev) -> toUInt64(cur) != 0 AND toUInt64(cur) < toUInt64(prev), arrayPopFront(s), arrayPopBack(s))`
}

// suspectKeySQL packs a request of suspectsSQL into one sortable UInt128.
// The start's sign bit is flipped so that a start before 1970 (negative)
// would sort before those after rather than wrap to the top; toUInt64 of
// the key is its low half.
const suspectKeySQL = `bitOr(bitShiftLeft(toUInt128(bitXor(toUInt64(` + auditsql.RequestTime + `), 9223372036854775808)), 64),
                                   toUInt128(if(` + refl.ListSQL + `, 0, toUInt64OrZero(req_rv) + 1)))`

// regressionSQL lists the watches that went back, for the suspects only.
// Innermost: one row per watch or list (audit ID; a watch-list counts as a
// list, a watch that failed with a 4xx or 5xx code is left out: it did not
// restart the reflector's stream). Then seg numbers each client's lists so
// far; the window frame compares a watch only with the earlier watches of
// the same client since its last list.
func regressionSQL(window, resources string) string {
	return `SELECT cluster, user, user_agent, source_ip, api_group, resource, namespace, label_selector, field_selector,
       audit_id, rv, start, stage, uri, code, prev_max, prev_id
FROM (
    SELECT *,
           max(if(r_verb = 'watch', rvn, 0)) OVER w AS prev_max,
           argMax(if(r_verb = 'watch', audit_id, ''), if(r_verb = 'watch', rvn, 0)) OVER w AS prev_id
    FROM (
        SELECT *, sum(r_verb = 'list') OVER (PARTITION BY cluster, user, user_agent, source_ip, api_group, resource, namespace, label_selector, field_selector, instance
                                             ORDER BY start, audit_id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS seg
        FROM (
            SELECT cluster, audit_id,
                   any(user) AS user, any(user_agent) AS user_agent, any(source_ip) AS source_ip,
                   any(api_group) AS api_group, any(resource) AS resource, any(namespace) AS namespace,
                   any(label_selector) AS label_selector, any(field_selector) AS field_selector,
                   any(r_instance) AS instance,
                   if(max(r_list), 'list', any(verb)) AS r_verb, any(req_rv) AS rv, toUInt64OrZero(any(req_rv)) AS rvn,
                   min(` + auditsql.RequestTime + `) AS start,
                   argMin(stage, ts) AS stage, any(request_uri) AS uri, max(code) AS code
            FROM (SELECT *, request_uri, received_at, ` + apiserverInstanceSQL + ` AS r_instance, ` + refl.ListSQL + ` AS r_list
                  FROM audit_events -- a subquery: the aliases above would shadow these columns in WHERE
                  WHERE ` + window + ` AND verb IN ('watch', 'list')` + resources + `
                    AND ` + reflectorKey + ` IN {suspects:Array(UInt64)})
            GROUP BY cluster, audit_id
            HAVING NOT (r_verb = 'watch' AND code >= 400)
        )
    )
    WINDOW w AS (PARTITION BY cluster, user, user_agent, source_ip, api_group, resource, namespace, label_selector, field_selector, instance, seg
                 ORDER BY start, audit_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
WHERE r_verb = 'watch' AND rvn > 0 AND rvn < prev_max
ORDER BY cluster, user, user_agent, source_ip, api_group, resource, namespace, label_selector, field_selector, rv, start, audit_id`
}

type regressionRow struct {
	events.Client
	AuditID string `json:"audit_id"`
	RV      string `json:"rv"`
	Start   int64  `json:"start"`
	Stage   string `json:"stage"`
	URI     string `json:"uri"`
	Code    int32  `json:"code"`
	PrevMax uint64 `json:"prev_max"`
	PrevID  string `json:"prev_id"`
}

// Evaluate implements Detector.
func (d *Regression) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	p := store.Params{}
	res := ""
	if len(d.cfg.Resources) > 0 {
		p["resources"] = store.StringArrayParam(d.cfg.Resources)
		res = " AND resource IN {resources:Array(String)}"
	}
	window := detect.WindowParams(w, p)
	var suspects []string
	err := detect.SelectRows(ctx, q, "reflectors that went back", suspectsSQL(window, res), p, func(r struct {
		Ident uint64 `json:"ident"`
	}) error {
		suspects = append(suspects, strconv.FormatUint(r.Ident, 10))
		return nil
	})
	if err != nil || len(suspects) == 0 {
		return nil, err
	}
	p["suspects"] = "[" + strings.Join(suspects, ",") + "]"
	sql := regressionSQL(window, res)

	type group struct {
		c    events.Client
		rv   string
		rows []regressionRow
	}
	var groups []*group
	err = detect.SelectRows(ctx, q, "watch resourceVersion regressions", sql, p, func(r regressionRow) error {
		if n := len(groups); n > 0 && groups[n-1].c == r.Client && groups[n-1].rv == r.RV {
			groups[n-1].rows = append(groups[n-1].rows, r)
			return nil
		}
		groups = append(groups, &group{c: r.Client, rv: r.RV, rows: []regressionRow{r}})
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The watch each client went back from, one query per cluster.
	prevIDs := map[string][]string{}
	for _, g := range groups {
		prevIDs[g.c.Cluster] = append(prevIDs[g.c.Cluster], highest(g.rows).PrevID)
	}
	prevRows := map[string]map[string][]events.Row{}
	for _, cluster := range slices.Sorted(maps.Keys(prevIDs)) {
		slices.Sort(prevIDs[cluster])
		if prevRows[cluster], err = events.Select(ctx, q, w, cluster, slices.Compact(prevIDs[cluster])); err != nil {
			return nil, err
		}
	}
	var out []detect.Finding
	for _, g := range groups {
		f := detect.Finding{
			ID: detect.FindingID(RegressionName, g.c.Cluster, g.c.User, g.c.UserAgent, g.c.SourceIP, g.c.APIGroup, g.c.Resource,
				g.c.Namespace, g.c.LabelSelector, g.c.FieldSelector, g.rv),
			Detector: RegressionName,
			Cluster:  g.c.Cluster,
			Severity: detect.Warning,
			Subjects: detect.Subjects{
				User: g.c.User, UserAgent: g.c.UserAgent, Resource: g.c.Resource, APIGroup: g.c.APIGroup, ResourceVersion: g.rv,
				SourceIP: g.c.SourceIP, Namespace: g.c.Namespace, LabelSelector: g.c.LabelSelector, FieldSelector: g.c.FieldSelector,
			},
		}
		for _, r := range g.rows {
			ws := events.WatchStart{AuditID: r.AuditID, Stage: r.Stage, Time: detect.Micros(r.Start), URI: r.URI, Code: r.Code}
			f.Evidence = append(f.Evidence, ws.Evidence(g.c, r.RV, RoleRegressedWatch))
		}
		top := highest(g.rows)
		f.Subjects.PreviousResourceVersion = detect.FormatRV(top.PrevMax)
		if r, ok := events.FirstStage(prevRows[g.c.Cluster][top.PrevID]); ok {
			f.Evidence = append(f.Evidence, r.Evidence(RoleHighWatch, r.ReqRV))
		}
		f.Normalize()
		d.describe(&f)
		out = append(out, f)
	}
	if err := d.link(ctx, q, out); err != nil {
		return nil, err
	}
	return out, nil
}

// link marks the regressions that belong to a watch-loop finding already
// stored (the Runner evaluates watch-loop first: Follows): the same reflector, whose
// loop is one finding whatever stale resourceVersions it resumed from. They are the same incident,
// so such a regression is no separate warning: it becomes information
// that names the loop (Subjects.PartOf).
func (d *Regression) link(ctx context.Context, q detect.Querier, fs []detect.Finding) error {
	loopOf := map[string]string{} // regression ID → loop ID
	for _, f := range fs {
		s := f.Subjects
		if s.User == "system:apiserver" {
			continue // a loopback loop is named by its apiserver, which this finding does not carry
		}
		loopOf[f.ID] = watchLoopID(f.Cluster, s.User, events.ProgramName(s.UserAgent, s.User), "", s.APIGroup, s.Resource,
			s.Namespace, s.LabelSelector, s.FieldSelector)
	}
	if len(loopOf) == 0 {
		return nil
	}
	var ids []string
	for _, id := range loopOf {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	stored := map[string]bool{}
	err := detect.SelectRows(ctx, q, "watch-loop findings", "SELECT DISTINCT id FROM findings WHERE id IN {ids:Array(String)}",
		store.Params{"ids": store.StringArrayParam(slices.Compact(ids))}, func(r struct {
			ID string `json:"id"`
		}) error {
			stored[r.ID] = true
			return nil
		})
	if err != nil {
		return err
	}
	for i := range fs {
		if id := loopOf[fs[i].ID]; stored[id] {
			fs[i].Subjects.PartOf = id
			d.describe(&fs[i])
		}
	}
	return nil
}

// highest returns the row whose earlier watch had the highest
// resourceVersion.
func highest(rows []regressionRow) regressionRow {
	top := rows[0]
	for _, r := range rows[1:] {
		if r.PrevMax > top.PrevMax {
			top = r
		}
	}
	return top
}

// Merge implements Merger.
func (d *Regression) Merge(prev, next detect.Finding) detect.Finding {
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Normalize()
	// Keep the highest earlier resourceVersion either evaluation saw.
	if c, ok := detect.CompareRV(prev.Subjects.PreviousResourceVersion, f.Subjects.PreviousResourceVersion); ok && c > 0 {
		f.Subjects.PreviousResourceVersion = prev.Subjects.PreviousResourceVersion
		// Only the watch that showed the highest one stays as "before".
		f.Evidence = slices.DeleteFunc(f.Evidence, func(e detect.Evidence) bool {
			return e.Role == RoleHighWatch && e.ResourceVersion != prev.Subjects.PreviousResourceVersion
		})
	} else {
		f.Evidence = slices.DeleteFunc(f.Evidence, func(e detect.Evidence) bool {
			return e.Role == RoleHighWatch && e.ResourceVersion != f.Subjects.PreviousResourceVersion
		})
	}
	if f.Subjects.PartOf == "" {
		f.Subjects.PartOf = prev.Subjects.PartOf // once linked, linked
	}
	d.describe(&f)
	f.Subjects.WatchRestarts = max(f.Subjects.WatchRestarts, prev.Subjects.WatchRestarts, next.Subjects.WatchRestarts)
	return f
}

// describe sets the times, count, confidence and text of a finding from
// its subjects and evidence.
func (d *Regression) describe(f *detect.Finding) {
	s := &f.Subjects
	var regressed []detect.Evidence
	var before *detect.Evidence
	for i, e := range f.Evidence {
		switch e.Role {
		case RoleRegressedWatch:
			regressed = append(regressed, e)
		case RoleHighWatch:
			before = &f.Evidence[i]
		}
	}
	if len(regressed) == 0 {
		return
	}
	s.WatchRestarts = len(regressed)
	f.FirstSeen, f.LastSeen = regressed[0].Time, regressed[len(regressed)-1].Time
	prog := events.ProgramName(s.UserAgent, s.User)
	ver, affected := affectedVersion(s.UserAgent)

	// A single step back is suspicious; a client that keeps coming back
	// to the old resourceVersion is replaying history at every restart.
	conf := 0.6
	if len(regressed) >= 2 {
		conf += 0.2
	}
	if affected {
		conf += 0.1
	}
	f.Confidence = detect.Round2(min(conf, 0.99))
	f.Severity = detect.Warning
	if s.PartOf != "" {
		f.Severity = detect.Info
	}
	f.Title = fmt.Sprintf("%s resumed its watch of %s from resourceVersion %s, lower than %s it had already used",
		prog, s.Resource, s.ResourceVersion, s.PreviousResourceVersion)

	var b strings.Builder
	fmt.Fprintf(&b, "Client %s (user agent %q", s.User, s.UserAgent)
	if s.SourceIP != "" {
		fmt.Fprintf(&b, ", from %s", s.SourceIP)
	}
	fmt.Fprintf(&b, ") had watched %s from resourceVersion %s", s.Resource, s.PreviousResourceVersion)
	if before != nil {
		fmt.Fprintf(&b, " (at %s)", before.Time.Format(time.RFC3339))
	}
	fmt.Fprintf(&b, " and then, without relisting, restarted its watch from the older resourceVersion %s at %s", s.ResourceVersion, f.FirstSeen.Format(time.RFC3339))
	if len(regressed) > 1 {
		fmt.Fprintf(&b, ", %d times up to %s", len(regressed), f.LastSeen.Format(time.RFC3339))
	}
	fmt.Fprintf(&b, ". A reflector resumes from the resourceVersion of the last event it received, so the apiserver sent it an "+
		"event with an old resourceVersion — in Kubernetes 1.7.0–1.9.2 the DELETE event of an early-created object — and each "+
		"watch from it replays the %s history since then: the client's cache drops and re-adds live objects. ", s.Resource)
	if affected {
		fmt.Fprintf(&b, "%s %s is in the affected range. ", prog, ver)
	}
	if s.PartOf != "" {
		fmt.Fprintf(&b, "It is how the watch loop of finding %s began: that finding names the churn it causes.", s.PartOf)
	} else {
		b.WriteString("If dependent objects churn after its restarts, a watch-loop finding names them.")
	}
	f.Summary = b.String()
	f.Remediation = "Upgrade the kube-apiservers to 1.10.0 or later, or 1.9.3, 1.8.8 or 1.7.13 (PR #58547 fixed the DELETE " +
		"event's resourceVersion that PR #46223 broke in 1.7.0). Until then restart " + prog + " so that it relists and " +
		"resumes from a fresh resourceVersion, and touch any object of the resource (for example add a label) so that a " +
		"fresh resourceVersion lands at the end of its event stream. When many clients go back at once, the cluster's " +
		"resourceVersion itself went back: etcd was restored from an old backup (restart every client so they relist)."
}
