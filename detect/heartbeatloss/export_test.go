package heartbeatloss

import (
	"context"

	"github.com/auditlens/auditlens/detect"
)

// HeartbeatNode is one node's heartbeats as the heartbeat-loss detector
// counts them.
type HeartbeatNode = hbNode

// CountedHeartbeats returns, per cluster and node, the heartbeats the
// heartbeat-loss detector counts in w (their number, first and last
// time): for tests that hold other readers of heartbeats to the same
// definition.
func CountedHeartbeats(ctx context.Context, q detect.Querier, w detect.Window) ([]HeartbeatNode, error) {
	return New(Config{}).selectNodes(ctx, q, w)
}

// HeartbeatAuditIDs returns the audit IDs of the stored stages of the
// heartbeats of one cluster named by "node/microseconds", as the
// detector's evidence (last-heartbeat, heartbeat-resumed) reads them.
func HeartbeatAuditIDs(ctx context.Context, q detect.Querier, cluster string, keys []string) (map[string][]string, error) {
	rows, err := selectBoundaries(ctx, q, cluster, keys)
	out := map[string][]string{}
	for k, rs := range rows {
		for _, r := range rs {
			out[k] = append(out[k], r.AuditID)
		}
	}
	return out, err
}
