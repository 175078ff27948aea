package query

import (
	"context"
	"io"
	"testing"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
)

// BenchmarkExportResidual is BenchmarkExport's exports over the same
// generated events stored as the writer stores them (residuals, raw
// empty), so that every event is rebuilt on the way out: what a store
// written by auditlens serve or import holds.
func BenchmarkExportResidual(b *testing.B) {
	st := storetest.Open(b)
	w := ingest.NewWriter(st, ingest.WriterConfig{})
	g := auditgen.New(42, exportStart)
	const batches = 250
	var size int64
	for range batches {
		body, err := ingest.DecodeBody("bench", g.EventListBody(400))
		if err != nil || len(body.Rejects) > 0 {
			b.Fatalf("decoding generated events: %v %v", err, body.Rejects)
		}
		for _, r := range body.Rows {
			size += int64(len(r.Raw)) + 1
		}
		if _, err := w.Write(context.Background(), body.Rows); err != nil {
			b.Fatal(err)
		}
	}
	const events = batches * 400
	for _, format := range []ExportFormat{NDJSON, Parquet} {
		b.Run("export="+format.String(), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				s, err := Export(b.Context(), st, Filter{}, format, io.Discard, nil)
				if err != nil || format == NDJSON && s.Events != events {
					b.Fatalf("%+v %v", s, err)
				}
			}
			b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
