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
	fs.StringVar(&s.onCluster, "on-cluster", "", "ClickHouse cluster name: create replicated tables ON CLUSTER with Distributed tables in front (same as ?cluster=NAME in the store URL)")
	fs.IntVar(&s.retention, "retention-days", 0, "drop events older than this many days when tables are first created (0 keeps everything)")
}

// open opens the store and brings its schema up to date.
func (s *storeFlags) open(ctx context.Context, log *slog.Logger) (store.Store, error) {
	if s.url == "" {
		return nil, fmt.Errorf("%w: --store is required", errUsage)
	}
	if _, err := s.migrationConfig(); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, s.url, store.Options{ChdbLib: s.chdbLib, Logger: log})
	if err != nil {
		return nil, err
	}
	cfg, err := s.migrationConfig()
	if err != nil {
		st.Close()
		return nil, err
	}
	res, err := migrations.Apply(ctx, st, cfg)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	for _, m := range res.Applied {
		log.Info("applied migration", "version", m.Version, "name", m.Name)
	}
	return st, nil
}

// migrationConfig is the schema variant the flags and the store URL ask
// for: cluster mode when the URL says ?cluster=NAME (or --on-cluster NAME),
// with the tables in the URL's database (or --database).
func (s *storeFlags) migrationConfig() (migrations.Config, error) {
	cfg := migrations.Config{Cluster: s.onCluster, Database: s.database, RetentionDays: s.retention}
	spec, err := store.ParseCluster(s.url)
	if err != nil {
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case spec.Name == "":
	case cfg.Cluster == "":
		cfg.Cluster = spec.Name
	case cfg.Cluster != spec.Name:
		return cfg, fmt.Errorf("%w: --on-cluster %q and the store URL's cluster=%q disagree", errUsage, cfg.Cluster, spec.Name)
	}
	if cfg.Cluster != "" && cfg.Database == "" {
		cfg.Database = spec.Database
	}
	return cfg, nil
}
