package migrations

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/store"
)

// TestAlterColumnsReachDistributedTables: on a cluster a column added to
// a local table is added to the Distributed table in front of it too
// (else it can be neither written nor read through it); alterations that
// are not about columns stay on the local table.
func TestAlterColumnsReachDistributedTables(t *testing.T) {
	tp := newTemplater(Config{Cluster: "c1", Database: "db"})
	got, err := tp.withDistributed("-- why\nALTER TABLE `db`.audit_events_local ON CLUSTER `c1`\n    ADD COLUMN IF NOT EXISTS x String AFTER cluster")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-- why\nALTER TABLE `db`.audit_events_local ON CLUSTER `c1`\n    ADD COLUMN IF NOT EXISTS x String AFTER cluster",
		"ALTER TABLE `db`.audit_events ON CLUSTER `c1`\n    ADD COLUMN IF NOT EXISTS x String AFTER cluster",
	}
	if strings.Join(got, "\n;\n") != strings.Join(want, "\n;\n") {
		t.Errorf("got %q, want %q", got, want)
	}
	got, err = tp.withDistributed("ALTER TABLE `db`.audit_events_local ON CLUSTER `c1` ADD INDEX idx x TYPE set(0) GRANULARITY 1")
	if err != nil || len(got) != 1 {
		t.Errorf("index alteration: %q, %v; want the statement alone", got, err)
	}
	if _, err := tp.withDistributed("ALTER TABLE `db`.unknown_local ON CLUSTER `c1` ADD COLUMN x String"); err == nil {
		t.Error("a column added to a table without a Distributed table was accepted")
	}
	// One node: nothing to mirror.
	got, err = newTemplater(Config{}).withDistributed("ALTER TABLE audit_events ADD COLUMN x String")
	if err != nil || len(got) != 1 {
		t.Errorf("single node: %q, %v", got, err)
	}

	stmts, err := Render(Config{Cluster: "prod", Database: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(stmts, "\n")
	for _, table := range []string{"audit_events_local", "audit_events"} {
		if !strings.Contains(text, "ALTER TABLE `audit`."+table+" ON CLUSTER `prod`\n    ADD COLUMN IF NOT EXISTS apiserver LowCardinality(String) AFTER cluster") {
			t.Errorf("no apiserver column added to %s", table)
		}
	}
}

// TestApiserverColumnOnEngine: the migrations leave audit_events with the
// apiserver column next to cluster, also on a table created before it
// existed, and applying them again changes nothing.
func TestApiserverColumnOnEngine(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Apply(ctx, st, Config{}); err != nil {
		t.Fatal(err)
	}
	columns := func() []string {
		var cols []string
		err := store.Each(ctx, st, "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'audit_events' ORDER BY position LIMIT 3", nil,
			func(c struct{ Name, Type string }) error {
				cols = append(cols, c.Name+" "+c.Type)
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return cols
	}
	want := "cluster LowCardinality(String),apiserver LowCardinality(String),ts DateTime64(6, 'UTC')"
	if got := strings.Join(columns(), ","); got != want {
		t.Errorf("columns %s, want %s", got, want)
	}
	// Every statement again, as after a lost version table.
	if err := st.Exec(ctx, "TRUNCATE TABLE schema_migrations", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, st, Config{}); err != nil {
		t.Fatalf("re-running every migration: %v", err)
	}
	if got := strings.Join(columns(), ","); got != want {
		t.Errorf("after a second run: columns %s, want %s", got, want)
	}
}

// TestResidualColumnOnEngine: migration 0005 leaves audit_events with the
// residual column after raw and the codecs it sets, also when every
// statement runs again.
func TestResidualColumnOnEngine(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	codecs := func() map[string]string {
		got := map[string]string{}
		err := store.Each(ctx, st, "SELECT name, compression_codec AS codec FROM system.columns WHERE database = currentDatabase() AND table = 'audit_events' AND name IN ('raw', 'residual', 'user_groups', 'code', 'annotations')", nil,
			func(c struct{ Name, Codec string }) error {
				got[c.Name] = c.Codec
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := map[string]string{"raw": "CODEC(ZSTD(3))", "residual": "CODEC(ZSTD(3))", "user_groups": "CODEC(ZSTD(3))", "code": "CODEC(ZSTD(1))", "annotations": "CODEC(ZSTD(6))"}
	for range 2 {
		if _, err := Apply(ctx, st, Config{}); err != nil {
			t.Fatal(err)
		}
		if got := codecs(); !reflect.DeepEqual(got, want) {
			t.Errorf("codecs %v, want %v", got, want)
		}
		if err := st.Exec(ctx, "TRUNCATE TABLE schema_migrations", nil); err != nil {
			t.Fatal(err)
		}
	}
}
