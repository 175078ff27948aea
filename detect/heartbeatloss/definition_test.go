package heartbeatloss_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/store"
)

// TestHeartbeatDefinition holds the heartbeat-loss detector and the
// heartbeats the finding page draws (heartbeatloss.NodeHeartbeats) to one meaning of
// "heartbeat" (internal/heartbeat), on the real engine: one request of each
// kind, each in its own cluster, is counted by the detector exactly when the
// query draws it, at the same time, and the detector's evidence finds its
// stages. Each kind also says whether it is a heartbeat, so that the
// definition itself is pinned.
func TestHeartbeatDefinition(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := t.Context()
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	const kubelet = "system:node:node-1"
	lease := func(verb, user string, code int32) store.Row {
		return store.Row{Verb: verb, User: user, Resource: "leases", APIGroup: "coordination.k8s.io", Namespace: "kube-node-lease",
			Name: "node-1", Code: code}
	}
	status := func(verb, user string, code int32) store.Row {
		return store.Row{Verb: verb, User: user, Resource: "nodes", Subresource: "status", Name: "node-1", Code: code}
	}
	with := func(r store.Row, f func(*store.Row)) store.Row { f(&r); return r }
	both := []string{"RequestReceived", "ResponseComplete"}
	for _, v := range []struct {
		name   string
		row    store.Row
		stages []string // default: RequestReceived and ResponseComplete
		// noReceived: a log without requestReceivedTimestamp (v1alpha1,
		// 1.8's v1beta1): every stage's received_at is its own time.
		noReceived bool
		beat       bool // a heartbeat of node-1
	}{
		{name: "lease-update", row: lease("update", kubelet, 200), beat: true},
		{name: "lease-patch", row: lease("patch", kubelet, 200), beat: true},
		{name: "lease-create", row: lease("create", kubelet, 201), beat: true},
		{name: "status-patch", row: status("patch", kubelet, 200), beat: true},
		{name: "status-update", row: status("update", kubelet, 200), beat: true},
		{name: "lease-update-409", row: lease("update", kubelet, 409), beat: true},
		{name: "lease-update-received-only", row: lease("update", kubelet, 0), stages: []string{"RequestReceived"}, beat: true},
		{name: "lease-update-complete-only", row: lease("update", kubelet, 200), stages: []string{"ResponseComplete"}, beat: true},
		{name: "lease-update-no-received", row: lease("update", kubelet, 200), stages: []string{"ResponseComplete"}, noReceived: true, beat: true},
		{name: "lease-update-500", row: lease("update", kubelet, 500)},
		{name: "lease-update-504", row: lease("update", kubelet, 504), stages: []string{"ResponseComplete"}},
		{name: "status-patch-500", row: status("patch", kubelet, 500)},
		{name: "lease-update-403", row: lease("update", kubelet, 403)},
		{name: "lease-update-429", row: lease("update", kubelet, 429)},
		{name: "lease-get", row: lease("get", kubelet, 200)},
		{name: "lease-get-404", row: lease("get", kubelet, 404)},
		{name: "lease-watch", row: with(lease("watch", kubelet, 200), func(r *store.Row) { r.Name, r.Watch = "", true }),
			stages: []string{"RequestReceived", "ResponseStarted"}},
		{name: "lease-list", row: with(lease("list", kubelet, 200), func(r *store.Row) { r.Name = "" })},
		{name: "lease-delete", row: lease("delete", kubelet, 200)},
		{name: "lease-by-node-controller", row: lease("update", "system:serviceaccount:kube-system:node-controller", 200)},
		{name: "status-by-node-controller", row: status("patch", "system:serviceaccount:kube-system:node-controller", 200)},
		{name: "status-by-attach-detach", row: status("patch", "system:serviceaccount:kube-system:attach-detach-controller", 200)},
		{name: "lease-by-admin", row: lease("update", "admin", 200)},
		{name: "lease-of-another-node", row: lease("update", "system:node:node-2", 200)},
		{name: "status-of-another-node", row: status("patch", "system:node:node-2", 200)},
		{name: "lease-other-namespace", row: with(lease("update", kubelet, 200), func(r *store.Row) { r.Namespace = "kube-system" })},
		{name: "node-patch", row: with(status("patch", kubelet, 200), func(r *store.Row) { r.Subresource = "" })},
		{name: "node-create", row: with(status("create", kubelet, 201), func(r *store.Row) { r.Subresource = "" })},
		{name: "pods-list", row: store.Row{Verb: "list", User: kubelet, Resource: "pods", Code: 200}},
	} {
		t.Run(v.name, func(t *testing.T) {
			cluster := "hb-definition-" + v.name
			at := t0.Add(1234567 * time.Microsecond)
			stages := v.stages
			if stages == nil {
				stages = both
			}
			var rows []store.Row
			// The stages come when a kubelet's request is received, its
			// response started and completed.
			after := map[string]time.Duration{"RequestReceived": 0, "ResponseStarted": 20 * time.Millisecond, "ResponseComplete": 40 * time.Millisecond}
			for _, stage := range stages {
				r := v.row
				r.Cluster, r.AuditID, r.Stage, r.Level, r.Raw = cluster, "req-"+v.name, stage, "Metadata", []byte(`{}`)
				r.Time, r.ReceivedAt = at.Add(after[stage]), at
				if v.noReceived {
					r.ReceivedAt = r.Time
				}
				if stage != "ResponseComplete" {
					r.Code = 0
				}
				rows = append(rows, r)
			}
			if err := st.Insert(ctx, rows); err != nil {
				t.Fatal(err)
			}
			w := detect.Window{Since: t0, Until: t0.Add(time.Minute), Clusters: []string{cluster}}
			counted, err := heartbeatloss.CountedHeartbeats(ctx, st, w)
			if err != nil {
				t.Fatal(err)
			}
			var det []string
			for _, n := range counted {
				det = append(det, fmt.Sprintf("%s: %d from %d to %d", n.Node, n.N, n.FirstT, n.LastT))
				ids, err := heartbeatloss.HeartbeatAuditIDs(ctx, st, cluster, []string{fmt.Sprintf("%s/%d", n.Node, n.FirstT)})
				if err != nil {
					t.Fatal(err)
				}
				if got := ids[fmt.Sprintf("%s/%d", n.Node, n.FirstT)]; len(got) == 0 || slices.ContainsFunc(got, func(id string) bool { return id != "req-"+v.name }) {
					t.Errorf("the detector's evidence of %s's heartbeat at %d reads stages %q", n.Node, n.FirstT, got)
				}
			}
			hb, err := heartbeatloss.NodeHeartbeats(ctx, st, heartbeatloss.HeartbeatOptions{Cluster: cluster, Since: w.Since, Until: w.Until,
				Others: heartbeatloss.MaxHeartbeatOthers})
			if err != nil {
				t.Fatal(err)
			}
			var drawn []string
			for _, n := range hb.Nodes {
				if len(n.Beats) == 0 {
					drawn = append(drawn, n.Node+": listed without heartbeats")
					continue
				}
				drawn = append(drawn, fmt.Sprintf("%s: %d from %d to %d", n.Node, len(n.Beats), n.Beats[0].Time.UnixMicro(), n.Beats[len(n.Beats)-1].Time.UnixMicro()))
			}
			// A heartbeat is at its request's time: when it was received,
			// else its only stage's.
			var want []string
			if made := rows[0].ReceivedAt.UnixMicro(); v.beat {
				want = []string{fmt.Sprintf("node-1: 1 from %d to %d", made, made)}
			}
			if !slices.Equal(det, drawn) {
				t.Errorf("the detector counts [%s], the query draws [%s]", strings.Join(det, "; "), strings.Join(drawn, "; "))
			}
			if !slices.Equal(det, want) {
				t.Errorf("the detector counts [%s], want [%s]", strings.Join(det, "; "), strings.Join(want, "; "))
			}
			if !slices.Equal(drawn, want) {
				t.Errorf("the query draws [%s], want [%s]", strings.Join(drawn, "; "), strings.Join(want, "; "))
			}
		})
	}
}
