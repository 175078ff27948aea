package main

import (
	"errors"
	"testing"

	"github.com/auditlens/auditlens/migrations"
)

// TestStoreFlagsMigrationConfig: ?cluster=NAME in a clickhouse:// URL
// selects cluster mode for every command that opens a store (serve,
// import, migrate, …), with the URL's database.
func TestStoreFlagsMigrationConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		sf   storeFlags
		want migrations.Config
		err  bool
	}{
		{name: "embedded", sf: storeFlags{url: "chdb://./data", retention: 7}, want: migrations.Config{RetentionDays: 7}},
		{name: "server", sf: storeFlags{url: "clickhouse://h:9000/audit"}, want: migrations.Config{}},
		{name: "cluster in URL", sf: storeFlags{url: "clickhouse://h:9000/audit?cluster=prod"},
			want: migrations.Config{Cluster: "prod", Database: "audit"}},
		{name: "flag", sf: storeFlags{url: "clickhouse://h:9000/audit", onCluster: "prod"},
			want: migrations.Config{Cluster: "prod", Database: "audit"}},
		{name: "flag and URL agree", sf: storeFlags{url: "clickhouse://h:9000/audit?cluster=prod", onCluster: "prod", database: "other"},
			want: migrations.Config{Cluster: "prod", Database: "other"}},
		{name: "flag and URL disagree", sf: storeFlags{url: "clickhouse://h:9000/audit?cluster=prod", onCluster: "staging"}, err: true},
		{name: "empty cluster", sf: storeFlags{url: "clickhouse://h:9000/audit?cluster="}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sf.migrationConfig()
			if tc.err {
				if !errors.Is(err, errUsage) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
