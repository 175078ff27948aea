package relist

import (
	"cmp"
	"context"
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

// LoopName is the name of the relist-loop detector.
const LoopName = "relist-loop"

// RoleShortWatch is, in relist-loop findings, a watch (or watch-list) of
// the client that ended within ShortWatch of its start. The relist after
// it has RoleRelist (declared with heartbeat-loss's roles): the list's
// first page or the watch-list the client sent next, whose watch_audit_id
// names the short watch. relist-herd gives RoleRelist to each client's
// first relist in the herd.
const RoleShortWatch = "short-watch"

// LoopConfig holds the relist-loop detector's parameters. Zero
// fields take the defaults, which hold at real and compressed time scales
// alike: the loop's pace is set by client-go's relist backoff (0.8 s
// doubling to 30 s, with up to as much again of jitter), not by the watch
// timeout, and a healthy watch lasts its timeoutSeconds (5–10 minutes, or
// 10 s and more in compressed test clusters).
type LoopConfig struct {
	// Resources limits the detector to these resources (default: all).
	Resources []string
	// ShortWatch is the longest a watch may last and still count as ended
	// early (default 5s). A watch answered with 410 "too old resource
	// version" inside its stream ends within milliseconds.
	ShortWatch time.Duration
	// FollowWithin is how soon after the short watch ended the client's
	// next request must be a relist (default 90s: the reflector backs off
	// up to 30 s, plus up to 30 s of jitter, before it lists again).
	FollowWithin time.Duration
	// MinTurns is the fewest turns (short watch, then relist) of one
	// client instance that make a loop (default 3); MaxGap the longest
	// time between two turns of it that still chains them (default 2m).
	// One apiserver restart gives every client one turn, a rolling
	// upgrade one per apiserver, minutes apart: neither is a loop.
	MinTurns int
	MaxGap   time.Duration
	// CriticalAfter: a loop that has run this long is critical (default
	// 15m): it is no transient, and every turn is a full list the
	// apiserver serves (from etcd when the list's resourceVersion has
	// left the watch cache).
	CriticalAfter time.Duration
	// Settle: turns younger than this at the window's end are counted for
	// this evaluation only, not yet remembered (default 2m).
	Settle time.Duration
	// Remember is how long a loop's counts are kept after its last turn
	// (default 7 days).
	Remember time.Duration
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *LoopConfig) setDefaults() {
	if c.ShortWatch <= 0 {
		c.ShortWatch = 5 * time.Second
	}
	if c.FollowWithin <= 0 {
		c.FollowWithin = 90 * time.Second
	}
	if c.MinTurns <= 0 {
		c.MinTurns = 3
	}
	if c.MaxGap <= 0 {
		c.MaxGap = 2 * time.Minute
	}
	if c.CriticalAfter <= 0 {
		c.CriticalAfter = 15 * time.Minute
	}
	if c.Settle <= 0 {
		c.Settle = 2 * time.Minute
	}
	if c.Remember <= 0 {
		c.Remember = 7 * 24 * time.Hour
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = detect.DefaultMaxEvidence
	}
}

// Loop detects a client stuck relisting a resource: its watches end
// within seconds of their start and each is followed by a full list (or
// a watch-list), again and again — the "watch of *v1.ConfigMap ended
// with: too old resource version" loop of seed 000's controller logs.
//
// The mechanism: the apiserver answers a watch from a resourceVersion it
// no longer holds (compacted in etcd, or gone from the watch cache) with
// 410 Expired, inside the watch stream, so the audit log shows the watch
// with code 200, ended after milliseconds. client-go's reflector then
// relists and watches from the list's resourceVersion; when that one is
// too old again by the time the watch starts — a watch cache too small
// for the resource's event rate, etcd compacting faster than the client
// lists, a proxy that cuts watches, an apiserver whose cache lags or a
// restored etcd — it loops, and every turn is a full list.
//
// What it needs from the audit log: the client's watches with their
// ResponseComplete stage (when they ended) and its lists, Metadata level
// (the requestURI tells a watch-list and a list's continue token).
//
// What it claims: one client re-reading one target (internal/reflector's
// ClientSQL and TargetSQL: a program instance, and the resource,
// namespace, object name and selectors it reads) made at least MinTurns
// turns, each no more than MaxGap after the one before: a watch of the
// target (plain, or a watch-list: sendInitialEvents=true with
// resourceVersionMatch=NotOlderThan) that succeeded (2xx, or 410) and
// ended within ShortWatch of its start, whose next request from that
// client for that target was a list (reflector.ListSQL: a list without a
// continue token, or a watch-list) sent within FollowWithin after the
// watch ended — a relist by reflector.RelistSQL's rule, the watch having
// come first. Pages of a paginated list (continue=…) are one relist.
//
// One finding per client and resource: the program identity of
// internal/reflector (user, user-agent product, the apiserver of a
// loopback client), not its address — the kube-proxies of every node in
// the loop are one finding naming their addresses — and not its namespace
// or selectors (a kubelet's per-object reflectors of one resource loop
// for one cause). Subjects.Iterations counts the turns over the loop's
// life. Evidence: RoleShortWatch for each short watch, RoleRelist for the
// relist after it (watch_audit_id names the watch). Severity warning;
// critical once the loop has run CriticalAfter.
//
// With a StateStore (see EvaluateState) a loop, once declared, is
// remembered: its turns add up across windows and its last_seen follows
// every later turn.
type Loop struct {
	cfg LoopConfig
	// stats keeps, by finding ID, the watch durations of the latest
	// evaluations, which the text of a merged finding names (evidence
	// does not carry them).
	stats *recent[loopStats]
}

// NewLoop returns the detector with cfg's parameters.
func NewLoop(cfg LoopConfig) *Loop {
	cfg.setDefaults()
	return &Loop{cfg: cfg, stats: newRecent[loopStats](recentFindings)}
}

// Name implements Detector.
func (d *Loop) Name() string { return LoopName }

// Config returns the parameters in effect.
func (d *Loop) Config() LoopConfig { return d.cfg }

// relistIdentSQL hashes a finding's identity: the program identity of
// internal/reflector without namespace and selectors.
const relistIdentSQL = `cityHash64(user, ` + refl.ProgramSQL + `, api_group, resource, ` + refl.InstanceSQL + `)`

// relistSeqSQL hashes one client's reads of one target (internal/reflector's
// ClientSQL and TargetSQL): whose requests follow one another (one
// informer's list, watch, list, …). A list after a short watch of the same
// target by the same client is a relist by reflector.RelistSQL's rule.
const relistSeqSQL = `cityHash64(` + refl.ClientSQL + `, ` + refl.TargetSQL + `)`

// okWatchCodeSQL is true when code (a column) says a watch was served: a
// 2xx (or no code yet), or a 410 that an apiserver answered in the status
// rather than the stream.
func okWatchCodeSQL(code string) string {
	return `(` + code + ` = 0 OR (` + code + ` >= 200 AND ` + code + ` < 300) OR ` + code + ` = 410)`
}

// relistSuspectsSQL finds, cheaply, the reflectors that had at least
// min_turns watches end early (their ResponseComplete stage carries when
// the request was received; logs without requestReceivedTimestamp — 1.8's
// v1beta1 — cannot tell here and pass), and those of remembered loops.
func relistSuspectsSQL(window, resources string) string {
	return `SELECT DISTINCT toString(r_seq) AS seq FROM (
    SELECT cluster, ` + relistSeqSQL + ` AS r_seq, ` + relistIdentSQL + ` AS r_ident
    FROM audit_events
    WHERE ` + window + ` AND verb = 'watch' AND stage = 'ResponseComplete'` + resources + `
      AND ` + okWatchCodeSQL("code") + `
      AND (received_at <= toDateTime64(0, 6, 'UTC')
           OR toUnixTimestamp64Micro(ts) - toUnixTimestamp64Micro(received_at) <= {short_us:Int64})
)
GROUP BY cluster, r_seq, r_ident
HAVING count() >= {min_turns:UInt32} OR concat(cluster, '/', toString(r_ident)) IN {known:Array(String)}`
}

// relistTurnsSQL returns the turns of the suspects: innermost, one row per
// watch or list (first pages only: a continue page is part of its list),
// its start (requestReceivedTimestamp, or its earliest stage) and end (its
// ResponseComplete stage); then each request beside the next one of the
// same reflector; the turns are the early-ended watches whose next request
// is a relist soon after.
func relistTurnsSQL(window, resources string) string {
	return `SELECT cluster, toString(g_ident) AS ident, toString(g_seq) AS seq, g_user AS user, g_user_agent AS user_agent,
       g_source_ip AS source_ip, g_program AS program, g_instance AS instance, g_api_group AS api_group, g_resource AS resource,
       g_namespace AS namespace, g_label_selector AS label_selector, g_field_selector AS field_selector,
       audit_id, g_stage AS stage, g_start AS start, g_end AS end_us, g_rv AS rv, g_uri AS uri, g_code AS code,
       n_id, n_stage, n_start, n_uri, n_code, n_rv, n_verb
FROM (
    SELECT *,
           any(audit_id) OVER nxt AS n_id, any(g_stage) OVER nxt AS n_stage, any(g_start) OVER nxt AS n_start,
           any(g_uri) OVER nxt AS n_uri, any(g_code) OVER nxt AS n_code, any(g_rv) OVER nxt AS n_rv,
           any(g_verb) OVER nxt AS n_verb, any(g_relist) OVER nxt AS n_relist
    FROM (
        SELECT cluster, audit_id, any(r_ident) AS g_ident, any(r_seq) AS g_seq,
               any(user) AS g_user, any(toString(user_agent)) AS g_user_agent, any(toString(source_ip)) AS g_source_ip,
               any(r_program) AS g_program, any(r_instance) AS g_instance,
               any(api_group) AS g_api_group, any(resource) AS g_resource, any(namespace) AS g_namespace,
               any(label_selector) AS g_label_selector, any(field_selector) AS g_field_selector,
               any(verb) AS g_verb, max(r_relist) AS g_relist,
               min(` + auditsql.RequestTime + `) AS g_start,
               maxIf(toUnixTimestamp64Micro(ts), stage = 'ResponseComplete') AS g_end,
               max(received_at > toDateTime64(0, 6, 'UTC')) OR countIf(stage != 'ResponseComplete') > 0 AS g_start_known,
               argMin(stage, ts) AS g_stage, any(request_uri) AS g_uri, max(code) AS g_code, any(req_rv) AS g_rv
        FROM (
            SELECT *, request_uri, received_at, ` + relistIdentSQL + ` AS r_ident, ` + relistSeqSQL + ` AS r_seq,
                   ` + refl.ProgramSQL + ` AS r_program, ` + refl.InstanceSQL + ` AS r_instance,
                   ` + refl.ListSQL + ` AS r_relist
            FROM audit_events -- a subquery: the aliases above would shadow these columns in WHERE
            WHERE ` + window + ` AND verb IN ('watch', 'list') AND req_continue = ''` + resources + `
              AND ` + relistSeqSQL + ` IN {suspects:Array(UInt64)}
        )
        GROUP BY cluster, audit_id
    )
    WINDOW nxt AS (PARTITION BY cluster, g_seq ORDER BY g_start, audit_id ROWS BETWEEN 1 FOLLOWING AND 1 FOLLOWING)
)
WHERE g_verb = 'watch' AND g_start_known AND g_end > 0 AND g_end - g_start <= {short_us:Int64}
  AND ` + okWatchCodeSQL("g_code") + `
  AND n_relist AND n_id != '' AND n_start - g_end <= {follow_us:Int64}
ORDER BY cluster, ident, seq, start, audit_id`
}

type turnRow struct {
	events.Reflector
	Seq       string `json:"seq"`
	UserAgent string `json:"user_agent"`
	SourceIP  string `json:"source_ip"`
	AuditID   string `json:"audit_id"`
	Stage     string `json:"stage"`
	Start     int64  `json:"start"`
	End       int64  `json:"end_us"`
	RV        string `json:"rv"`
	URI       string `json:"uri"`
	Code      int32  `json:"code"`
	NextID    string `json:"n_id"`
	NextStage string `json:"n_stage"`
	NextStart int64  `json:"n_start"`
	NextURI   string `json:"n_uri"`
	NextCode  int32  `json:"n_code"`
	NextRV    string `json:"n_rv"`
	NextVerb  string `json:"n_verb"`
}

// turn is one short watch and the relist after it.
type turn struct {
	row      turnRow
	watch    detect.Evidence
	relist   detect.Evidence
	duration time.Duration
}

func (t turn) at() time.Time { return t.watch.Time }

// relistClient is one finding's turns in the window, by instance.
type relistClient struct {
	events.Reflector // Namespace and selectors of the first instance
	seqs             map[string][]turn
	hist             *relistHistory
}

// Evaluate implements Detector: one window, nothing remembered.
func (d *Loop) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: the window, added to what earlier
// evaluations remembered in st (nil: nothing).
func (d *Loop) EvaluateState(ctx context.Context, q detect.Querier, st detect.StateStore, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	mem, err := d.load(ctx, st, w)
	if err != nil {
		return nil, err
	}
	known := make([]string, 0, len(mem))
	for k := range mem {
		known = append(known, k)
	}
	slices.Sort(known)
	p := store.Params{"short_us": strconv.FormatInt(d.cfg.ShortWatch.Microseconds(), 10),
		"follow_us": strconv.FormatInt(d.cfg.FollowWithin.Microseconds(), 10),
		"min_turns": events.Itoa(d.cfg.MinTurns), "known": store.StringArrayParam(known)}
	res := ""
	if len(d.cfg.Resources) > 0 {
		p["resources"] = store.StringArrayParam(d.cfg.Resources)
		res = " AND resource IN {resources:Array(String)}"
	}
	window := detect.WindowParams(w, p)
	var suspects []string
	err = detect.SelectRows(ctx, q, "reflectors whose watches ended early", relistSuspectsSQL(window, res), p, func(r struct {
		Seq string `json:"seq"`
	}) error {
		suspects = append(suspects, r.Seq)
		return nil
	})
	if err != nil || len(suspects) == 0 {
		return nil, err
	}
	slices.Sort(suspects)
	p["suspects"] = "[" + strings.Join(suspects, ",") + "]"

	clients := map[string]*relistClient{}
	var order []string
	err = detect.SelectRows(ctx, q, "relist turns", relistTurnsSQL(window, res), p, func(r turnRow) error {
		k := r.Cluster + "/" + r.Ident
		c := clients[k]
		if c == nil {
			c = &relistClient{Reflector: r.Reflector, seqs: map[string][]turn{}, hist: mem[k]}
			clients[k] = c
			order = append(order, k)
		}
		c.seqs[r.Seq] = append(c.seqs[r.Seq], newTurn(r))
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(order)
	settled := w.Until.Add(-d.cfg.Settle)
	var out []detect.Finding
	var save []*relistHistory
	for _, k := range order {
		c := clients[k]
		turns := d.loopTurns(c)
		if len(turns) == 0 {
			continue
		}
		tot, changed := d.account(c, turns, settled)
		f := d.finding(c, turns, tot)
		out = append(out, f)
		if changed {
			save = append(save, c.hist)
		}
	}
	if err := d.save(ctx, st, save); err != nil {
		return nil, err
	}
	return out, nil
}

func newTurn(r turnRow) turn {
	c := events.Client{Cluster: r.Cluster, User: r.User, UserAgent: r.UserAgent, SourceIP: r.SourceIP, APIGroup: r.APIGroup,
		Resource: r.Resource, Namespace: r.Namespace, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector}
	ws := events.WatchStart{AuditID: r.AuditID, Stage: r.Stage, Time: detect.Micros(r.Start), URI: r.URI, Code: r.Code}
	t := turn{row: r, watch: ws.Evidence(c, r.RV, RoleShortWatch), duration: time.Duration(r.End-r.Start) * time.Microsecond}
	t.relist = detect.Evidence{AuditID: r.NextID, Stage: r.NextStage, Time: detect.Micros(r.NextStart), Verb: r.NextVerb, Resource: r.Resource,
		Namespace: r.Namespace, User: r.User, RequestURI: r.NextURI, Code: r.NextCode, Role: detect.RoleRelist,
		ResourceVersion: r.NextRV, WatchAuditID: r.AuditID}
	return t
}

// loopTurns returns the turns of c that belong to a loop, by time: the
// runs of one instance of at least MinTurns turns each within MaxGap of
// the one before, and, for a remembered loop, every run that continues it.
func (d *Loop) loopTurns(c *relistClient) []turn {
	var out []turn
	for _, seq := range slices.Sorted(maps.Keys(c.seqs)) {
		ts := c.seqs[seq]
		slices.SortFunc(ts, func(a, b turn) int {
			return cmp.Or(a.at().Compare(b.at()), strings.Compare(a.watch.AuditID, b.watch.AuditID))
		})
		for i := 0; i < len(ts); {
			j := i + 1
			for j < len(ts) && ts[j].at().Sub(ts[j-1].at()) <= d.cfg.MaxGap {
				j++
			}
			run := ts[i:j]
			continues := c.hist != nil && !run[0].at().After(c.hist.LastSeen.Add(d.cfg.MaxGap))
			if len(run) >= d.cfg.MinTurns || continues {
				out = append(out, run...)
			}
			i = j
		}
	}
	slices.SortFunc(out, func(a, b turn) int {
		return cmp.Or(a.at().Compare(b.at()), strings.Compare(a.watch.AuditID, b.watch.AuditID))
	})
	return out
}
