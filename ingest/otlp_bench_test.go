package ingest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/store"
)

// nopAppender accepts every batch at once: the benchmarks measure the
// handlers, not the fsync.
type nopAppender struct{}

func (nopAppender) AppendRows(context.Context, Source, []store.Row) error { return nil }

// benchLines are 400 audit log lines: an apiserver webhook batch's worth.
func benchLines(b *testing.B) []string { return logLines(b, 400) }

func benchHandler(b *testing.B, h http.Handler, path string, body []byte, events int, hdr ...string) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		n += events
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkWebhookHandler is the baseline of BenchmarkOTLPLogs: the same
// 400 events as one EventList through the webhook's handler.
func BenchmarkWebhookHandler(b *testing.B) {
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(benchLines(b), ",") + `]}`)
	benchHandler(b, NewWebhook(nopAppender{}, WebhookConfig{}), "/audit/bench", body, 400, "Content-Type", "application/json")
}

// BenchmarkOTLPLogs: the same 400 events as the string bodies of one
// ExportLogsServiceRequest, as the collector's filelog receiver and
// otlphttp exporter send them, through the OTLP receiver.
func BenchmarkOTLPLogs(b *testing.B) {
	lines := benchLines(b)
	bodies := make([]any, len(lines))
	for i, l := range lines {
		bodies[i] = l
	}
	logs := otlpLogs(b, otlpResource{map[string]any{ClusterAttribute: "bench", "host.name": "master-1"}, bodies})
	for _, enc := range []struct {
		name  string
		proto bool
		ct    string
	}{{"protobuf", true, "application/x-protobuf"}, {"json", false, "application/json"}} {
		b.Run(enc.name, func(b *testing.B) {
			benchHandler(b, NewOTLPLogs(nopAppender{}, WebhookConfig{}), "/v1/logs", marshalLogs(b, logs, enc.proto), 400, "Content-Type", enc.ct)
		})
	}
}
