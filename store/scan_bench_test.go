package store

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkScan reads 1M rows of the shape the detectors and the timeline
// read (an identity of LowCardinality strings, a count, times as
// microseconds, an array of IDs) into a struct: through Each, and, as the
// baseline measured in the same run, as every reader did before, the
// engine's JSONEachRow decoded with encoding/json.
//
//	go test -run '^$' -bench Scan -benchtime 5x -count 3 ./store/
func BenchmarkScan(b *testing.B) {
	const sql = `SELECT toLowCardinality(['kube-controller-manager', 'kubelet', 'scheduler'][number % 3 + 1]) AS user,
	toLowCardinality('endpoints') AS resource, toString(number) AS audit_id, number % 1000 AS n,
	toInt64(1700000000000000 + number) AS start_us, toInt32(200) AS code, [toString(number), 'x'] AS ids
FROM numbers(1000000)`
	type row struct {
		User     string   `json:"user"`
		Resource string   `json:"resource"`
		AuditID  string   `json:"audit_id"`
		N        int64    `json:"n"`
		StartUS  int64    `json:"start_us"`
		Code     int32    `json:"code"`
		IDs      []string `json:"ids"`
	}
	ctx := context.Background()
	e := openTestEmbedded(b)
	b.Run("each", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var sum int64
			if err := Each(ctx, e, sql, nil, func(r row) error { sum += r.N; return nil }); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*1e6/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var sum int64
			var carry []byte
			err := e.db.QueryStream(ctx, sql+" SETTINGS output_format_json_quote_64bit_integers = 0", "JSONEachRow", nil, func(chunk []byte) error {
				for len(chunk) > 0 {
					i := bytes.IndexByte(chunk, '\n')
					if i < 0 {
						carry = append(carry, chunk...)
						return nil
					}
					line := chunk[:i]
					if len(carry) > 0 {
						line = append(carry, line...)
					}
					var r row
					if err := json.Unmarshal(line, &r); err != nil {
						return err
					}
					sum += r.N
					carry, chunk = carry[:0], chunk[i+1:]
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*1e6/b.Elapsed().Seconds(), "rows/s")
	})
}
