// Package storetest opens a fresh embedded store with the schema applied,
// for tests that run SQL on the real engine: the single-node schema
// (Open) or the cluster-mode schema behind Distributed tables
// (OpenCluster).
package storetest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
)

// Open returns an embedded store in a temporary directory with every
// migration applied; it is closed when the test ends. Tests run with -short
// skip, since starting the engine takes a moment.
func Open(t testing.TB) store.Store {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatalf("opening the embedded engine: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the embedded engine: %v", err)
		}
	})
	if _, err := migrations.Apply(ctx, st, migrations.Config{}); err != nil {
		t.Fatalf("creating the schema: %v", err)
	}
	return st
}

// ClusterName is the cluster OpenCluster's schema is spread over.
const ClusterName = "auditlens"

// twoShards is a configuration with ClusterName as two shards: this
// engine (127.0.0.1 on the engine's own tcp_port is a local address, read
// and written in process, prefer_localhost_replica) and 127.0.0.2, where
// nothing listens. With two shards the engine treats queries as
// distributed (a plain IN subquery over a Distributed table is refused,
// GLOBAL IN ships its set); clusterSettings skip the absent shard when
// reading and send every insert to the local one.
const twoShards = `<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers>
    <` + ClusterName + `>
      <shard>
        <internal_replication>true</internal_replication>
        <replica><host>127.0.0.1</host><port>9000</port></replica>
      </shard>
      <shard>
        <internal_replication>true</internal_replication>
        <replica><host>127.0.0.2</host><port>9000</port></replica>
      </shard>
    </` + ClusterName + `>
  </remote_servers>
</clickhouse>
`

// clusterSettings make the absent second shard of twoShards harmless.
var clusterSettings = map[string]string{
	"skip_unavailable_shards":          "1",
	"insert_shard_id":                  "1",
	"connect_timeout_with_failover_ms": "100",
}

var (
	onCluster  = regexp.MustCompile(" ON CLUSTER `" + ClusterName + "`")
	replicated = regexp.MustCompile(`Replicated(\w+MergeTree)\('/clickhouse/tables/\{shard\}/\{database\}/\{table\}', '\{replica\}'(, )?`)
)

// OpenCluster returns an embedded store holding the cluster-mode schema
// (migrations.Config{Cluster: ClusterName}): Distributed tables of the
// plain names over _local tables, on a cluster of one shard on this
// engine. Tests that run the readers' and writers' SQL on it check its
// shape on a cluster: reads and inserts through Distributed tables, FINAL
// and aggregation across them, and that IN subqueries are GLOBAL (a plain
// IN over a Distributed table fails with DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED,
// as on a real cluster).
//
// What it cannot check: the embedded engine runs no Keeper and no
// distributed DDL, so the statements run without ON CLUSTER and with
// the non-replicated engines of the same family; and with one shard no
// row is ever on another shard. The engine runs on one data path per
// process: a test binary that uses OpenCluster cannot keep another
// embedded store open at the same time.
func OpenCluster(t testing.TB) store.Store {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	ctx := context.Background()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.xml")
	if err := os.WriteFile(cfg, []byte(twoShards), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenEmbedded(ctx, filepath.Join(dir, "data"), store.EmbeddedOptions{ConfigFile: cfg, Settings: clusterSettings})
	if err != nil {
		t.Fatalf("opening the embedded engine: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the embedded engine: %v", err)
		}
	})
	stmts, err := migrations.Render(migrations.Config{Cluster: ClusterName, Database: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		s = onCluster.ReplaceAllString(s, "")
		s = replicated.ReplaceAllString(s, "$1(")
		if err := st.Exec(ctx, s, nil); err != nil {
			t.Fatalf("creating the cluster schema: %v", err)
		}
	}
	return st
}

// JSONRows runs sql on st and returns its rows as the engine's own
// JSONEachRow text, one object a row with 64-bit integers unquoted, for
// tests that compare rows as text. The engine formats each row of sql as
// a subquery (formatRowNoNewline), so sql's order is kept.
func JSONRows(t testing.TB, st store.Scanner, sql string, params store.Params) []string {
	t.Helper()
	var out []string
	err := store.Each(context.Background(), st, "SELECT formatRowNoNewline('JSONEachRow', *) FROM ("+sql+
		") SETTINGS output_format_json_quote_64bit_integers = 0", params, func(row string) error {
		out = append(out, row)
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}
