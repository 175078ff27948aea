package query

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

func TestHistogramStep(t *testing.T) {
	tests := []struct {
		span time.Duration
		n    int
		want time.Duration
	}{
		{time.Hour, 120, 30 * time.Second},
		{time.Hour, 60, time.Minute},
		{time.Hour, 61, time.Minute},
		{59 * time.Minute, 60, time.Minute},
		{24 * time.Hour, 120, 15 * time.Minute},
		{time.Second, 100, 10 * time.Millisecond},
		{time.Millisecond, 100, 10 * time.Millisecond},
		{365 * 24 * time.Hour, 10, 28 * 2 * 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := HistogramStep(tt.span, tt.n); got != tt.want {
			t.Errorf("HistogramStep(%s, %d) = %s, want %s", tt.span, tt.n, got, tt.want)
		}
		if got := HistogramStep(tt.span, tt.n); tt.span > got*time.Duration(tt.n) {
			t.Errorf("HistogramStep(%s, %d) = %s gives more than %d buckets", tt.span, tt.n, got, tt.n)
		}
	}
}

// aggRows are the events of the aggregation tests, in a cluster of their
// own (the engine is shared by the package's tests).
func aggRows(t0 time.Time) []store.Row {
	const c = "agg"
	ev := func(id, stage, verb, user, resource, ns, name string, at time.Duration, code int32) store.Row {
		return store.Row{Cluster: c, AuditID: id, Stage: stage, Level: "Metadata", Verb: verb, Time: t0.Add(at),
			User: user, UserAgent: user + "/v1", SourceIP: "10.0.0.1", Resource: resource, Namespace: ns, Name: name, Code: code,
			Raw: []byte(fmt.Sprintf(`{"auditID":%q,"stage":%q}`, id, stage))}
	}
	rows := []store.Row{
		// Minute 0: 3 gets by alice, one list by bob.
		ev("g1", "ResponseComplete", "get", "alice", "pods", "web", "a", 1*time.Second, 200),
		ev("g2", "ResponseComplete", "get", "alice", "pods", "web", "a", 2*time.Second, 404),
		ev("g3", "ResponseComplete", "get", "alice", "pods", "web", "b", 3*time.Second, 200),
		ev("l1", "ResponseComplete", "list", "bob", "pods", "web", "", 4*time.Second, 200),
		// Minute 2: the history of endpoints web/front, watched meanwhile.
		ev("d1", "ResponseComplete", "delete", "system:kube-controller-manager", "endpoints", "web", "front", 2*time.Minute, 200),
		ev("c1", "RequestReceived", "create", "system:kube-controller-manager", "endpoints", "web", "front", 2*time.Minute+time.Second, 0),
		ev("c1", "ResponseComplete", "create", "system:kube-controller-manager", "endpoints", "web", "front", 2*time.Minute+2*time.Second, 201),
		ev("x1", "ResponseComplete", "patch", "carol", "deployments", "web", "x", 2*time.Minute+3*time.Second, 200),
		ev("y1", "ResponseComplete", "create", "dave", "configmaps", "web", "y", 2*time.Minute+4*time.Second, 201),
	}
	rows[6].ResponseRV = "1300"
	rows[4].ObjectRV = "1250"
	// Watches of endpoints: one open over the history (cluster-wide), one
	// in another namespace (not shown), one that ended before (not shown),
	// one still open (no end).
	watch := func(id, ns, rv string, start, end time.Duration) []store.Row {
		w := ev(id, "ResponseStarted", "watch", "system:kube-proxy", "endpoints", ns, "", start, 200)
		w.Watch, w.RequestedRV = true, rv
		out := []store.Row{w}
		if end > 0 {
			e := w
			e.Stage, e.Time = "ResponseComplete", t0.Add(end)
			out = append(out, e)
		}
		return out
	}
	rows = append(rows, watch("w1", "", "1200", time.Minute, 5*time.Minute)...)
	rows = append(rows, watch("w2", "other", "1200", time.Minute, 5*time.Minute)...)
	rows = append(rows, watch("w3", "web", "1100", 10*time.Second, 90*time.Second)...)
	rows = append(rows, watch("w4", "web", "1290", 2*time.Minute+time.Second/2, 0)...)
	return rows
}

func TestAggregatesOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	rows := aggRows(t0)
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	cluster := []string{"agg"}

	t.Run("histogram by verb", func(t *testing.T) {
		h, err := HistogramEvents(ctx, st, Filter{Cluster: cluster, Since: t0, Until: t0.Add(3 * time.Minute)}, HistogramOptions{Buckets: 3})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(h)
		want := `{"since":"2024-06-01T10:00:00Z","until":"2024-06-01T10:03:00Z","step_ms":60000,"by":"verb",` +
			`"series":[{"key":"watch","total":5},{"key":"create","total":3},{"key":"get","total":3},{"key":"delete","total":1},{"key":"list","total":1},{"key":"patch","total":1}],` +
			`"buckets":[{"t":"2024-06-01T10:00:00Z","counts":[1,0,3,0,1,0]},{"t":"2024-06-01T10:01:00Z","counts":[3,0,0,0,0,0]},{"t":"2024-06-01T10:02:00Z","counts":[1,3,0,1,0,1]}],"total":14,"source":"rollup"}`
		if string(got) != want {
			t.Errorf("histogram\n got %s\nwant %s", got, want)
		}
	})
	t.Run("histogram top and other", func(t *testing.T) {
		h, err := HistogramEvents(ctx, st, Filter{Cluster: cluster, Since: t0, Until: t0.Add(3 * time.Minute)}, HistogramOptions{By: "user", Buckets: 1, Top: 2})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(h.Series)
		// alice ties the controller manager at 3 and wins by name.
		want := `[{"key":"system:kube-proxy","total":5},{"key":"alice","total":3},{"key":"(other)","total":6}]`
		if string(got) != want {
			t.Errorf("series\n got %s\nwant %s", got, want)
		}
		// One bucket of 5 minutes from 10:00.
		if h.StepMS != 5*60*1000 || len(h.Buckets) != 1 || h.Buckets[0].Counts[2] != 6 {
			t.Errorf("buckets %+v step %d", h.Buckets, h.StepMS)
		}
	})
	t.Run("histogram by code with a filter", func(t *testing.T) {
		h, err := HistogramEvents(ctx, st, Filter{Cluster: cluster, Verb: []string{"get"}, Since: t0, Until: t0.Add(time.Minute)},
			HistogramOptions{By: "code", Buckets: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(h.Series)
		if want := `[{"key":"200","total":2},{"key":"404","total":1}]`; string(got) != want {
			t.Errorf("series %s, want %s", got, want)
		}
	})
	t.Run("histogram errors", func(t *testing.T) {
		for _, tc := range []struct {
			f   Filter
			opt HistogramOptions
		}{
			{Filter{Since: t0}, HistogramOptions{}},
			{Filter{Since: t0, Until: t0.Add(time.Hour)}, HistogramOptions{By: "raw"}},
			{Filter{Since: t0, Until: t0.Add(time.Hour)}, HistogramOptions{Buckets: 5000}},
			{Filter{Since: t0, Until: t0.Add(time.Hour)}, HistogramOptions{Top: -1}},
		} {
			if _, err := HistogramEvents(ctx, st, tc.f, tc.opt); err == nil {
				t.Errorf("%+v %+v: no error", tc.f, tc.opt)
			}
		}
	})
	t.Run("values", func(t *testing.T) {
		vs, err := Values(ctx, st, Filter{Cluster: cluster, Resource: []string{"pods"}, Limit: 2}, "user")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(vs)
		if want := `[{"value":"alice","count":3},{"value":"bob","count":1}]`; string(got) != want {
			t.Errorf("values %s, want %s", got, want)
		}
		if _, err := Values(ctx, st, Filter{}, "raw"); err == nil {
			t.Error("values of raw: no error")
		}
	})
	t.Run("object history", func(t *testing.T) {
		h, err := ObjectHistory(ctx, st, ObjectRef{Cluster: "agg", Resource: "endpoints", Namespace: "web", Name: "front"}, time.Time{}, time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Events) != 2 || h.Truncated {
			t.Fatalf("events %+v truncated %v", h.Events, h.Truncated)
		}
		d, c := h.Events[0], h.Events[1]
		if d.AuditID != "d1" || d.Verb != "delete" || d.ResourceVersion != "1250" || d.Code != 200 {
			t.Errorf("delete %+v", d)
		}
		// The create: its first time, its last stage, the response's RV.
		if c.AuditID != "c1" || !c.Time.Equal(t0.Add(2*time.Minute+time.Second)) || c.Stage != "ResponseComplete" || c.Code != 201 || c.ResourceVersion != "1300" {
			t.Errorf("create %+v", c)
		}
		var ids []string
		for _, w := range h.Watches {
			ids = append(ids, w.AuditID)
		}
		if fmt.Sprint(ids) != "[w1 w4]" {
			t.Fatalf("watches %v, want [w1 w4]", ids)
		}
		w1, w4 := h.Watches[0], h.Watches[1]
		if w1.ResourceVersion != "1200" || w1.End == nil || !w1.End.Equal(t0.Add(5*time.Minute)) || w1.User != "system:kube-proxy" {
			t.Errorf("w1 %+v", w1)
		}
		if w4.End != nil || w4.ResourceVersion != "1290" {
			t.Errorf("w4 %+v", w4)
		}

		h, err = ObjectHistory(ctx, st, ObjectRef{Resource: "endpoints", Namespace: "web", Name: "front"}, time.Time{}, time.Time{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Events) != 1 || h.Events[0].AuditID != "c1" || !h.Truncated {
			t.Errorf("limit 1: %+v truncated %v; want the latest request", h.Events, h.Truncated)
		}
		if _, err := ObjectHistory(ctx, st, ObjectRef{Resource: "pods"}, time.Time{}, time.Time{}, 0); err == nil {
			t.Error("no name: no error")
		}
	})
}
