package query

// Export on the real embedded engine, with events made by the generator
// and decoded as ingest decodes them.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/auditgen"
	"github.com/auditlens/auditlens/internal/storetest"
	"github.com/auditlens/auditlens/store"
)

var exportStart = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// insertGenerated stores batches×400 generated events as cluster and
// returns their total raw size.
func insertGenerated(tb testing.TB, st store.Store, cluster string, batches int) int64 {
	tb.Helper()
	g := auditgen.New(42, exportStart)
	var size int64
	for range batches {
		b, err := ingest.DecodeBody(cluster, g.EventListBody(400))
		if err != nil || len(b.Rejects) > 0 {
			tb.Fatalf("decoding generated events: %v %v", err, b.Rejects)
		}
		for _, r := range b.Rows {
			size += int64(len(r.Raw)) + 1
		}
		if err := st.Insert(context.Background(), b.Rows); err != nil {
			tb.Fatal(err)
		}
	}
	return size
}

// selectOnly hides every method of a store but Select, as a store that
// cannot write formatted output would be.
type selectOnly struct{ Selecter }

func TestExportOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	insertGenerated(t, st, "a", 5)
	insertGenerated(t, st, "b", 5)

	for _, f := range []Filter{
		{},
		{Cluster: []string{"b"}, Verb: []string{"watch", "list"}},
		{Since: exportStart.Add(100 * time.Millisecond), Until: exportStart.Add(300 * time.Millisecond), Order: Desc, Limit: 3},
	} {
		var want, got bytes.Buffer
		all := f
		all.All = true
		ev, err := Events(ctx, st, all, nil, Limits{MaxOutputs: -1, MaxOutputBytes: -1}, &want)
		if err != nil {
			t.Fatal(err)
		}
		es, err := Export(ctx, st, f, NDJSON, &got)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || es.Events != int64(ev.Emitted) || es.Bytes != int64(got.Len()) || ev.Emitted == 0 {
			t.Errorf("%+v: Export wrote %d events in %d bytes, Events with All %d in %d; the outputs differ: %v",
				f, es.Events, got.Len(), ev.Emitted, want.Len(), got.String() != want.String())
		}

		var pq bytes.Buffer
		ps, err := Export(ctx, st, f, Parquet, &pq)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		var n string
		if err := st.Select(ctx, "SELECT count() AS n FROM file({f:String}, Parquet)", store.Params{"f": path}, func(row []byte) error {
			n = string(row)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := `{"n":` + strconv.Itoa(ev.Emitted) + `}`; n != want || ps.Bytes != int64(pq.Len()) || ps.Events != -1 {
			t.Errorf("%+v: the Parquet file holds %s, want %s; stats %+v for %d bytes", f, n, want, ps, pq.Len())
		}
	}

	if _, err := Export(ctx, selectOnly{st}, Filter{}, Parquet, io.Discard); !errors.Is(err, ErrExportUnsupported) {
		t.Errorf("Parquet from a store without SelectFormat: %v, want ErrExportUnsupported", err)
	}
	if _, err := Export(ctx, st, Filter{Stage: []string{"Nope"}}, NDJSON, io.Discard); !errors.Is(err, ErrBadFilter) {
		t.Errorf("a bad filter: %v, want ErrBadFilter", err)
	}
}

// BenchmarkExport measures exports of 100k generated events (about 1.3 KB
// each) from the embedded engine to io.Discard, beside the baseline in the
// same run: Events with All and no jq program, which is what
// `auditlens query --all > /dev/null` runs.
//
//	go test -run '^$' -bench Export -benchtime 3x ./query/
func BenchmarkExport(b *testing.B) {
	st := storetest.Open(b)
	const batches = 250
	size := insertGenerated(b, st, "bench", batches)
	const events = batches * 400
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("baseline=query-all", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			s, err := Events(b.Context(), st, Filter{All: true}, nil, Limits{Timeout: -1, MaxOutputs: -1, MaxOutputBytes: -1}, io.Discard)
			if err != nil || s.Emitted != events {
				b.Fatalf("%+v %v", s, err)
			}
		}
		report(b)
	})
	b.Run("export=ndjson", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			s, err := Export(b.Context(), st, Filter{}, NDJSON, io.Discard)
			if err != nil || s.Events != events {
				b.Fatalf("%+v %v", s, err)
			}
		}
		report(b)
	})
	b.Run("export=parquet", func(b *testing.B) {
		b.SetBytes(size) // the events' JSON size, for a rate comparable with NDJSON
		b.ReportAllocs()
		var out int64
		for b.Loop() {
			s, err := Export(b.Context(), st, Filter{}, Parquet, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			out = s.Bytes
		}
		report(b)
		b.ReportMetric(float64(out)/float64(size), "parquet/json")
	})
}
