package heartbeatloss

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/query"

	"github.com/auditlens/auditlens/internal/heartbeat"
	"github.com/auditlens/auditlens/store"
)

// Heartbeats are the kubelets' heartbeats in a time range: the JSON of
// GET /api/v1/heartbeats, which the finding page draws one lane per node
// for a heartbeat-loss finding. They are the requests the heartbeat-loss
// detector counts (internal/heartbeat says which), at the times it counts
// them.
type Heartbeats struct {
	Cluster string    `json:"cluster"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	// Nodes are the nodes asked for, in their order, then the others
	// (HeartbeatOptions.Others) by name.
	Nodes []NodeBeats `json:"nodes"`
}

// NodeBeats is one node's heartbeats, oldest first.
type NodeBeats struct {
	Node string `json:"node"`
	// Other says the node was not asked for: one of the nodes that kept
	// heartbeating, for contrast.
	Other bool   `json:"other,omitempty"`
	Beats []Beat `json:"beats"`
	// Truncated says there were more than HeartbeatOptions.PerNode
	// heartbeats: Beats are the earliest.
	Truncated bool `json:"truncated,omitempty"`
}

// Beat is one heartbeat request of a kubelet.
type Beat struct {
	// Time is when the request was made (its requestReceivedTimestamp).
	Time    time.Time `json:"time"`
	AuditID string    `json:"audit_id"`
	// Kind is "lease" (its Lease in kube-node-lease created or renewed)
	// or "status" (its Node's status posted).
	Kind string `json:"kind"`
	Verb string `json:"verb"`
	// Code is the response code: 2xx, or 409 (a renewal from a stale
	// resourceVersion), or 0 when no response stage was recorded.
	Code int32 `json:"code"`
}

// HeartbeatOptions select the heartbeats.
type HeartbeatOptions struct {
	Cluster      string
	Since, Until time.Time
	// Nodes are the nodes whose heartbeats to return (at most MaxHeartbeatNodes).
	Nodes []string
	// Others asks for up to this many more nodes that heartbeat in the
	// range (by name; at most MaxHeartbeatOthers).
	Others int
	// PerNode bounds the heartbeats returned per node (0:
	// DefaultBeatsPerNode, at most MaxBeatsPerNode).
	PerNode int
}

// Bounds of NodeHeartbeats, so that the finding page stays cheap on a
// cluster of thousands of nodes: a kubelet renews its Lease every 10 s,
// 360 times an hour, and may post its status as often.
const (
	MaxHeartbeatNodes   = 200
	MaxHeartbeatOthers  = 20
	DefaultBeatsPerNode = 2000
	MaxBeatsPerNode     = 20_000
	// MaxHeartbeatSpan is the longest range NodeHeartbeats reads.
	MaxHeartbeatSpan = 7 * 24 * time.Hour
)

// heartbeatWhere selects the stages of the kubelets' heartbeat requests
// (heartbeat.FilterSQL) of one cluster and time range. The leading
// conditions follow the table's sort key.
const heartbeatWhere = `
WHERE cluster = {cluster:String}
  AND ts >= {since:DateTime64(6, 'UTC')} AND ts < {until:DateTime64(6, 'UTC')}
  AND ` + heartbeat.FilterSQL

// NodeHeartbeats returns the heartbeats of opt.Nodes, and of up to
// opt.Others more nodes, in [opt.Since, opt.Until) of one cluster: one
// per request (its request time, its response code), failed requests
// left out as the detector leaves them out.
func NodeHeartbeats(ctx context.Context, st store.Scanner, opt HeartbeatOptions) (Heartbeats, error) {
	hb := Heartbeats{Cluster: opt.Cluster, Since: opt.Since.UTC(), Until: opt.Until.UTC(), Nodes: []NodeBeats{}}
	switch {
	case opt.Cluster == "":
		return hb, fmt.Errorf("%w: heartbeats are per cluster: name one", query.ErrBadFilter)
	case opt.Since.IsZero() || opt.Until.IsZero() || !opt.Since.Before(opt.Until):
		return hb, fmt.Errorf("%w: heartbeats need since before until", query.ErrBadFilter)
	case opt.Until.Sub(opt.Since) > MaxHeartbeatSpan:
		return hb, fmt.Errorf("%w: heartbeats of %s asked for, at most %s", query.ErrBadFilter, opt.Until.Sub(opt.Since), MaxHeartbeatSpan)
	case len(opt.Nodes) > MaxHeartbeatNodes:
		return hb, fmt.Errorf("%w: %d nodes asked for, at most %d", query.ErrBadFilter, len(opt.Nodes), MaxHeartbeatNodes)
	case opt.Others < 0 || opt.Others > MaxHeartbeatOthers:
		return hb, fmt.Errorf("%w: others %d is not from 0 to %d", query.ErrBadFilter, opt.Others, MaxHeartbeatOthers)
	case opt.PerNode == 0:
		opt.PerNode = DefaultBeatsPerNode
	case opt.PerNode < 1 || opt.PerNode > MaxBeatsPerNode:
		return hb, fmt.Errorf("%w: per_node %d is not from 1 to %d", query.ErrBadFilter, opt.PerNode, MaxBeatsPerNode)
	}
	nodes := []string{}
	for _, n := range opt.Nodes {
		if n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	p := store.Params{
		"cluster": store.StringParam(opt.Cluster),
		"since":   store.TimeParam(opt.Since),
		"until":   store.TimeParam(opt.Until),
		"nodes":   store.StringArrayParam(nodes),
	}
	var others []string
	if opt.Others > 0 {
		p["others"] = strconv.Itoa(opt.Others)
		sql := `SELECT n FROM (
    SELECT ` + heartbeat.NodeSQL + ` AS n, ` + heartbeat.TimeSQL + ` AS t, max(code) AS cd
    FROM audit_events` + heartbeatWhere + `
      AND name NOT IN {nodes:Array(String)}
    GROUP BY n, t
    HAVING ` + heartbeat.CountsSQL("cd") + `
)
GROUP BY n
ORDER BY n
LIMIT {others:UInt32}`
		err := store.Each(ctx, st, sql, p, func(r struct{ N string }) error {
			others = append(others, r.N)
			return nil
		})
		if err != nil {
			return hb, fmt.Errorf("listing the nodes that heartbeat: %w", err)
		}
	}
	all := append(slices.Clone(nodes), others...)
	if len(all) == 0 {
		return hb, nil
	}
	at := map[string]int{}
	for i, n := range all {
		at[n] = i
		hb.Nodes = append(hb.Nodes, NodeBeats{Node: n, Other: i >= len(nodes), Beats: []Beat{}})
	}
	bp := store.Params{"cluster": p["cluster"], "since": p["since"], "until": p["until"],
		"nodes": store.StringArrayParam(all), "per": strconv.Itoa(opt.PerNode + 1)}
	// One row per request: a policy may record two or three stages of it,
	// which share its request time.
	sql := `SELECT ` + heartbeat.NodeSQL + ` AS n, ` + heartbeat.TimeSQL + ` AS t, min(audit_id) AS id, any(resource) AS res, any(verb) AS vb, max(code) AS cd
FROM audit_events` + heartbeatWhere + `
  AND name IN {nodes:Array(String)}
GROUP BY n, t
HAVING ` + heartbeat.CountsSQL("cd") + `
ORDER BY n, t, id
LIMIT {per:UInt32} BY n`
	err := store.Each(ctx, st, sql, bp, func(r struct {
		N, ID, Res, Vb string
		T              int64
		Cd             int32
	}) error {
		i, ok := at[r.N]
		if !ok {
			return nil
		}
		nb := &hb.Nodes[i]
		if len(nb.Beats) == opt.PerNode {
			nb.Truncated = true
			return nil
		}
		kind := "lease"
		if r.Res == "nodes" {
			kind = "status"
		}
		nb.Beats = append(nb.Beats, Beat{Time: time.UnixMicro(r.T).UTC(), AuditID: r.ID, Kind: kind, Verb: r.Vb, Code: r.Cd})
		return nil
	})
	if err != nil {
		return hb, fmt.Errorf("reading heartbeats: %w", err)
	}
	return hb, nil
}
