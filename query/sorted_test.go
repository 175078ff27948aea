package query

import (
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
)

// TestSortedWindowOrder: a window read in no order comes out as the
// engine's ORDER BY ts, audit_id, stage, cluster would give it (ties on
// time broken by each key in turn, bytewise), and reversed for Desc.
func TestSortedWindowOrder(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	row := func(us int, id, stage, cluster string) store.Row {
		return store.Row{Cluster: cluster, AuditID: id, Stage: stage, Time: t0.Add(time.Duration(us) * time.Microsecond),
			Raw: []byte(`{"id":"` + id + `","stage":"` + stage + `","cluster":"` + cluster + `"}`)}
	}
	sorted := []store.Row{
		row(0, "b", "ResponseComplete", "x"),
		row(1, "a", "ResponseComplete", "x"),
		row(1, "b", "RequestReceived", "y"),
		row(1, "b", "ResponseComplete", "x"),
		row(1, "b", "ResponseComplete", "y"),
		row(1, "b", "ResponseStarted", "x"),
		row(1, "b\x00", "RequestReceived", "x"),
		row(2, "B", "RequestReceived", "x"),
	}
	for _, o := range []Order{Asc, Desc} {
		in := slices.Clone(sorted)
		// A fixed shuffle: every pair out of place.
		slices.Reverse(in)
		in[0], in[3] = in[3], in[0]
		in[5], in[1] = in[1], in[5]
		var w sortedWindow
		for i := range in {
			if err := w.add(&in[i]); err != nil {
				t.Fatal(err)
			}
		}
		w.sort(o)
		want := slices.Clone(sorted)
		if o == Desc {
			slices.Reverse(want)
		}
		for i, e := range w.events {
			if got, exp := string(w.buf[e.off:e.end]), string(want[i].Raw); got != exp {
				t.Errorf("%v: event %d is %s, want %s", o, i, got, exp)
			}
		}
	}
}
