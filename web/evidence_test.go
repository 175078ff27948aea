package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// What a finding page draws for the cluster-wide incidents, over the real
// engine: the heartbeats of the nodes a heartbeat-loss finding names, and
// the resourceVersion line of a cluster whose etcd was restored.
func TestEvidenceAPI(t *testing.T) {
	st := storetest.Open(t)
	t0 := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
	var rows []store.Row
	seq := 0
	add := func(r store.Row, stages ...string) {
		seq++
		r.AuditID = fmt.Sprintf("%s-%d", r.Cluster, seq)
		r.Level, r.Raw = "Metadata", []byte(`{}`)
		if len(stages) == 0 {
			stages = []string{"ResponseComplete"}
		}
		for i, stage := range stages {
			// Every stage carries the request's requestReceivedTimestamp.
			e := r
			e.Stage, e.Time, e.ReceivedAt = stage, r.Time.Add(time.Duration(i)*3*time.Millisecond), r.Time
			if stage == "RequestReceived" {
				e.Code = 0
			}
			rows = append(rows, e)
		}
	}
	lease := func(cluster, node, user string, at time.Duration, code int32, stages ...string) {
		add(store.Row{Cluster: cluster, Time: t0.Add(at), Verb: "update", User: user, Resource: "leases", APIGroup: "coordination.k8s.io",
			Namespace: "kube-node-lease", Name: node, Code: code}, stages...)
	}
	status := func(cluster, node, user string, at time.Duration) {
		add(store.Row{Cluster: cluster, Time: t0.Add(at), Verb: "patch", User: user, Resource: "nodes", Subresource: "status", Name: node, Code: 200})
	}
	const hostile = `n9' OR '1'='1`
	// Four kubelets renew their Leases every 10 s for 5 minutes (with two
	// stages recorded: one heartbeat each); node-1 and node-2 stop from
	// 60 s to 180 s. node-1 posts its status every minute.
	for _, n := range []string{"node-1", "node-2", "node-3", "node-4", hostile} {
		for s := 0; s < 300; s += 10 {
			lost := (n == "node-1" || n == "node-2") && s > 55 && s < 180
			if lost || (n == hostile && s > 0) {
				continue
			}
			code := int32(200)
			if n == "node-2" && s == 180 {
				code = 409 // the first renewal after the gap, from a stale resourceVersion
			}
			lease("hb", n, "system:node:"+n, time.Duration(s)*time.Second, code, "RequestReceived", "ResponseComplete")
		}
	}
	for s := 0; s < 300; s += 60 {
		if s < 60 || s >= 180 {
			status("hb", "node-1", "system:node:node-1", time.Duration(s)*time.Second+time.Second)
		}
	}
	// No heartbeats: the node-lifecycle controller marking node-1
	// NotReady, someone else writing its Lease, node-1 of another cluster.
	status("hb", "node-1", "system:serviceaccount:kube-system:node-controller", 100*time.Second)
	lease("hb", "node-1", "system:serviceaccount:kube-system:node-controller", 110*time.Second, 200)
	lease("other", "node-1", "system:node:node-1", 120*time.Second, 200)

	// The resourceVersion line of cluster rb: writes every 5 s from 1000
	// up by 10; etcd restored at 60 s, the writes go on from 500.
	for s := 0; s < 120; s += 5 {
		rv := 1000 + s*2
		if s >= 60 {
			rv = 500 + (s-60)*2
		}
		r := store.Row{Cluster: "rb", Time: t0.Add(time.Duration(s) * time.Second), Verb: "update", User: "system:node:node-1",
			Resource: "leases", Namespace: "kube-node-lease", Name: "node-1", Code: 200, ObjectRV: fmt.Sprint(rv)}
		if s%10 == 0 {
			r.ResponseRV = fmt.Sprint(rv + 1)
		}
		add(r)
	}
	// Around the restore: a watch from the future (200, open), an update
	// from the version the client held (409), a list from RV 0 and an
	// aggregated API's own resourceVersion; none is the head.
	add(store.Row{Cluster: "rb", Time: t0.Add(70 * time.Second), Verb: "watch", User: "system:kube-proxy", Resource: "services", Watch: true,
		RequestedRV: "1300"}, "RequestReceived", "ResponseStarted")
	add(store.Row{Cluster: "rb", Time: t0.Add(65 * time.Second), Verb: "update", User: "system:node:node-2", Resource: "leases",
		Namespace: "kube-node-lease", Name: "node-2", Code: 409, ObjectRV: "1290"})
	add(store.Row{Cluster: "rb", Time: t0.Add(75 * time.Second), Verb: "list", User: "system:kube-proxy", Resource: "services", Code: 200, RequestedRV: "0"})
	add(store.Row{Cluster: "rb", Time: t0.Add(80 * time.Second), Verb: "get", User: "alice", Resource: "pods", APIGroup: "metrics.k8s.io", Code: 200, ResponseRV: "metrics-9"})
	add(store.Row{Cluster: "rb", Time: t0.Add(85 * time.Second), Verb: "list", User: "system:kube-scheduler", Resource: "pods", Code: 200, RequestedRV: "520"})
	if err := st.Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	h := NewRouter(Config{Store: st, Now: func() time.Time { return t0.Add(time.Hour) }})
	get := func(path string, v any) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code == 200 {
			if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return rec.Code, rec.Body.String()
	}
	window := url.Values{"since": {t0.Add(-time.Minute).Format(time.RFC3339)}, "until": {t0.Add(6 * time.Minute).Format(time.RFC3339)}}

	t.Run("heartbeats", func(t *testing.T) {
		q := url.Values{"cluster": {"hb"}, "node": {"node-1,node-2", hostile}, "others": {"1"}}
		for k, v := range window {
			q[k] = v
		}
		var hb heartbeatloss.Heartbeats
		if code, body := get("/api/v1/heartbeats?"+q.Encode(), &hb); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		got := map[string]heartbeatloss.NodeBeats{}
		var order []string
		for _, n := range hb.Nodes {
			got[n.Node] = n
			order = append(order, n.Node)
		}
		// The nodes asked for in their order, then node-3: the first of the
		// others by name.
		if strings.Join(order, ",") != "node-1,node-2,"+hostile+",node-3" || !got["node-3"].Other || got["node-1"].Other {
			t.Fatalf("nodes %q (others: %v)", order, got["node-3"].Other)
		}
		// node-1: 6 Lease renewals before the gap, 12 after; 1 + 2 status
		// posts; one heartbeat per request, none by the controller.
		n1 := got["node-1"].Beats
		kinds := map[string]int{}
		var gap time.Duration
		for i, b := range n1 {
			kinds[b.Kind]++
			if i > 0 && b.Time.Sub(n1[i-1].Time) > gap {
				gap = b.Time.Sub(n1[i-1].Time)
			}
			if i > 0 && b.Time.Before(n1[i-1].Time) {
				t.Errorf("node-1 heartbeats out of order at %d", i)
			}
		}
		if kinds["lease"] != 18 || kinds["status"] != 3 || gap != 130*time.Second {
			t.Errorf("node-1: %v heartbeats, longest gap %s; want 18 lease, 3 status, a gap of 2m10s", kinds, gap)
		}
		var conflicts int
		for _, b := range got["node-2"].Beats {
			if b.Code == 409 {
				conflicts++
			}
		}
		if len(got["node-2"].Beats) != 18 || conflicts != 1 || len(got["node-3"].Beats) != 30 || len(got[hostile].Beats) != 1 {
			t.Errorf("heartbeats: node-2 %d (%d conflicts), node-3 %d, %q %d", len(got["node-2"].Beats), conflicts,
				len(got["node-3"].Beats), hostile, len(got[hostile].Beats))
		}

		// Bounded per node.
		q.Set("per_node", "5")
		if code, body := get("/api/v1/heartbeats?"+q.Encode(), &hb); code != 200 || len(hb.Nodes[0].Beats) != 5 || !hb.Nodes[0].Truncated {
			t.Errorf("per_node 5: %d %.200s", code, body)
		}
	})

	t.Run("resourceversions", func(t *testing.T) {
		q := url.Values{"cluster": {"rb"}, "buckets": {"12"}, "since": {t0.Format(time.RFC3339)}, "until": {t0.Add(2 * time.Minute).Format(time.RFC3339)}}
		var l rollback.RVLine
		if code, body := get("/api/v1/resourceversions?"+q.Encode(), &l); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if l.StepMS != 10_000 || len(l.Buckets) != 12 {
			t.Fatalf("step %d ms, %d buckets: %+v", l.StepMS, len(l.Buckets), l.Buckets)
		}
		head := map[int]uint64{}
		asked := map[int]uint64{}
		for _, b := range l.Buckets {
			i := int(b.T.Sub(t0) / (10 * time.Second))
			head[i], asked[i] = b.Head, b.Asked
		}
		// Each 10 s: the writes at :x0 (the version it held, and its
		// response one above) and at :x5 (10 above); the drop at 60 s; the future watch (1300) and
		// the conflict (1290) leave the head alone; the list from 520 is
		// below it.
		want := map[int]uint64{0: 1010, 1: 1030, 5: 1110, 6: 510, 7: 530, 8: 550, 11: 610}
		for i, w := range want {
			if head[i] != w {
				t.Errorf("bucket %d: head %d, want %d", i, head[i], w)
			}
		}
		if asked[7] != 1300 || asked[6] != 0 {
			t.Errorf("asked: %v; want 1300 in bucket 7 only", asked)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		var v any
		for _, path := range []string{
			"/api/v1/heartbeats?node=node-1",                   // no cluster
			"/api/v1/heartbeats?cluster=hb&others=99",          // too many others
			"/api/v1/heartbeats?cluster=hb&per_node=x",         // not a number
			"/api/v1/heartbeats?cluster=hb&since=720h",         // too long a range
			"/api/v1/resourceversions",                         // no cluster
			"/api/v1/resourceversions?cluster=rb&buckets=5000", // too many buckets
			"/api/v1/resourceversions?cluster=rb&since=2026-05-06T08:00:00Z&until=2026-05-06T07:00:00Z",
		} {
			if code, body := get(path, &v); code != http.StatusBadRequest || !strings.Contains(body, "error") {
				t.Errorf("%s: %d %s, want 400", path, code, body)
			}
		}
	})
}
