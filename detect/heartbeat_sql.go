package detect

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/auditlens/auditlens/store"
)

// The heartbeat-loss detector's queries. Everything that grows with the
// number of events (one row per heartbeat, per event of the feed) is
// aggregated by the engine; Go receives one row per node and only the
// gaps, silences and consequences of the nodes that were lost.

// heartbeatFilter selects kubelets' heartbeats: the Lease of their node in
// kube-node-lease, and their node's status, written by system:node:<node>.
const heartbeatFilter = `startsWith(user, 'system:node:') AND verb IN ('update', 'patch')
          AND resource IN ('leases', 'nodes') AND name = substring(user, 13)
          AND ((resource = 'leases' AND namespace = 'kube-node-lease' AND subresource = '')
            OR (resource = 'nodes' AND subresource = 'status'))`

// requestTimeSQL is when a request was made, in microseconds: its
// requestReceivedTimestamp, which every stage of it carries (so grouping on
// it counts a request once), or the stage's time in logs without one
// (audit.k8s.io/v1alpha1 and 1.8's v1beta1).
const requestTimeSQL = `toUnixTimestamp64Micro(if(received_at > toDateTime64(0, 6, 'UTC'), least(received_at, ts), ts))`

// heartbeatNodesSQL returns, per node, its heartbeats' count, first and
// last time, median and 90th-percentile gap, the gap that makes it lost
// (max(k × median, 1.5 × p90, floor)) and the gaps longer than that, each
// from the heartbeat before it to the one after.
const heartbeatNodesSQL = `SELECT cluster, node, length(beats) AS n, beats[1] AS first_t, beats[-1] AS last_t, med, p90, thr,
       arrayMap(i -> beats[i], idx) AS gap_from, arrayMap(i -> beats[i + 1], idx) AS gap_to
FROM (
    SELECT cluster, node, arraySort(groupArray(t)) AS beats,
           arrayPopFront(arrayDifference(beats)) AS gaps,
           if(empty(gaps), toInt64(0), toInt64(arrayReduce('quantileExact(0.5)', gaps))) AS med,
           if(empty(gaps), toInt64(0), toInt64(arrayReduce('quantileExact(0.9)', gaps))) AS p90,
           greatest(toInt64({k:Float64} * med), toInt64(1.5 * p90), {floor:Int64}) AS thr,
           arrayFilter(i -> gaps[i] > thr, arrayEnumerate(gaps)) AS idx
    FROM (
        SELECT cluster, substring(user, 13) AS node, ` + requestTimeSQL + ` AS t, max(code) AS c
        FROM audit_events
        WHERE %WINDOW% AND ` + heartbeatFilter + `
        GROUP BY cluster, node, t
        HAVING c = 0 OR (c >= 200 AND c < 300) OR c = 409
    )
    GROUP BY cluster, node
)
ORDER BY cluster, node`

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

func (d *HeartbeatLoss) selectNodes(ctx context.Context, q Querier, span Window) ([]hbNode, error) {
	p := store.Params{"k": strconv.FormatFloat(d.cfg.IntervalFactor, 'f', -1, 64), "floor": strconv.FormatInt(usIn(d.cfg.Floor), 10)}
	sql := strings.Replace(heartbeatNodesSQL, "%WINDOW%", windowParams(span, p), 1)
	var out []hbNode
	err := selectRows(ctx, q, "node heartbeats", sql, p, func(r hbNode) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// feedHeadSQL is the time of each cluster's latest event in the window: how
// far its audit feed reaches.
const feedHeadSQL = `SELECT cluster, toUnixTimestamp64Micro(max(ts)) AS head FROM audit_events WHERE %WINDOW% GROUP BY cluster`

func selectHeads(ctx context.Context, q Querier, w Window) (map[string]int64, error) {
	p := store.Params{}
	out := map[string]int64{}
	err := selectRows(ctx, q, "audit feed heads", strings.Replace(feedHeadSQL, "%WINDOW%", windowParams(w, p), 1), p,
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
const silencesSQL = `SELECT cluster, arrayMap(i -> ((secs[i] + 1) * 1000000, secs[i + 1] * 1000000), idx) AS silences
FROM (
    SELECT cluster, arraySort(groupArray(s)) AS secs,
           arrayFilter(i -> i < length(secs) AND secs[i + 1] - secs[i] - 1 >= {min:Int64}, arrayEnumerate(secs)) AS idx
    FROM (
        SELECT cluster, intDiv(toUnixTimestamp64Micro(ts), 1000000) AS s
        FROM audit_events
        WHERE %WINDOW%
        GROUP BY cluster, s
    )
    GROUP BY cluster
)`

func (d *HeartbeatLoss) selectSilences(ctx context.Context, q Querier, w Window) (map[string][][2]int64, error) {
	p := store.Params{"min": strconv.FormatInt(int64(d.cfg.Floor.Seconds()), 10)}
	out := map[string][][2]int64{}
	err := selectRows(ctx, q, "audit feed silences", strings.Replace(silencesSQL, "%WINDOW%", windowParams(w, p), 1), p,
		func(r struct {
			Cluster  string     `json:"cluster"`
			Silences [][2]int64 `json:"silences"`
		}) error {
			out[r.Cluster] = r.Silences
			return nil
		})
	return out, err
}

// nodeWritesSQL returns, for the given nodes of one cluster, the writes
// that show someone took a node away on purpose — a delete by anyone; an
// update or patch of the node itself by anyone but kubelets, the
// node-lifecycle controller and routine controllers (a cordon, a taint,
// a drain's first step) — and the seconds in which the nodes' own
// kubelets made any request (a node that reached the apiserver during its
// heartbeat gap is not cut off: its heartbeats are missing for another
// reason, such as a policy that stopped logging them, or they failed).
// One row per node.
const nodeWritesSQL = `SELECT node, groupArrayIf(t, intent) AS intent_t, groupArrayIf(u, intent) AS intent_user,
       groupArrayIf(v, intent) AS intent_verb, arraySort(groupUniqArrayIf(intDiv(t, 1000000), NOT intent)) AS active_s
FROM (
    SELECT name AS node, ` + requestTimeSQL + ` AS t, toString(user) AS u, toString(verb) AS v, true AS intent
    FROM audit_events
    WHERE %WINDOW% AND cluster = {cluster:String} AND resource = 'nodes' AND subresource = '' AND name IN {nodes:Array(String)}
      AND (verb = 'delete' OR (verb IN ('update', 'patch') AND NOT startsWith(user, 'system:node:') AND user NOT IN {routine:Array(String)}))
    UNION ALL
    SELECT substring(user, 13) AS node, ` + requestTimeSQL + ` AS t, '' AS u, '' AS v, false AS intent
    FROM audit_events
    WHERE %WINDOW% AND cluster = {cluster:String} AND user IN {users:Array(String)}
)
GROUP BY node`

type nodeWrites struct {
	Node       string   `json:"node"`
	IntentT    []int64  `json:"intent_t"`
	IntentUser []string `json:"intent_user"`
	IntentVerb []string `json:"intent_verb"`
	ActiveS    []int64  `json:"active_s"`
}

func (d *HeartbeatLoss) selectNodeWrites(ctx context.Context, q Querier, w Window, cluster string, nodes []string) (map[string]nodeWrites, error) {
	users := make([]string, len(nodes))
	for i, n := range nodes {
		users[i] = "system:node:" + n
	}
	routine := append(slices.Clone(d.cfg.LifecycleUsers), d.cfg.RoutineNodeWriters...)
	p := store.Params{"cluster": stringParam(cluster), "nodes": arrayParam(nodes), "users": arrayParam(users), "routine": arrayParam(routine)}
	ww := w
	ww.Clusters = nil
	out := map[string]nodeWrites{}
	err := selectRows(ctx, q, "writes of lost nodes", strings.ReplaceAll(nodeWritesSQL, "%WINDOW%", windowParams(ww, p)), p,
		func(r nodeWrites) error {
			out[r.Node] = r
			return nil
		})
	return out, err
}

// consequencesSQL returns, one row per request, what followed the loss
// of the given nodes in one cluster: the node-lifecycle controller's
// writes of them (status: NotReady/Unknown; the node: taints), pod
// deletes and evictions by the evicting controllers, and the nodes'
// kubelets' lists and watch-lists (the relist when they come back).
const consequencesSQL = `SELECT cluster, audit_id, c_stage AS stage, c_t AS t, 0 AS received, c_verb AS verb, c_resource AS resource,
       c_sub AS sub, c_namespace AS namespace, c_name AS name, c_user AS user, '' AS user_agent, '' AS source_ip,
       c_uri AS request_uri, c_code AS code, '' AS req_rv, '' AS response_rv, '' AS object_rv
FROM (
    SELECT cluster, audit_id, argMin(stage, ts) AS c_stage, min(` + requestTimeSQL + `) AS c_t, any(verb) AS c_verb,
           any(resource) AS c_resource, any(subresource) AS c_sub, any(namespace) AS c_namespace, any(name) AS c_name,
           any(user) AS c_user, any(request_uri) AS c_uri, max(code) AS c_code
    FROM audit_events
    WHERE %WINDOW% AND cluster = {cluster:String}
      AND ((resource = 'nodes' AND verb IN ('patch', 'update') AND user IN {lifecycle:Array(String)} AND name IN {nodes:Array(String)})
        OR (resource = 'pods' AND user IN {evictors:Array(String)}
            AND ((verb = 'delete' AND subresource = '') OR (verb = 'create' AND subresource = 'eviction')))
        OR (user IN {users:Array(String)} AND (verb = 'list' OR (verb = 'watch' AND req_rv_match = 'NotOlderThan'))))
    GROUP BY cluster, audit_id
    HAVING c_code = 0 OR (c_code >= 200 AND c_code < 300)
)
ORDER BY t, audit_id`

type consequenceRow struct {
	eventRow
	Sub string `json:"sub"`
}

func (d *HeartbeatLoss) selectConsequences(ctx context.Context, q Querier, w Window, cluster string, nodes []string) ([]consequenceRow, error) {
	users := make([]string, len(nodes))
	for i, n := range nodes {
		users[i] = "system:node:" + n
	}
	p := store.Params{"cluster": stringParam(cluster), "nodes": arrayParam(nodes), "users": arrayParam(users),
		"lifecycle": arrayParam(d.cfg.LifecycleUsers), "evictors": arrayParam(d.cfg.EvictionUsers)}
	ww := w
	ww.Clusters = nil
	var out []consequenceRow
	err := selectRows(ctx, q, "consequences of heartbeat loss", strings.Replace(consequencesSQL, "%WINDOW%", windowParams(ww, p), 1), p,
		func(r consequenceRow) error {
			out = append(out, r)
			return nil
		})
	return out, err
}

// boundarySQL returns the stored stages of the heartbeats of one cluster
// named by node and request time ("node/microseconds"): the last
// heartbeat before each gap and the first after it.
const boundarySQL = `SELECT ` + eventColumns + `, concat(substring(user, 13), '/', toString(` + requestTimeSQL + `)) AS key
FROM audit_events
WHERE %WINDOW% AND cluster = {cluster:String} AND ` + heartbeatFilter + `
  AND key IN {keys:Array(String)}
ORDER BY ts, stage`

type boundaryRow struct {
	eventRow
	Key string `json:"key"`
}

func selectBoundaries(ctx context.Context, q Querier, w Window, cluster string, keys []string) (map[string][]eventRow, error) {
	out := map[string][]eventRow{}
	if len(keys) == 0 {
		return out, nil
	}
	p := store.Params{"cluster": stringParam(cluster), "keys": arrayParam(keys)}
	ww := w
	ww.Clusters = nil
	err := selectRows(ctx, q, "heartbeats around gaps", strings.Replace(boundarySQL, "%WINDOW%", windowParams(ww, p), 1), p,
		func(r boundaryRow) error {
			out[r.Key] = append(out[r.Key], r.eventRow)
			return nil
		})
	return out, err
}
