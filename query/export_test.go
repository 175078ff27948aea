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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
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

// exportParquetFile exports f as Parquet into a file of its own and
// returns the bytes, the stats, the progress calls' counts and the path.
func exportParquetFile(t *testing.T, st store.Store, f Filter) (pq *bytes.Buffer, stats ExportStats, sent []int64, path string) {
	t.Helper()
	pq = new(bytes.Buffer)
	stats, err := Export(t.Context(), st, f, Parquet, pq, func(n int64) { sent = append(sent, n) })
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "x.parquet")
	if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return pq, stats, sent, path
}

// parquetRaws returns the raw column of the Parquet file at path, in the
// file's order, a line each.
func parquetRaws(t *testing.T, st store.Store, path string) string {
	t.Helper()
	var raws strings.Builder
	if err := store.Each(t.Context(), st, "SELECT raw FROM file({f:String}, Parquet) SETTINGS input_format_parquet_preserve_order = 1, max_threads = 1",
		store.Params{"f": path}, func(r struct{ Raw string }) error {
			raws.WriteString(r.Raw + "\n")
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	return raws.String()
}

// selectOnly hides every method of a store but those Export reads with.
type selectOnly struct{ Selecter }

func TestExportOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	// Merges would fold the copies below into one row.
	if err := st.Exec(ctx, "SYSTEM STOP MERGES audit_events", nil); err != nil {
		t.Fatal(err)
	}
	insertGenerated(t, st, "a", 5)
	insertGenerated(t, st, "b", 5)
	insertGenerated(t, st, "a", 1) // a's first 400 again: stored twice, in a part of their own
	var rows uint64
	if err := store.Each(ctx, st, "SELECT count() AS n FROM audit_events", nil, func(n uint64) error {
		rows = n
		return nil
	}); err != nil || rows != 4400 {
		t.Fatalf("the store holds %d rows (%v), want 4400: 400 of them copies", rows, err)
	}

	for i, f := range []Filter{
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
		if i == 0 && ev.Emitted != 4000 {
			t.Errorf("every event: Events with All wrote %d, want the 4000 events once each", ev.Emitted)
		}
		es, err := Export(ctx, st, f, NDJSON, &got, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || es.Events != int64(ev.Emitted) || es.Bytes != int64(got.Len()) || ev.Emitted == 0 {
			t.Errorf("%+v: Export wrote %d events in %d bytes, Events with All %d in %d; the outputs differ: %v",
				f, es.Events, got.Len(), ev.Emitted, want.Len(), got.String() != want.String())
		}

		pq, ps, sent, path := exportParquetFile(t, st, f)
		var n int
		if err := store.Each(ctx, st, "SELECT count() AS n FROM file({f:String}, Parquet)", store.Params{"f": path}, func(c int) error {
			n = c
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := ev.Emitted; n != want || ps.Bytes != int64(pq.Len()) || ps.Events != int64(want) {
			t.Errorf("%+v: the Parquet file holds %d rows, want %d; stats %+v for %d bytes", f, n, want, ps, pq.Len())
		}
		// The file's rows are the NDJSON export's events, in its order,
		// each once: sorted and deduplicated in Go (store.RowOrder).
		if raws := parquetRaws(t, st, path); raws != want.String() {
			t.Errorf("%+v: the Parquet file's raw column, in its order, is not the NDJSON export's events:\n%.600s\nwant\n%.600s", f, raws, want.String())
		}
		// The file's columns are the table's typed columns in its order,
		// then raw; each holds what the table holds, row by row.
		var cols, names []string
		for _, c := range store.RowColumns() {
			switch c {
			case "raw", "residual":
				continue
			case "annotations":
				cols = append(cols, "toString(mapSort(annotations))")
			default:
				cols = append(cols, "toString("+c+")")
			}
			names = append(names, c)
		}
		var described []string
		errNamed := errors.New("named")
		if err := st.Scan(ctx, "SELECT * FROM file({f:String}, Parquet)", store.Params{"f": path}, func(cs []store.Column) ([]any, error) {
			for _, c := range cs {
				described = append(described, c.Name)
			}
			return nil, errNamed
		}, func() error { return nil }); !errors.Is(err, errNamed) {
			t.Fatal(err)
		}
		if want := append(names, "raw"); !slices.Equal(described, want) {
			t.Errorf("the file's columns: %v, want %v", described, want)
		}
		line := "arrayStringConcat([" + strings.Join(cols, ", ") + "], '|') AS line"
		lines := func(sql string, p store.Params) string {
			var b strings.Builder
			if err := store.Each(ctx, st, sql, p, func(r struct{ Line string }) error {
				b.WriteString(r.Line + "\n")
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		sql, params := all.sql(line, "audit_events FINAL")
		wantCols := lines(sql, params)
		gotCols := lines("SELECT "+line+" FROM file({f:String}, Parquet) SETTINGS input_format_parquet_preserve_order = 1, max_threads = 1",
			store.Params{"f": path})
		if gotCols != wantCols || strings.Count(gotCols, "\n") != ev.Emitted {
			t.Errorf("%+v: the Parquet file's columns differ from the table's:\n%.600s\nwant\n%.600s", f, gotCols, wantCols)
		}
		// Progress counts the events written, a window at a time.
		if len(sent) == 0 || sent[len(sent)-1] != int64(ev.Emitted) || !slices.IsSorted(sent) {
			t.Errorf("%+v: progress said %v, want it to grow window by window to %d", f, sent, ev.Emitted)
		}
		if i == 0 {
			// Any store: one that only selects writes the same file.
			var again bytes.Buffer
			if _, err := Export(ctx, selectOnly{st}, f, Parquet, &again, nil); err != nil || !bytes.Equal(again.Bytes(), pq.Bytes()) {
				t.Errorf("Parquet from a store that only selects: %v; the same %d bytes: %v", err, pq.Len(), bytes.Equal(again.Bytes(), pq.Bytes()))
			}
		}
	}

	// No event matches: a file with the columns and no rows.
	if _, es, _, path := exportParquetFile(t, st, Filter{Cluster: []string{"none"}}); es.Events != 0 || parquetRaws(t, st, path) != "" {
		t.Errorf("an export of no events: %+v, want a file of no rows", es)
	}
	if _, err := Export(ctx, st, Filter{Stage: []string{"Nope"}}, NDJSON, io.Discard, nil); !errors.Is(err, ErrBadFilter) {
		t.Errorf("a bad filter: %v, want ErrBadFilter", err)
	}
}

// BenchmarkExport measures exports of 100k generated events (about 1.3 KB
// each) from the embedded engine to io.Discard, beside the baselines in
// the same run: Events with All and no jq program, which is what
// `auditlens query --all > /dev/null` runs, and the same as one query
// without time windows.
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
	queryAll := func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			s, err := Events(b.Context(), st, Filter{All: true}, nil, Limits{Timeout: -1, MaxOutputs: -1, MaxOutputBytes: -1}, io.Discard)
			if err != nil || s.Emitted != events {
				b.Fatalf("%+v %v", s, err)
			}
		}
		report(b)
	}
	b.Run("baseline=query-all", queryAll)
	// The same read as one sorted query (no windows): what query --all ran
	// before the windows, faster on a small store, but the engine holds
	// the whole selection while it sorts.
	b.Run("baseline=one-query", func(b *testing.B) {
		defer func(n int64) { windowEvents = n }(windowEvents)
		windowEvents = 1 << 62
		queryAll(b)
	})
	b.Run("export=ndjson", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			s, err := Export(b.Context(), st, Filter{}, NDJSON, io.Discard, nil)
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
			s, err := Export(b.Context(), st, Filter{}, Parquet, io.Discard, nil)
			if err != nil {
				b.Fatal(err)
			}
			out = s.Bytes
		}
		report(b)
		b.ReportMetric(float64(out)/float64(size), "parquet/json")
	})
}

// TestTimeWindowsOnEmbeddedEngine: an All read cut into many time windows
// (per minute, and per second within a busy minute) returns exactly what
// one query over the whole range returns, in either order, with time
// bounds inside a minute and events stored twice.
func TestTimeWindowsOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 7, 1, 10, 0, 0, 0, time.UTC)
	var rows []store.Row
	add := func(cluster string, i int, at time.Time) {
		id := cluster + "-" + strconv.Itoa(i)
		rows = append(rows, store.Row{Cluster: cluster, AuditID: id, Stage: "ResponseComplete", Verb: "get", Time: at,
			Resource: "pods", Code: 200, Raw: []byte(`{"auditID":"` + id + `","t":"` + at.Format(time.RFC3339Nano) + `"}`)})
	}
	for i := range 3000 { // quiet: one event every 1.7 s, over 85 minutes
		add("a", i, t0.Add(time.Duration(i)*1700*time.Millisecond))
	}
	for i := range 2000 { // busy: 2000 events within 10 s, one minute in
		add("b", i, t0.Add(time.Minute+time.Duration(i)*5*time.Millisecond))
	}
	for i := range 1500 { // busy for three minutes in a row, half an hour in
		add("e", i, t0.Add(30*time.Minute+time.Duration(i)*120*time.Millisecond))
	}
	// On both sides of each window boundary (whole seconds and minutes).
	for k := range 90 {
		add("c", 2*k, t0.Add(time.Duration(k)*time.Minute-time.Microsecond))
		add("c", 2*k+1, t0.Add(time.Duration(k)*time.Minute))
	}
	for k := range 12 {
		add("d", 2*k, t0.Add(time.Minute+time.Duration(k)*time.Second-time.Microsecond))
		add("d", 2*k+1, t0.Add(time.Minute+time.Duration(k)*time.Second))
	}
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, rows[100:110]); err != nil { // stored twice
		t.Fatal(err)
	}
	defer func(n int64) { windowEvents = n }(windowEvents)
	windowEvents = 300

	for _, f := range []Filter{
		{All: true},
		{All: true, Order: Desc},
		{All: true, Since: t0.Add(30 * time.Second), Until: t0.Add(70*time.Minute + 17*time.Second)},
		{All: true, Cluster: []string{"b"}, Order: Desc},
	} {
		ws, err := timeWindows(ctx, st, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) < 10 {
			t.Errorf("%+v: %d windows; the test wants many", f, len(ws))
		}
		// The reference: one query over the whole range, with FINAL.
		sql, params := f.sql("raw", "audit_events FINAL")
		var want bytes.Buffer
		if err := store.Each(ctx, st, sql, params, func(r struct{ Raw string }) error {
			want.WriteString(r.Raw + "\n")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		stats, err := Events(ctx, st, f, nil, Limits{MaxOutputs: -1, MaxOutputBytes: -1}, &got)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || stats.Emitted == 0 {
			t.Errorf("%+v: %d windows gave %d events (%d bytes), one query %d bytes; they differ", f, len(ws), stats.Emitted, got.Len(), want.Len())
		}
		// Parquet, whose rows point into the window's memory until they
		// are written: each window reuses the memory of the one before
		// last.
		_, es, sent, path := exportParquetFile(t, st, f)
		if raws := parquetRaws(t, st, path); raws != want.String() || es.Events != int64(stats.Emitted) || len(sent) != len(ws) {
			t.Errorf("%+v: the Parquet export of %d windows (progress %d times) holds %d events, raw differs from one query's: %v",
				f, len(ws), len(sent), es.Events, raws != want.String())
		}
	}
}
