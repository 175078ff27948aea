package store

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestParseCluster(t *testing.T) {
	for _, tc := range []struct {
		url     string
		want    ClusterSpec
		wantErr bool
	}{
		{url: "chdb:///var/lib/auditlens"},
		{url: "chdb://./data?cluster=x", want: ClusterSpec{}}, // not a server URL: no cluster mode
		{url: "clickhouse://h:9000", want: ClusterSpec{}},
		{url: "clickhouse://h:9000/audit", want: ClusterSpec{Database: "audit"}},
		{url: "clickhouse://u:p@h1:9000,h2:9000/audit?cluster=prod&dial_timeout=5s", want: ClusterSpec{Name: "prod", Database: "audit"}},
		{url: "CLICKHOUSE://h/audit?cluster=a%20b", want: ClusterSpec{Name: "a b", Database: "audit"}},
		{url: "clickhouse://h/audit?cluster=", wantErr: true},
		{url: "clickhouse://h/audit?cluster=a&cluster=b", wantErr: true},
		{url: "clickhouse://u:se%cret@h/audit?cluster=a", wantErr: true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := ParseCluster(tc.url)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if strings.Contains(err.Error(), "se%cret") {
					t.Errorf("the error repeats the password: %v", err)
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWithoutCluster: the driver would send ?cluster= to the server as a
// setting, which the server rejects; the engine strips it and keeps the
// rest of the URL.
func TestWithoutCluster(t *testing.T) {
	in := "clickhouse://u:p%40ss@h1:9000,h2:9000/audit?cluster=prod&dial_timeout=5s&max_memory_usage=1000"
	out, err := withoutCluster(in)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := clickhouse.ParseDSN(out)
	if err != nil {
		t.Fatalf("parsing %s: %v", out, err)
	}
	if _, ok := opts.Settings["cluster"]; ok {
		t.Errorf("cluster is still a setting: %v", opts.Settings)
	}
	if fmt.Sprint(opts.Settings["max_memory_usage"]) != "1000" || opts.DialTimeout.String() != "5s" {
		t.Errorf("lost the other parameters: %+v %v", opts.Settings, opts.DialTimeout)
	}
	if opts.Auth.Username != "u" || opts.Auth.Password != "p@ss" || opts.Auth.Database != "audit" || len(opts.Addr) != 2 {
		t.Errorf("lost the address or credentials: %+v %v", opts.Auth, opts.Addr)
	}
	same := "clickhouse://h:9000/audit?dial_timeout=5s"
	if got, _ := withoutCluster(same); got != same {
		t.Errorf("a URL without cluster changed: %s", got)
	}
	if _, err := url.Parse(out); err != nil {
		t.Error(err)
	}
}

func TestInsertSettings(t *testing.T) {
	if got := insertSettings(nil); got[foregroundInsert] != 1 {
		t.Errorf("default: %v, want %s=1", got, foregroundInsert)
	}
	for _, s := range []clickhouse.Settings{{foregroundInsert: "0"}, {"insert_distributed_sync": "0"}} {
		if got := insertSettings(s); len(got) != 0 {
			t.Errorf("the URL set %v, Insert adds %v", s, got)
		}
	}
}
