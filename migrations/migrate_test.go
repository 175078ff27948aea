package migrations

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n%s", name, got)
	}
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"single.sql.golden", Config{}},
		{"single-retention.sql.golden", Config{RetentionDays: 30}},
		{"cluster.sql.golden", Config{Cluster: "prod", Database: "audit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmts, err := Render(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, strings.Join(stmts, ";\n\n")+";\n")
		})
	}
}

func TestClusterCreatesDistributedTables(t *testing.T) {
	stmts, err := Render(Config{Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(stmts, "\n")
	for _, table := range []string{"audit_events", "findings", "reports"} {
		if !strings.Contains(text, "CREATE TABLE IF NOT EXISTS "+table+"_local ON CLUSTER `c1`") {
			t.Errorf("no replicated local table for %s", table)
		}
		if !strings.Contains(text, "CREATE TABLE IF NOT EXISTS "+table+" ON CLUSTER `c1` AS "+table+"_local ENGINE = Distributed(") {
			t.Errorf("no Distributed table for %s", table)
		}
	}
	if !strings.Contains(text, "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')") {
		t.Error("events table is not replicated")
	}
}

func TestSplit(t *testing.T) {
	got := Split("-- a comment;\nCREATE TABLE a (x String);\n\n-- only a comment\nSELECT 'a;b'\n;\nSELECT 1")
	want := []string{"-- a comment;\nCREATE TABLE a (x String)", "-- only a comment\nSELECT 'a;b'\n", "SELECT 1"}
	if len(got) != len(want) {
		t.Fatalf("got %d statements %q", len(got), got)
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != strings.TrimSpace(want[i]) {
			t.Errorf("statement %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestApplyOnEngine runs every migration on the real embedded engine, twice:
// the second run must apply nothing and fail on nothing.
func TestApplyOnEngine(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Apply(ctx, st, Config{RetentionDays: 3650})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != len(all) || res.Current != all[len(all)-1].Version {
		t.Fatalf("first run applied %d of %d, current %d", len(res.Applied), len(all), res.Current)
	}
	res, err = Apply(ctx, st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 {
		t.Fatalf("second run applied %v", res.Applied)
	}
	var tables []string
	err = st.Select(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name", nil, func(row []byte) error {
		tables = append(tables, string(row))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(tables, " ")
	for _, want := range []string{"audit_events", "findings", "reports", "schema_migrations"} {
		if !strings.Contains(joined, `"`+want+`"`) {
			t.Errorf("table %s missing from %s", want, joined)
		}
	}
	// Losing the version table (or a crash before it was written) is
	// harmless: every statement is idempotent.
	if err := st.Exec(ctx, "TRUNCATE TABLE schema_migrations", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, st, Config{}); err != nil {
		t.Fatalf("re-running every migration: %v", err)
	}
}
