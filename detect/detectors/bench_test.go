package detectors_test

// The detector benchmark over at least 10M stored events: realistic
// background traffic from internal/auditgen with the seed incident (real
// time scale) injected, on the embedded engine. Building the store takes
// minutes, so it is built only by the benchmark, and can be kept for the
// next run:
//
//	AUDITLENS_DETECT_BENCH_STORE=/var/tmp/detect-bench \
//	  go test ./detect/ -run '^$' -bench Detectors -benchtime 3x -timeout 60m
//
// -detect.bench-events sets the number of background events (default
// 10M). The figures (time per evaluation of the whole span, events/s) are
// in the README.

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

var benchEvents = flag.Int("detect.bench-events", 10_000_000, "background events stored for BenchmarkDetectors")

const benchCluster = "bench"

var benchStart = time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)

func BenchmarkDetectors(b *testing.B) {
	st := detecttest.Engine(b)
	ctx := context.Background()
	total, span := benchStore(b, st, *benchEvents)
	w := detect.Window{Since: span[0], Until: span[1], Clusters: []string{benchCluster}}
	b.Logf("%d events stored in cluster %q from %s to %s", total, benchCluster, span[0].Format(time.RFC3339), span[1].Format(time.RFC3339))

	// The injected incident is found among the background.
	loops, err := watchloop.New(watchloop.Config{}).Evaluate(ctx, st, w)
	if err != nil {
		b.Fatal(err)
	}
	found := false
	for _, f := range loops {
		b.Logf("watch-loop: %s (objects %d)", f.Title, len(f.Objects))
		if f.Subjects.User == "system:kube-controller-manager" && f.Subjects.ResourceVersion == "1200" {
			found = true
		}
	}
	if !found || len(loops) != 1 {
		b.Fatalf("%d watch-loop findings; want exactly the injected incident", len(loops))
	}

	for _, d := range append(detectors.Default(), nil) {
		name := "all"
		if d != nil {
			name = d.Name()
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var findings int
			for b.Loop() {
				findings = 0
				for _, det := range detectors.Default() {
					if d != nil && det.Name() != d.Name() {
						continue
					}
					fs, err := det.Evaluate(ctx, st, w)
					if err != nil {
						b.Fatal(err)
					}
					findings += len(fs)
				}
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(total)/perOp, "events/s")
			b.ReportMetric(float64(findings), "findings")
		})
	}
}

// benchStore fills the bench cluster with n background events and the
// seed incident, unless it holds them already (a kept store), and returns
// the number of events and their span.
func benchStore(b testing.TB, st store.Store, n int) (int, [2]time.Time) {
	b.Helper()
	ctx := context.Background()
	count, span := storedSpan(b, st)
	if count >= n {
		return count, span
	}
	if count > 0 {
		b.Fatalf("the bench store holds %d events of cluster %q, fewer than %d: remove it", count, benchCluster, n)
	}
	start := time.Now()
	rows := make(chan []store.Row, 2)
	errc := make(chan error, 1)
	go func() { errc <- generateBench(n, rows) }()
	stored := 0
	for batch := range rows {
		if err := st.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
		stored += len(batch)
		if stored%(1_000_000) < len(batch) {
			b.Logf("stored %d events in %s", stored, time.Since(start).Round(time.Second))
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.Logf("stored %d events in %s (%.0f events/s)", stored, time.Since(start).Round(time.Second), float64(stored)/time.Since(start).Seconds())
	count, span = storedSpan(b, st)
	return count, span
}

func storedSpan(b testing.TB, st store.Store) (int, [2]time.Time) {
	type summary struct {
		N     int   `ch:"n"`
		First int64 `ch:"first"`
		Last  int64 `ch:"last"`
	}
	var r summary
	err := store.Each(context.Background(), st, `SELECT count() AS n, toUnixTimestamp64Micro(min(ts)) AS first, toUnixTimestamp64Micro(max(ts)) AS last
FROM audit_events WHERE cluster = {c:String}`, store.Params{"c": benchCluster}, func(row summary) error { r = row; return nil })
	if err != nil {
		b.Fatal(err)
	}
	return r.N, [2]time.Time{time.UnixMicro(r.First).UTC(), time.UnixMicro(r.Last + 1).UTC()}
}

// generateBench sends n background events from auditgen, then the seed
// incident, as row batches.
func generateBench(n int, out chan<- []store.Row) error {
	defer close(out)
	g := auditgen.New(42, benchStart)
	const perBody, perBatch = 400, 100_000
	batch := make([]store.Row, 0, perBatch)
	for done := 0; done < n; done += perBody {
		dec, err := ingest.DecodeBody(benchCluster, g.EventListBody(min(perBody, n-done)))
		if err != nil {
			return fmt.Errorf("decoding generated events: %w", err)
		}
		batch = append(batch, dec.Rows...)
		if len(batch) >= perBatch {
			out <- batch
			batch = make([]store.Row, 0, perBatch)
		}
	}
	sc, _ := scenario.ByName("seed-incident")
	var log bytes.Buffer
	if err := sc.Generate(scenario.Real, benchStart, 1).WriteLog(&log); err != nil {
		return err
	}
	lines := bufio.NewScanner(&log)
	lines.Buffer(nil, 1<<20)
	var dec ingest.Batch
	for lines.Scan() {
		if err := ingest.DecodeLine(benchCluster, bytes.Clone(lines.Bytes()), &dec); err != nil {
			return err
		}
	}
	out <- append(batch, dec.Rows...)
	return nil
}
