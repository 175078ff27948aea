package query

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/chunks"
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
		for i := range w.events {
			if got, exp := string(w.event(&w.events[i])), string(want[i].Raw); got != exp {
				t.Errorf("%v: event %d is %s, want %s", o, i, got, exp)
			}
		}
	}
}

// TestSortedWindowChunks: a window of more events than one chunk holds,
// one of them longer than a chunk, gives back each event whole; filled
// again after reset, it reuses its chunks rather than taking new ones.
func TestSortedWindowChunks(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var rows []store.Row
	for i := range 5000 {
		raw := fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%977))
		if i == 1234 {
			raw = fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("y", chunks.Size+10))
		}
		rows = append(rows, store.Row{Cluster: "c", AuditID: fmt.Sprintf("id-%05d", i), Stage: "ResponseComplete",
			Time: t0.Add(time.Duration(i) * time.Millisecond), Raw: raw})
	}
	var w sortedWindow
	nchunks := 0
	for round := range 2 {
		w.reset()
		for i := len(rows) - 1; i >= 0; i-- {
			if err := w.add(&rows[i]); err != nil {
				t.Fatal(err)
			}
		}
		w.sort(Asc)
		if len(w.events) != len(rows) {
			t.Fatalf("round %d: %d events, want %d", round, len(w.events), len(rows))
		}
		for i := range w.events {
			if got := w.event(&w.events[i]); !bytes.Equal(got, rows[i].Raw) {
				t.Fatalf("round %d: event %d is %.60s…, want %.60s…", round, i, got, rows[i].Raw)
			}
		}
		if round == 0 {
			nchunks = w.chunks.Len()
			if nchunks < 3 {
				t.Fatalf("%d chunks: the test means to fill several", nchunks)
			}
		} else if w.chunks.Len() != nchunks {
			t.Errorf("filled again, the window has %d chunks, first %d", w.chunks.Len(), nchunks)
		}
	}
}
