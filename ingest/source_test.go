package ingest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// countBySource returns the stored events per "cluster/apiserver".
func countBySource(t *testing.T, st store.Store) map[string]int {
	t.Helper()
	got := map[string]int{}
	err := store.Each(context.Background(), st, "SELECT cluster, apiserver, toUInt32(count()) AS n FROM audit_events FINAL GROUP BY cluster, apiserver", nil,
		func(r struct {
			Cluster, APIServer string
			N                  int
		}) error {
			got[r.Cluster+"/"+r.APIServer] = r.N
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAPIServerThroughSpoolAndImport: the apiserver a webhook request
// names reaches the store whether the writer takes the spool's decoded
// rows or decodes the record from disk, and import tags files with it.
func TestAPIServerThroughSpoolAndImport(t *testing.T) {
	st := storetest.Open(t)
	// Room for the first batch's decoded rows only: the others are read
	// back from disk.
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), CacheRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	h := NewWebhook(sp, WebhookConfig{Tokens: map[string]Source{
		"t1": {"prod", "apiserver-1"},
		"t2": {Cluster: "prod"},
	}})
	g := auditgen.New(11, time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC))
	for _, p := range []struct{ path, token string }{
		{"/audit", "t1"},                   // cached rows
		{"/audit/prod", "t1"},              // from disk
		{"/audit/prod/apiserver-2", "t2"},  // the path names the apiserver
		{"/audit/prod", "t2"},              // no apiserver named
		{"/audit/prod/apiserver-1", "t1"},  // the token's own, repeated
		{"/audit/prod/apiserver-2", "bad"}, // refused
	} {
		want := 200
		if p.token == "bad" {
			want = 401
		}
		if code, resp := post(h, p.path, string(g.EventListBody(10)), "Authorization", "Bearer "+p.token); code != want {
			t.Fatalf("%s with token %s: %d %+v, want %d", p.path, p.token, code, resp, want)
		}
	}
	recs := readAll(t, sp.Reader())
	if len(recs) != 5 || recs[0].Rows == nil || recs[0].Rows[0].APIServer != "apiserver-1" || recs[1].Rows != nil || recs[1].APIServer != "apiserver-1" || recs[3].APIServer != "" {
		t.Fatalf("spool records: %d, first cached %v, second cached %v, apiservers %q %q",
			len(recs), recs[0].Rows != nil, recs[1].Rows != nil, recs[1].APIServer, recs[3].APIServer)
	}
	// The reader above took the cached rows: the writer decodes every
	// record from disk. A cancelled context: it stores what is durable and
	// stops.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewWriter(st, WriterConfig{}).RunSpool(ctx, sp, 30*time.Second); err != nil {
		t.Fatalf("RunSpool: %v", err)
	}
	want := map[string]int{"prod/apiserver-1": 30, "prod/apiserver-2": 10, "prod/": 10}
	if got := countBySource(t, st); !equalCounts(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}

	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WriteLog(f, 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files := []string{filepath.Join(dir, "audit.log")}
	if _, err := Import(context.Background(), NewWriter(st, WriterConfig{}), files, ImportConfig{Cluster: "imp", APIServer: "apiserver-3"}); err != nil {
		t.Fatal(err)
	}
	want["imp/apiserver-3"] = 20
	if got := countBySource(t, st); !equalCounts(got, want) {
		t.Fatalf("after import: stored %v, want %v", got, want)
	}
	// The same file again without the apiserver's name: the same events,
	// nothing new (the key is cluster, auditID, stage).
	stats, err := Import(context.Background(), NewWriter(st, WriterConfig{}), files, ImportConfig{Cluster: "imp"})
	if err != nil || stats.Stored != 0 || stats.Duplicates != 20 {
		t.Fatalf("re-import: %+v, %v", stats, err)
	}
	if _, err := Import(context.Background(), nil, files, ImportConfig{Cluster: "imp", APIServer: "a/b"}); err == nil || !strings.Contains(err.Error(), "apiserver name") {
		t.Fatalf("import with apiserver a/b: %v", err)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
