package chdb

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkInsert compares the two ways to hand a RowBinary batch to the
// engine: the streaming-insert API (what Insert uses) and one chdb_query_n
// with the data inline after "FORMAT RowBinary".
func BenchmarkInsert(b *testing.B) {
	const rows = 10_000
	ctx := context.Background()
	query(b, testDB, "CREATE TABLE bench_ins (id UInt64, s String CODEC(ZSTD(3))) ENGINE = MergeTree ORDER BY id", nil)
	b.Cleanup(func() { query(b, testDB, "DROP TABLE bench_ins SYNC", nil) })
	data := rowBinary(0, rows, strings.Repeat(`{"kind":"Event","verb":"watch"},`, 40))

	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := testDB.Insert(ctx, "INSERT INTO bench_ins", "RowBinary", data); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("inline", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			q := "INSERT INTO bench_ins FORMAT RowBinary\n" + string(data)
			if _, err := testDB.Query(ctx, q, "", nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
