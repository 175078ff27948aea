// Package scenariotest loads scenario traces into a store for tests, the
// way `auditlens import` loads an audit log.
package scenariotest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

// ImportTrace writes tr as an audit log file and imports it as cluster,
// failing tb unless every event is stored.
func ImportTrace(tb testing.TB, st store.Store, tr scenario.Trace, cluster string) ingest.ImportStats {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "audit.log")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tr.WriteLog(f); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}), []string{path},
		ingest.ImportConfig{Cluster: cluster})
	if err != nil {
		tb.Fatalf("importing %s: %v", tr, err)
	}
	if stats.Rejected != 0 || stats.Stored != int64(len(tr.Events)) {
		tb.Fatalf("imported %s: %d stored, %d rejected %v", tr, stats.Stored, stats.Rejected, stats.RejectSamples)
	}
	return stats
}
