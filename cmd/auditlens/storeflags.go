package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
)

// storeFlags are shared by every command that opens a store.
type storeFlags struct {
	url       string
	chdbLib   string
	onCluster string
	database  string
	retention int
}

func (s *storeFlags) register(fs *flag.FlagSet, def string) {
	fs.StringVar(&s.url, "store", def, "store URL: chdb:///abs/path, chdb://./rel/path or clickhouse://user:pass@host:9000/db")
	fs.StringVar(&s.chdbLib, "chdb-lib", "", "path to libchdb.so (default: $CHDB_LIB_PATH, the cache filled by 'make chdb', /usr/local/lib)")
	fs.StringVar(&s.onCluster, "on-cluster", "", "ClickHouse cluster name: create replicated tables ON CLUSTER with Distributed tables in front")
	fs.IntVar(&s.retention, "retention-days", 0, "drop events older than this many days when tables are first created (0 keeps everything)")
}

// open opens the store and brings its schema up to date.
func (s *storeFlags) open(ctx context.Context, log *slog.Logger) (store.Store, error) {
	if s.url == "" {
		return nil, fmt.Errorf("%w: --store is required", errUsage)
	}
	st, err := store.Open(ctx, s.url, store.Options{ChdbLib: s.chdbLib, Logger: log})
	if err != nil {
		return nil, err
	}
	res, err := migrations.Apply(ctx, st, s.migrationConfig())
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	for _, m := range res.Applied {
		log.Info("applied migration", "version", m.Version, "name", m.Name)
	}
	return st, nil
}

func (s *storeFlags) migrationConfig() migrations.Config {
	return migrations.Config{Cluster: s.onCluster, Database: s.database, RetentionDays: s.retention}
}
