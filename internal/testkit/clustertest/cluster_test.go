package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/scenariotest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/query"
	"github.com/auditlens/auditlens/report"
	"github.com/auditlens/auditlens/store"
)

// TestClusterShape imports scenarios through the Distributed tables and
// holds the detectors to what the single-node tests expect of them
// (detect/watchloop/scenario_test.go), then exercises the other readers.
func TestClusterShape(t *testing.T) {
	st := storetest.OpenCluster(t)
	ctx := context.Background()

	t.Run("tables", func(t *testing.T) {
		engines := map[string]string{}
		err := store.Each(ctx, st, "SELECT name, engine FROM system.tables WHERE database = currentDatabase()", nil, func(r struct{ Name, Engine string }) error {
			engines[r.Name] = r.Engine
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range []string{"audit_events", "findings", "reports", "detector_state"} {
			if engines[tb] != "Distributed" || engines[tb+"_local"] != "ReplacingMergeTree" {
				t.Errorf("%s is %q over %q, want Distributed over ReplacingMergeTree", tb, engines[tb], engines[tb+"_local"])
			}
		}
		if engines["audit_event_counts"] != "Distributed" || engines["audit_event_counts_local"] != "SummingMergeTree" || engines["audit_event_counts_mv"] != "MaterializedView" {
			t.Errorf("the rollup is %q over %q fed by %q, want Distributed over SummingMergeTree fed by a MaterializedView",
				engines["audit_event_counts"], engines["audit_event_counts_local"], engines["audit_event_counts_mv"])
		}
	})

	// A plain IN subquery over a Distributed table is refused, as on a
	// real cluster (distributed_product_mode = 'deny'): this harness
	// catches a detector that forgets GLOBAL.
	t.Run("plain IN is refused", func(t *testing.T) {
		err := store.Each(ctx, st, "SELECT count() FROM audit_events WHERE audit_id IN (SELECT audit_id FROM audit_events)", nil,
			func(uint64) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED") {
			t.Fatalf("got %v, want DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED", err)
		}
		err = store.Each(ctx, st, "SELECT count() FROM audit_events WHERE audit_id GLOBAL IN (SELECT audit_id FROM audit_events)", nil,
			func(uint64) error { return nil })
		if err != nil {
			t.Fatalf("GLOBAL IN: %v", err)
		}
	})

	cases := []struct {
		name               string
		loops, regressions int
		loopObjects        []string
	}{
		{name: "seed-incident", loops: 1, regressions: 4, loopObjects: []string{"default/api", "payments/billing", "web/frontend"}},
		{name: "incident-with-user-recreate", loops: 1, regressions: 4, loopObjects: []string{"default/api", "payments/billing", "web/frontend"}},
		{name: "user-recreates-service"},
		{name: "rv-regression", regressions: 1},
	}
	repo := detect.NewRepository(st, nil)
	var all []detect.Finding
	var first, last time.Time
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc, ok := scenario.ByName(tc.name)
			if !ok {
				t.Fatalf("no scenario %s", tc.name)
			}
			tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
			cluster := "cluster-" + tc.name
			stats := importTrace(t, st, tr, cluster)
			if first.IsZero() || stats.First.Before(first) {
				first = stats.First
			}
			if stats.Last.After(last) {
				last = stats.Last
			}
			w := detect.Window{Since: stats.First, Until: stats.Last.Add(time.Microsecond), Clusters: []string{cluster}}
			loops := evaluate(t, watchloop.New(watchloop.Config{}), st, w)
			regs := evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w)
			if len(loops) != tc.loops || len(regs) != tc.regressions {
				t.Fatalf("%d loops and %d regressions, want %d and %d", len(loops), len(regs), tc.loops, tc.regressions)
			}
			if tc.loops == 1 {
				var got []string
				for _, o := range loops[0].Objects {
					got = append(got, o.Namespace+"/"+o.Name)
				}
				if strings.Join(got, " ") != strings.Join(tc.loopObjects, " ") {
					t.Errorf("loop objects %v, want %v", got, tc.loopObjects)
				}
			}
			all = append(all, loops...)
			all = append(all, regs...)
		})
	}
	if len(all) == 0 {
		t.Fatal("no findings to go on with")
	}

	// The rollup, fed by the view on the local events table and read
	// through its Distributed table, counts what the events count.
	t.Run("histogram from the rollup", func(t *testing.T) {
		f := query.Filter{Since: first.Add(7 * time.Second), Until: last.Add(-3 * time.Second)}
		for _, by := range []string{"verb", "user", "cluster"} {
			opt := query.HistogramOptions{By: by, Buckets: min(1000, max(1, int(f.Until.Sub(f.Since)/(30*time.Second)))), Top: 50}
			h, err := query.HistogramEvents(ctx, st, f, opt)
			if err != nil {
				t.Fatal(err)
			}
			opt.FromEvents = true
			want, err := query.HistogramEvents(ctx, st, f, opt)
			if err != nil {
				t.Fatal(err)
			}
			if h.Source != query.SourceRollup || want.Total == 0 {
				t.Fatalf("by %s: source %s, %d events", by, h.Source, want.Total)
			}
			h.Source = want.Source
			g, _ := json.Marshal(h)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Errorf("by %s: from the rollup\n%s\nfrom the events\n%s", by, g, w)
			}
			vals, err := query.Values(ctx, st, query.Filter{Since: f.Since, Until: f.Until, Limit: 50}, by)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if i >= len(want.Series) || want.Series[i].Key != v.Value || want.Series[i].Total != v.Count {
					t.Errorf("values of %s: %v, histogram series %v", by, vals, want.Series)
					break
				}
			}
		}
	})

	// Copies of stored rows, inserted past the writer's dedup (two
	// writers racing): FINAL through the Distributed table collapses them.
	t.Run("FINAL", func(t *testing.T) {
		count := func(final string) int64 {
			var n int64
			err := store.Each(ctx, st, "SELECT count() AS n FROM audit_events"+final+" WHERE cluster = 'cluster-seed-incident'", nil, func(c int64) error {
				n = c
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := count(" FINAL")
		// The events as readers see them (rebuilt from the columns and
		// residuals), decoded again into rows.
		var listed bytes.Buffer
		if _, err := query.Events(ctx, st, query.Filter{Cluster: []string{"cluster-seed-incident"}, Limit: 50}, nil, query.Limits{}, &listed); err != nil {
			t.Fatal(err)
		}
		var rows []store.Row
		for line := range bytes.Lines(listed.Bytes()) {
			copied, err := ingest.DecodeEvent("cluster-seed-incident", line)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, copied)
		}
		if len(rows) == 0 {
			t.Fatal("no rows to copy")
		}
		if err := st.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if after := count(" FINAL"); after != before {
			t.Errorf("FINAL: %d rows after inserting copies, %d before", after, before)
		}
		if raw := count(""); raw < before+int64(len(rows)) {
			t.Errorf("without FINAL %d rows: the copies were not inserted", raw)
		}
	})

	t.Run("findings", func(t *testing.T) {
		if err := repo.Upsert(ctx, all); err != nil {
			t.Fatal(err)
		}
		// A second version of each: readers take the newest.
		if err := repo.Upsert(ctx, all); err != nil {
			t.Fatal(err)
		}
		listed, err := repo.List(ctx, detect.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != len(all) {
			t.Errorf("listed %d findings, stored %d", len(listed), len(all))
		}
		ids := []string{all[0].ID}
		got, err := repo.GetMany(ctx, ids)
		if err != nil || len(got) != 1 {
			t.Errorf("GetMany: %v %v", got, err)
		}
		// By the objects column, through the Distributed table.
		if len(all[0].Objects) == 0 {
			t.Fatalf("finding %s names no objects to list it by", all[0].ID)
		}
		byObject, err := repo.List(ctx, detect.ListFilter{Objects: all[0].Objects[:1]})
		if err != nil || !slices.ContainsFunc(byObject, func(f detect.Finding) bool { return f.ID == all[0].ID }) {
			t.Errorf("listed by its object %v: %d findings, %v; want %s among them", all[0].Objects[0], len(byObject), err, all[0].ID)
		}
	})

	t.Run("events", func(t *testing.T) {
		var buf bytes.Buffer
		stats, err := query.Events(ctx, st, query.Filter{Cluster: []string{"cluster-seed-incident"}, Verb: []string{"delete"}, Limit: 1000},
			nil, query.Limits{}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Emitted == 0 || stats.Emitted != strings.Count(buf.String(), "\n") {
			t.Errorf("stats %+v for %d lines", stats, strings.Count(buf.String(), "\n"))
		}
	})

	// An export reads the Distributed table in time windows: NDJSON is the
	// events the listing returns, Parquet one row per event.
	t.Run("export", func(t *testing.T) {
		f := query.Filter{Cluster: []string{"cluster-seed-incident"}}
		var listed bytes.Buffer
		f.Limit = query.MaxLimit // one query, the reference
		if ls, err := query.Events(ctx, st, f, nil, query.Limits{}, &listed); err != nil || ls.Truncated {
			t.Fatalf("listing: %+v %v", ls, err)
		}
		var nd bytes.Buffer
		es, err := query.Export(ctx, st, f, query.NDJSON, &nd, nil)
		if err != nil {
			t.Fatal(err)
		}
		if es.Events == 0 || nd.String() != listed.String() {
			t.Errorf("export wrote %d events; differs from the listing of %d lines: %v", es.Events, strings.Count(listed.String(), "\n"), nd.String() != listed.String())
		}
		var pq bytes.Buffer
		if _, err := query.Export(ctx, st, f, query.Parquet, &pq, nil); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		var n struct{ N int64 }
		if err := store.Each(ctx, st, "SELECT count() AS n FROM file({f:String}, Parquet)", store.Params{"f": path}, func(c int64) error {
			n.N = c
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n.N != es.Events {
			t.Errorf("the Parquet file holds %d rows, want %d", n.N, es.Events)
		}
	})

	t.Run("report", func(t *testing.T) {
		end := last.Add(time.Minute).Truncate(time.Minute)
		r, err := report.Build(ctx, st, repo, report.Config{End: end, Window: end.Sub(first) + time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Volume) == 0 || len(r.Feed) != len(cases) {
			t.Errorf("report volume %d buckets, feed of %d clusters, want %d", len(r.Volume), len(r.Feed), len(cases))
		}
		if err := report.Save(ctx, st, r); err != nil {
			t.Fatal(err)
		}
		got, err := report.Get(ctx, st, r.ID)
		if err != nil || got.ID != r.ID {
			t.Errorf("reading the report back: %v", err)
		}
		// By the clusters column, through the Distributed table.
		r.ID, r.Name, r.Clusters = r.ID+"-scoped", r.Name+"-scoped", []string{"cluster-seed-incident"}
		if err := report.Save(ctx, st, r); err != nil {
			t.Fatal(err)
		}
		within, err := report.List(ctx, st, report.ListFilter{Within: r.Clusters})
		if err != nil || len(within) != 1 || within[0].ID != r.ID {
			t.Errorf("reports within %v: %+v, %v; want only %s", r.Clusters, within, err, r.ID)
		}
	})
}

// importTrace imports tr as cluster (see scenariotest.ImportTrace).
func importTrace(tb testing.TB, st store.Store, tr scenario.Trace, cluster string) ingest.ImportStats {
	tb.Helper()
	return scenariotest.ImportTrace(tb, st, tr, cluster)
}

func evaluate(tb testing.TB, d detect.Detector, q detect.Querier, w detect.Window) []detect.Finding {
	tb.Helper()
	fs, err := d.Evaluate(context.Background(), q, w)
	if err != nil {
		tb.Fatalf("%s over %s: %v", d.Name(), w, err)
	}
	detect.SortFindings(fs)
	return fs
}

// TestDeployExampleConfig loads the example cluster's remote_servers and
// one node's macros (deploy/clickhouse) into the engine and reads them
// back: 2 shards of 2 replicas, and the macros the migrator's Replicated
// tables use.
func TestDeployExampleConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	var body strings.Builder
	for _, f := range []string{"config.d/remote_servers.xml", "macros/ch-s2-r1.xml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "clickhouse", f))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		start, end := strings.Index(s, "<clickhouse>"), strings.LastIndex(s, "</clickhouse>")
		if start < 0 || end < start {
			t.Fatalf("%s: no <clickhouse> element", f)
		}
		body.WriteString(s[start+len("<clickhouse>") : end])
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(cfg, []byte("<clickhouse>"+body.String()+"</clickhouse>\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.OpenEmbedded(ctx, filepath.Join(dir, "data"), store.EmbeddedOptions{ConfigFile: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := storetest.JSONRows(t, st, "SELECT cluster, shard_num, replica_num, host_name, port FROM system.clusters ORDER BY ALL", nil)
	want := []string{
		`{"cluster":"auditlens","shard_num":1,"replica_num":1,"host_name":"ch-s1-r1","port":9000}`,
		`{"cluster":"auditlens","shard_num":1,"replica_num":2,"host_name":"ch-s1-r2","port":9000}`,
		`{"cluster":"auditlens","shard_num":2,"replica_num":1,"host_name":"ch-s2-r1","port":9000}`,
		`{"cluster":"auditlens","shard_num":2,"replica_num":2,"host_name":"ch-s2-r2","port":9000}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("system.clusters:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var path string
	err = store.Each(ctx, st, "SELECT getMacro('shard') || '/' || getMacro('replica') AS p", nil, func(p string) error {
		path = p
		return nil
	})
	if err != nil || path != "02/ch-s2-r1" {
		t.Errorf("macros: %q, %v", path, err)
	}
}
