package store

import (
	"context"
	"fmt"
	"testing"
)

func BenchmarkZZSplit(b *testing.B) {
	ctx := context.Background()
	e := openTestEmbedded(b)
	ddl := embRenderMigration(b)
	rows := embBenchRows(10000)
	for _, parts := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("seq%d", parts), func(b *testing.B) {
			e.Exec(ctx, "DROP TABLE IF EXISTS audit_events SYNC", nil)
			e.Exec(ctx, ddl, nil)
			cpu := embCPUTime()
			for b.Loop() {
				n := len(rows) / parts
				for p := 0; p < parts; p++ {
					if err := e.Insert(ctx, rows[p*n:(p+1)*n]); err != nil {
						b.Fatal(err)
					}
				}
			}
			embReportRates(b, 10000, 0, cpu)
		})
	}
}
