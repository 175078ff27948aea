package ingest_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
)

// benchLines are 400 generated log backend lines, as BenchmarkDecodeLine
// reads them.
func benchLines(b *testing.B) [][]byte {
	var log bytes.Buffer
	if err := auditgen.New(1, genStart).WriteLog(&log, 400); err != nil {
		b.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(log.Bytes(), []byte("\n")), []byte("\n"))
}

func benchDecodeImport(b *testing.B, src ingest.LineSource, lines [][]byte, events int) {
	size := 0
	for _, l := range lines {
		size += len(l) + 1
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	n := 0
	var batch ingest.Batch
	for b.Loop() {
		batch.Rows, batch.Rejects = batch.Rows[:0], batch.Rejects[:0]
		for _, line := range lines {
			if _, err := ingest.DecodeImportLine(src, line, &batch); err != nil {
				b.Fatal(err)
			}
		}
		if len(batch.Rows) != events || len(batch.Rejects) != 0 {
			b.Fatalf("%d rows, want %d; rejects %+v", len(batch.Rows), events, batch.Rejects)
		}
		n += len(batch.Rows)
	}
	reportEvents(b, n)
}

// BenchmarkDecodeImportLinePlain is BenchmarkDecodeLine through the
// envelope detection: plain lines must cost what they cost before.
func BenchmarkDecodeImportLinePlain(b *testing.B) {
	benchDecodeImport(b, ingest.LineSource{Cluster: "bench", Fixed: true}, benchLines(b), 400)
}

// BenchmarkDecodeImportLineAKS decodes the same events as AKS diagnostic
// records, one per line.
func BenchmarkDecodeImportLineAKS(b *testing.B) {
	var lines [][]byte
	for _, l := range benchLines(b) {
		rec, _ := json.Marshal(map[string]any{
			"time": "2026-03-01T12:00:00Z", "category": "kube-audit", "operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
			"resourceId": "/SUBSCRIPTIONS/0/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/BENCH",
			"properties": map[string]any{"log": string(l), "stream": "stdout", "pod": "kube-apiserver-0"},
		})
		lines = append(lines, rec)
	}
	benchDecodeImport(b, ingest.LineSource{}, lines, 400)
}

// BenchmarkDecodeImportLineCloudWatch decodes the same events as
// CloudWatch subscription payloads of 50 log events each.
func BenchmarkDecodeImportLineCloudWatch(b *testing.B) {
	plain := benchLines(b)
	var lines [][]byte
	for i := 0; i < len(plain); i += 50 {
		var events []any
		for _, l := range plain[i : i+50] {
			events = append(events, map[string]any{"id": "1", "timestamp": 1772366400000, "message": string(l)})
		}
		p, _ := json.Marshal(map[string]any{"messageType": "DATA_MESSAGE", "owner": "1", "logGroup": "/aws/eks/bench/cluster",
			"logStream": "kube-apiserver-audit-0", "subscriptionFilters": []string{"f"}, "logEvents": events})
		lines = append(lines, p)
	}
	benchDecodeImport(b, ingest.LineSource{}, lines, 400)
}

// BenchmarkDecodeImportLineGKE translates Cloud Logging entries (the
// fixture's 52) into events.
func BenchmarkDecodeImportLineGKE(b *testing.B) {
	data, err := os.ReadFile("testdata/envelopes/gke.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	benchDecodeImport(b, ingest.LineSource{}, lines, len(lines))
}
