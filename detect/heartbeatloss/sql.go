package heartbeatloss

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
	"github.com/auditlens/auditlens/store"

	"github.com/auditlens/auditlens/internal/auditsql"
	"github.com/auditlens/auditlens/internal/heartbeat"
)

// The heartbeat-loss detector's queries. Everything that grows with the
// number of events (one row per heartbeat, per event of the feed) is
// aggregated by the engine; Go receives one row per node and only the
// gaps, silences and consequences of the nodes that were lost. Array
// lambdas take their arrays as arguments and never capture one: the engine
// copies a captured array for every element (quadratic memory: a node's
// hour of heartbeats asked for hundreds of GiB).

// heartbeatNodesSQL returns, per node, its heartbeats' (package
// internal/heartbeat says which requests are heartbeats) count, first and
// last time, median and 90th-percentile gap, the gap that makes it lost
// (max(k × median, 1.5 × p90, floor)) and the gaps longer than that, each
// from the heartbeat before it to the one after.
//
// The stages of one request share its request time. Each stage is one
// number, time × 1000 + code, so that sorting a node's numbers puts a
// request's stages together with its highest code last; only that one is
// kept, and counts when its code does (heartbeat.CountsSQL). One sort of
// integers per node is much cheaper than grouping millions of rows by
// request. Each step is its own subquery: an alias
// used twice in one SELECT is computed twice when it holds a lambda. The
// rows are sorted here (selectNodes), not by ORDER BY: over 100M events
// (50 nodes of 450k heartbeats each) the engine took 12 s with it and 4 s
// without.
func heartbeatNodesSQL(window string) string {
	return `SELECT cluster, node, length(beats) AS n, beats[1] AS first_t, beats[-1] AS last_t, med, p90, thr,
       arrayFilter((f, g) -> g > thr, arrayPopBack(beats), gaps) AS gap_from,
       arrayFilter((f, g) -> g > thr, arrayPopFront(beats), gaps) AS gap_to
FROM (
    SELECT cluster, node, beats, gaps, med, p90, greatest(toInt64({k:Float64} * med), toInt64(1.5 * p90), {floor:Int64}) AS thr
    FROM (
        SELECT cluster, node, beats, gaps,
               if(empty(gaps), toInt64(0), toInt64(arrayReduce('quantileExact(0.5)', gaps))) AS med,
               if(empty(gaps), toInt64(0), toInt64(arrayReduce('quantileExact(0.9)', gaps))) AS p90
        FROM (
            SELECT cluster, node, beats, arrayPopFront(arrayDifference(beats)) AS gaps
            FROM (
                SELECT cluster, node,
                       arrayMap(k -> intDiv(k, 1000), arrayFilter((k, next) -> intDiv(k, 1000) != intDiv(next, 1000)
                           AND ` + heartbeat.CountsSQL("k % 1000") + `,
                           stages, arrayPushBack(arrayPopFront(stages), toInt64(0)))) AS beats
                FROM (
                    SELECT cluster, ` + heartbeat.NodeSQL + ` AS node, arraySort(groupArray(` + heartbeat.TimeSQL + ` * 1000 + code)) AS stages
                    FROM audit_events
                    WHERE ` + window + ` AND ` + heartbeat.FilterSQL + ` AND code >= 0 AND code < 1000
                    GROUP BY cluster, user
                )
            )
        )
    )
)
WHERE n > 0`
}

// hbNode is one node's heartbeats over the lookback and window.
type hbNode struct {
	Cluster string  `json:"cluster"`
	Node    string  `json:"node"`
	N       int     `json:"n"`
	FirstT  int64   `json:"first_t"`
	LastT   int64   `json:"last_t"`
	Median  int64   `json:"med"`
	P90     int64   `json:"p90"`
	Thr     int64   `json:"thr"`
	GapFrom []int64 `json:"gap_from"`
	GapTo   []int64 `json:"gap_to"`
}

func (d *HeartbeatLoss) selectNodes(ctx context.Context, q detect.Querier, span detect.Window) ([]hbNode, error) {
	p := store.Params{"k": strconv.FormatFloat(d.cfg.IntervalFactor, 'f', -1, 64), "floor": strconv.FormatInt(usIn(d.cfg.Floor), 10)}
	sql := heartbeatNodesSQL(detect.WindowParams(span, p))
	var out []hbNode
	err := detect.SelectRows(ctx, q, "node heartbeats", sql, p, func(r hbNode) error {
		out = append(out, r)
		return nil
	})
	slices.SortFunc(out, func(a, b hbNode) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Node, b.Node))
	})
	return out, err
}

// feedHeadSQL is the time of each cluster's latest event in the window: how
// far its audit feed reaches. The window starts where an open gap could
// begin to matter, so the engine reads little (the sort key holds the
// hour).
func feedHeadSQL(window string) string {
	return `SELECT cluster, toUnixTimestamp64Micro(max(ts)) AS head FROM audit_events WHERE ` + window + ` GROUP BY cluster`
}

func selectHeads(ctx context.Context, q detect.Querier, w detect.Window) (map[string]int64, error) {
	p := store.Params{}
	out := map[string]int64{}
	err := detect.SelectRows(ctx, q, "audit feed heads", feedHeadSQL(detect.WindowParams(w, p)), p,
		func(r struct {
			Cluster string `json:"cluster"`
			Head    int64  `json:"head"`
		}) error {
			out[r.Cluster] = r.Head
			return nil
		})
	return out, err
}

// silencesSQL returns the stretches of at least {min} seconds in which a
// cluster's audit feed holds no event at all, as [from, to) in
// microseconds. Seconds with events are found by the engine.
func silencesSQL(window string) string {
	return `SELECT cluster, arrayMap((a, b) -> [(a + 1) * 1000000, b * 1000000], from_s, to_s) AS silences
FROM (
    SELECT cluster, arraySort(groupArray(s)) AS secs, arrayPopFront(arrayDifference(secs)) AS steps,
           arrayFilter((a, d) -> d - 1 >= {min:Int64}, arrayPopBack(secs), steps) AS from_s,
           arrayFilter((b, d) -> d - 1 >= {min:Int64}, arrayPopFront(secs), steps) AS to_s
    FROM (
        SELECT cluster, intDiv(toUnixTimestamp64Micro(ts), 1000000) AS s
        FROM audit_events
        WHERE ` + window + `
        GROUP BY cluster, s
    )
    GROUP BY cluster
)`
}

// selectSilences returns the silences of at least min (whole seconds
// without an event) per cluster.
func (d *HeartbeatLoss) selectSilences(ctx context.Context, q detect.Querier, w detect.Window, min time.Duration) (map[string][][2]int64, error) {
	p := store.Params{"min": strconv.FormatInt(max(int64(min/time.Second), 1), 10)}
	out := map[string][][2]int64{}
	err := detect.SelectRows(ctx, q, "audit feed silences", silencesSQL(detect.WindowParams(w, p)), p,
		func(r struct {
			Cluster  string     `json:"cluster"`
			Silences [][2]int64 `json:"silences"`
		}) error {
			out[r.Cluster] = r.Silences
			return nil
		})
	return out, err
}

// intentSQL returns, for the given nodes of one cluster, the writes that
// show someone took a node away on purpose: a delete by anyone; an update
// or patch of the node itself by anyone but kubelets, the node-lifecycle
// controller and routine controllers (a cordon, a taint, a drain's first
// step). One row per node.
func intentSQL(window string) string {
	return `SELECT name AS node, groupArray(` + auditsql.RequestTime + `) AS intent_t
FROM audit_events
WHERE ` + window + ` AND cluster = {cluster:String} AND resource = 'nodes' AND subresource = '' AND name IN {nodes:Array(String)}
  AND (verb = 'delete' OR (verb IN ('update', 'patch') AND NOT startsWith(user, 'system:node:') AND user NOT IN {routine:Array(String)}))
GROUP BY name`
}

// activitySQL counts, per node, the requests its kubelet made strictly
// inside the given stretch of its gap ({lo} and {hi}, microseconds, in the
// order of {nodes}): a node that reached the apiserver during its heartbeat
// gap is not cut off — its heartbeats are missing for another reason, such
// as a policy that stopped logging them, or they failed.
func activitySQL(window string) string {
	return `SELECT node, count() AS n
FROM (
    SELECT ` + heartbeat.NodeSQL + ` AS node, indexOf({nodes:Array(String)}, node) AS i, ` + auditsql.RequestTime + ` AS t
    FROM audit_events
    WHERE ` + window + ` AND cluster = {cluster:String} AND user IN {users:Array(String)}
)
WHERE i > 0 AND t > {lo:Array(Int64)}[i] AND t < {hi:Array(Int64)}[i]
GROUP BY node`
}

// selectIntent returns, per node, when someone took it away on purpose.
func (d *HeartbeatLoss) selectIntent(ctx context.Context, q detect.Querier, w detect.Window, cluster string, nodes []string) (map[string][]int64, error) {
	routine := append(slices.Clone(d.cfg.LifecycleUsers), d.cfg.RoutineNodeWriters...)
	p := store.Params{"cluster": store.StringParam(cluster), "nodes": store.StringArrayParam(nodes), "routine": store.StringArrayParam(routine)}
	ww := w
	ww.Clusters = nil
	out := map[string][]int64{}
	err := detect.SelectRows(ctx, q, "writes of lost nodes", intentSQL(detect.WindowParams(ww, p)), p,
		func(r struct {
			Node    string  `json:"node"`
			IntentT []int64 `json:"intent_t"`
		}) error {
			out[r.Node] = r.IntentT
			return nil
		})
	return out, err
}

// selectActive returns the nodes whose kubelet made requests in
// (lo[i], hi[i]).
func selectActive(ctx context.Context, q detect.Querier, w detect.Window, cluster string, nodes []string, lo, hi []int64) (map[string]bool, error) {
	users := make([]string, len(nodes))
	for i, n := range nodes {
		users[i] = heartbeat.User(n)
	}
	p := store.Params{"cluster": store.StringParam(cluster), "nodes": store.StringArrayParam(nodes), "users": store.StringArrayParam(users),
		"lo": intArrayParam(lo), "hi": intArrayParam(hi)}
	ww := w
	ww.Clusters = nil
	out := map[string]bool{}
	err := detect.SelectRows(ctx, q, "requests of lost nodes", activitySQL(detect.WindowParams(ww, p)), p,
		func(r struct {
			Node string `json:"node"`
			N    int    `json:"n"`
		}) error {
			out[r.Node] = r.N > 0
			return nil
		})
	return out, err
}

func intArrayParam(vals []int64) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// consequencesSQL returns, one row per request, what followed the loss
// of the given nodes in one cluster: the node-lifecycle controller's
// writes of them (status: NotReady/Unknown; the node: taints), pod
// deletes and evictions by the evicting controllers, and the nodes'
// kubelets' lists and watch-lists (the relist when they come back).
func consequencesSQL(window string) string {
	return `SELECT cluster, audit_id, c_stage AS stage, c_t AS t, 0 AS received, c_verb AS verb, c_resource AS resource,
       c_sub AS sub, c_namespace AS namespace, c_name AS name, c_user AS user, '' AS user_agent, '' AS source_ip,
       c_uri AS request_uri, c_code AS code, '' AS req_rv, '' AS response_rv, '' AS object_rv
FROM (
    SELECT cluster, audit_id, argMin(stage, ts) AS c_stage, min(` + auditsql.RequestTime + `) AS c_t, any(verb) AS c_verb,
           any(resource) AS c_resource, any(subresource) AS c_sub, any(namespace) AS c_namespace, any(name) AS c_name,
           any(user) AS c_user, any(request_uri) AS c_uri, max(code) AS c_code
    FROM audit_events
    WHERE ` + window + ` AND cluster = {cluster:String}
      AND ((resource = 'nodes' AND verb IN ('patch', 'update') AND user IN {lifecycle:Array(String)} AND name IN {nodes:Array(String)})
        OR (resource = 'pods' AND user IN {evictors:Array(String)}
            AND ((verb = 'delete' AND subresource = '') OR (verb = 'create' AND subresource = 'eviction')))
        OR (user IN {users:Array(String)} AND (verb = 'list' OR (verb = 'watch' AND req_rv_match = 'NotOlderThan'))))
    GROUP BY cluster, audit_id
    HAVING c_code = 0 OR (c_code >= 200 AND c_code < 300)
)
ORDER BY t, audit_id`
}

// activeSQL tells whether any of the given users made a request in one
// cluster and window.
func activeSQL(window string) string {
	return `SELECT count() AS n FROM (
    SELECT 1 FROM audit_events WHERE ` + window + ` AND cluster = {cluster:String} AND user IN {users:Array(String)} LIMIT 1
)`
}

func selectAnyRequest(ctx context.Context, q detect.Querier, w detect.Window, cluster string, users []string) (bool, error) {
	p := store.Params{"cluster": store.StringParam(cluster), "users": store.StringArrayParam(users)}
	ww := w
	ww.Clusters = nil
	found := false
	err := detect.SelectRows(ctx, q, "requests of the node-lifecycle controller", activeSQL(detect.WindowParams(ww, p)), p,
		func(r struct {
			N int `json:"n"`
		}) error {
			found = r.N > 0
			return nil
		})
	return found, err
}

type consequenceRow struct {
	events.Row
	Sub string `json:"sub"`
}

func (d *HeartbeatLoss) selectConsequences(ctx context.Context, q detect.Querier, w detect.Window, cluster string, nodes []string) ([]consequenceRow, error) {
	users := make([]string, len(nodes))
	for i, n := range nodes {
		users[i] = heartbeat.User(n)
	}
	p := store.Params{"cluster": store.StringParam(cluster), "nodes": store.StringArrayParam(nodes), "users": store.StringArrayParam(users),
		"lifecycle": store.StringArrayParam(d.cfg.LifecycleUsers), "evictors": store.StringArrayParam(d.cfg.EvictionUsers)}
	ww := w
	ww.Clusters = nil
	var out []consequenceRow
	err := detect.SelectRows(ctx, q, "consequences of heartbeat loss", consequencesSQL(detect.WindowParams(ww, p)), p,
		func(r consequenceRow) error {
			out = append(out, r)
			return nil
		})
	return out, err
}

// boundarySQL returns the stored stages of the heartbeats of one cluster
// named by node and request time ("node/microseconds"): the last
// heartbeat before each gap and the first after it. The window is narrowed
// to the times asked for.
func boundarySQL(window string) string {
	return `SELECT ` + events.Columns + `, concat(` + heartbeat.NodeSQL + `, '/', toString(` + heartbeat.TimeSQL + `)) AS key
FROM audit_events
WHERE ` + window + ` AND cluster = {cluster:String} AND ` + heartbeat.FilterSQL + `
  AND name IN {nodes:Array(String)} AND ` + heartbeat.TimeSQL + ` IN {times:Array(Int64)} AND key IN {keys:Array(String)}
ORDER BY ts, stage`
}

type boundaryRow struct {
	events.Row
	Key string `json:"key"`
}

func selectBoundaries(ctx context.Context, q detect.Querier, cluster string, keys []string) (map[string][]events.Row, error) {
	out := map[string][]events.Row{}
	if len(keys) == 0 {
		return out, nil
	}
	var nodes []string
	var times []int64
	for _, k := range keys {
		i := strings.LastIndexByte(k, '/')
		t, _ := strconv.ParseInt(k[i+1:], 10, 64)
		nodes, times = append(nodes, k[:i]), append(times, t)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	// A stage is logged at most a request timeout after the request.
	w := detect.Window{Since: detect.Micros(slices.Min(times)), Until: detect.Micros(slices.Max(times)).Add(2 * time.Minute)}
	p := store.Params{"cluster": store.StringParam(cluster), "keys": store.StringArrayParam(keys), "nodes": store.StringArrayParam(nodes), "times": intArrayParam(times)}
	err := detect.SelectRows(ctx, q, "heartbeats around gaps", boundarySQL(detect.WindowParams(w, p)), p,
		func(r boundaryRow) error {
			out[r.Key] = append(out[r.Key], r.Row)
			return nil
		})
	return out, err
}
