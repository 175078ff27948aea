package query

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

func BenchmarkFilterSQL(b *testing.B) {
	f := Filter{
		Since:     testNow.Add(-24 * time.Hour),
		Until:     testNow,
		Cluster:   []string{"prod"},
		Verb:      []string{"watch", "list"},
		Resource:  []string{"endpoints", "services"},
		Namespace: []string{"kube-system"},
		User:      []string{"system:serviceaccount:kube-system:*", "alice"},
		UserAgent: []string{"kube-controller-manager/*"},
		Code:      []int32{200, 410},
		Limit:     500,
	}
	b.ReportAllocs()
	for b.Loop() {
		f.SQL("cluster, audit_id, stage, raw")
	}
}

func readEvent(b *testing.B) []byte {
	b.Helper()
	raw, err := os.ReadFile("testdata/event.json")
	if err != nil {
		b.Fatal(err)
	}
	return bytes.TrimSpace(raw)
}

func BenchmarkDecodeEvent(b *testing.B) {
	raw := readEvent(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEvent(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJQRun runs typical console programs over a decoded
// RequestResponse event of about 3 KB.
func BenchmarkJQRun(b *testing.B) {
	input, err := DecodeEvent(readEvent(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct{ name, program string }{
		{"select", `select(.verb == "update" and .objectRef.resource == "endpoints")`},
		{"project", `{ts: .stageTimestamp, user: .user.username, verb, uri: .requestURI, code: .responseStatus.code}`},
		{"addresses", `.responseObject.subsets[]?.addresses[]?.ip`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			q := mustJQ(b, bm.program)
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Run(b.Context(), input, func(any) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvents measures Events per event, with the writing, over a
// fake store that hands out its rows (the engine's decoding is
// BenchmarkExport's, on the real engine).
func BenchmarkEvents(b *testing.B) {
	raw := string(readEvent(b))
	rows := make([]store.Row, 1000)
	for i := range rows {
		rows[i] = row("id-"+strconv.Itoa(i), raw) // distinct: Events skips a copy
	}
	st := &fakeSelecter{rows: rows}
	benchEvents(b, st, len(rows), len(raw))
}

// BenchmarkEventsRebuilt is BenchmarkEvents over rows stored as residuals
// (raw empty): each event is rebuilt from the typed columns and its
// residual.
func BenchmarkEventsRebuilt(b *testing.B) {
	raw := readEvent(b)
	row, err := ingest.DecodeEvent("prod", raw)
	if err != nil {
		b.Fatal(err)
	}
	row.Residual = residual.Split(raw, &row)
	row.Raw = nil
	rows := make([]store.Row, 1000)
	for i := range rows {
		rows[i] = row
		rows[i].AuditID += "-" + strconv.Itoa(i) // distinct: Events skips a copy
	}
	st := &fakeSelecter{rows: rows}
	benchEvents(b, st, len(rows), len(raw))
}

// BenchmarkHistogramStore: the explorer's histogram of one hour that
// holds nearly all of the detector benchmark's 10M stored events
// (detect/detectors/bench_test.go builds that store; give a copy, since opening it
// applies the migrations, 0006's backfill included), in the 30 s bars the
// timeline asks for, with ragged edges as a window ending now has; from
// the rollup and from the events in the same run. Also the value list of
// users over the same hour.
//
//	AUDITLENS_ROLLUP_BENCH_STORE=/var/tmp/rollup-bench \
//	  go test ./query/ -run '^$' -bench HistogramStore -benchtime 10x -count 3
func BenchmarkHistogramStore(b *testing.B) {
	dir := os.Getenv("AUDITLENS_ROLLUP_BENCH_STORE")
	if dir == "" {
		b.Skip("set AUDITLENS_ROLLUP_BENCH_STORE to a copy of the detector benchmark's store (AUDITLENS_DETECT_BENCH_STORE)")
	}
	ctx := b.Context()
	st, err := store.Open(ctx, "chdb://"+dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now()
	res, err := migrations.Apply(ctx, st, migrations.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Applied) > 0 {
		b.Logf("applied %d migrations (the rollup's backfill among them) in %s", len(res.Applied), time.Since(t0).Round(time.Millisecond))
	}
	// The bench store's events run from 08:00 to 09:05 on 2026-05-04.
	f := Filter{Since: time.Date(2026, 5, 4, 8, 5, 0, 250_000_000, time.UTC), Until: time.Date(2026, 5, 4, 9, 5, 0, 250_000_000, time.UTC)}
	h, err := HistogramEvents(ctx, st, f, HistogramOptions{Buckets: 120})
	if err != nil {
		b.Fatal(err)
	}
	if h.Source != SourceRollup || h.StepMS != 30_000 {
		b.Fatalf("the hour in 120 bars: source %s, step %d ms; want the rollup's 30 s", h.Source, h.StepMS)
	}
	b.Logf("the window holds %d events", h.Total)
	for _, by := range []string{"verb", "user"} {
		for _, fromEvents := range []bool{false, true} {
			name := "by=" + by + "/rollup"
			if fromEvents {
				name = "by=" + by + "/events"
			}
			b.Run(name, func(b *testing.B) {
				opt := HistogramOptions{By: by, Buckets: 120, FromEvents: fromEvents}
				b.ReportAllocs()
				for b.Loop() {
					got, err := HistogramEvents(ctx, st, f, opt)
					if err != nil {
						b.Fatal(err)
					}
					if got.Total != h.Total {
						b.Fatalf("%d events, want %d", got.Total, h.Total)
					}
				}
			})
		}
	}
	for _, rollup := range []bool{true, false} {
		name := "values=user/rollup"
		if !rollup {
			name = "values=user/events"
		}
		b.Run(name, func(b *testing.B) {
			vf := f
			vf.Limit = 50
			b.ReportAllocs()
			for b.Loop() {
				if _, err := values(ctx, st, vf, "user", rollup); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchEvents runs Events over st's n rows of eventBytes-byte events,
// plain and through a jq program.
func benchEvents(b *testing.B, st Selecter, n, eventBytes int) {
	for _, bm := range []struct{ name, program string }{
		{"raw", ""},
		{"jq", `{user: .user.username, verb, code: .responseStatus.code}`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			var q *JQ
			if bm.program != "" {
				q = mustJQ(b, bm.program)
			}
			b.SetBytes(int64(eventBytes * n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Events(b.Context(), st, Filter{Limit: n}, q, Limits{}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
