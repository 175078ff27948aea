package migrations

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
		{"cluster-retention.sql.golden", Config{Cluster: "prod", Database: "audit", RetentionDays: 30}},
		// What `migrate --print` shows for a URL without a database; Apply
		// names the connection's database instead (see TestApplyCluster).
		{"cluster-nodb.sql.golden", Config{Cluster: "prod"}},
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
	for _, table := range []string{"audit_events", "findings", "reports", "detector_state", "audit_event_counts"} {
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

// TestShardKeysUseSortKeyColumns: FINAL collapses the copies of a row on
// each shard separately, so a Distributed table's sharding key may only
// use columns of its local table's sort key (see shardKeys).
func TestShardKeysUseSortKeyColumns(t *testing.T) {
	stmts, err := Render(Config{Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	schema, err := newTemplater(Config{Cluster: "c1"}).render("schema", "CREATE TABLE IF NOT EXISTS schema_migrations_local (version UInt32)\nENGINE = MergeTree ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, schema)
	orderBy := regexp.MustCompile(`(?m)^\s*ENGINE = .*?ORDER BY (\(.*\)|\w+)\s*$|^ORDER BY (\(.*\)|\w+)\s*$`)
	ident := regexp.MustCompile(`\b[a-z_][a-z0-9_]*\b(\s*\()?`)
	columns := func(expr string) map[string]bool {
		out := map[string]bool{}
		for _, m := range ident.FindAllStringSubmatch(expr, -1) {
			if m[1] == "" { // not a function call
				out[m[0]] = true
			}
		}
		return out
	}
	sortKeys := map[string]map[string]bool{}
	for _, s := range stmts {
		if m := createLocal.FindStringSubmatch(s); m != nil {
			o := orderBy.FindStringSubmatch(s)
			if o == nil {
				t.Fatalf("no ORDER BY in %s", s)
			}
			sortKeys[m[2]] = columns(o[1] + o[2])
		}
	}
	for table, key := range shardKeys {
		sk, ok := sortKeys[table]
		if !ok {
			t.Errorf("shardKeys names %s, which no migration creates", table)
			continue
		}
		for c := range columns(key) {
			if !sk[c] {
				t.Errorf("%s: sharding key %s uses %s, not in the sort key %v", table, key, c, sk)
			}
		}
	}
	for table := range sortKeys {
		if _, ok := shardKeys[table]; !ok {
			t.Errorf("table %s has no sharding key", table)
		}
	}
	if _, err := newTemplater(Config{Cluster: "c1"}).withDistributed("CREATE TABLE IF NOT EXISTS new_local (x String)"); err == nil {
		t.Error("a table without a sharding key got a Distributed table")
	}
}

// recorder is an Execer that records statements and answers the two
// queries Apply makes.
type recorder struct {
	execs []string
	db    string
}

func (r *recorder) Exec(_ context.Context, sql string, _ store.Params) error {
	r.execs = append(r.execs, sql)
	return nil
}

func (r *recorder) Scan(_ context.Context, sql string, _ store.Params, bind func([]store.Column) ([]any, error), row func() error) error {
	if strings.Contains(sql, "currentDatabase()") {
		dests, err := bind([]store.Column{{Name: "db", Type: "String"}})
		if err != nil {
			return err
		}
		*dests[0].(*string) = r.db
		return row()
	}
	return nil // no migration applied yet
}

// TestApplyCluster: on a cluster Apply names the connection's database in
// the Distributed tables (currentDatabase() would be evaluated by each
// host), runs every statement ON CLUSTER and records versions in the
// foreground.
func TestApplyCluster(t *testing.T) {
	r := &recorder{db: "audit"}
	if _, err := Apply(context.Background(), r, Config{Cluster: "prod"}); err != nil {
		t.Fatal(err)
	}
	want, err := Render(Config{Cluster: "prod", Database: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	var ddl, inserts []string
	for _, s := range r.execs {
		switch {
		case strings.HasPrefix(s, "INSERT") && strings.Contains(s, "schema_migrations"):
			inserts = append(inserts, s)
		case !strings.Contains(s, "schema_migrations"):
			ddl = append(ddl, s)
		}
		if strings.HasPrefix(s, "CREATE") && !strings.Contains(s, "ON CLUSTER `prod`") {
			t.Errorf("not ON CLUSTER: %s", s)
		}
		if strings.Contains(s, "currentDatabase()") {
			t.Errorf("currentDatabase() in %s", s)
		}
	}
	if strings.Join(ddl, "\n") != strings.Join(want, "\n") {
		t.Errorf("Apply ran\n%s\nRender gives\n%s", strings.Join(ddl, "\n"), strings.Join(want, "\n"))
	}
	all, _ := All()
	if len(inserts) != len(all) {
		t.Fatalf("%d version inserts, want %d", len(inserts), len(all))
	}
	for _, s := range inserts {
		if !strings.HasPrefix(s, "INSERT INTO `audit`.schema_migrations (version, name) SETTINGS distributed_foreground_insert = 1 VALUES") {
			t.Errorf("version insert: %s", s)
		}
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
	err = store.Each(ctx, st, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name", nil, func(name string) error {
		tables = append(tables, name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"audit_events", "findings", "reports", "detector_state", "schema_migrations", "audit_event_counts", "audit_event_counts_mv"} {
		if !slices.Contains(tables, want) {
			t.Errorf("table %s missing from %q", want, tables)
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
