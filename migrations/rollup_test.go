package migrations

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
)

// rollupTestRows are n events over ten minutes from t0 in two clusters.
func rollupTestRows(t0 time.Time, prefix string, n int) []store.Row {
	verbs := []string{"get", "list", "watch", "create"}
	users := []string{"alice", "bob", "system:node:n1"}
	rows := make([]store.Row, n)
	for i := range rows {
		id := fmt.Sprintf("%s%05d", prefix, i)
		rows[i] = store.Row{
			Cluster: []string{"a", "b"}[i%2], APIServer: []string{"", "api-1", "api-2"}[i%3], AuditID: id,
			Stage: []string{"ResponseComplete", "RequestReceived"}[i%7/6], Level: "Metadata", Verb: verbs[i%4],
			Time: t0.Add(time.Duration(i) * 10 * time.Minute / time.Duration(n)), User: users[i%3], UserAgent: users[i%3] + "/v1",
			Resource: []string{"pods", "nodes"}[i%5/4], Namespace: []string{"", "web"}[i%2], Name: "x", Code: []int32{200, 404}[i%11/10],
			Raw: fmt.Appendf(nil, `{"auditID":%q}`, id),
		}
	}
	return rows
}

// rollupDiff returns how the rollup's counts differ from audit_events read
// with FINAL, per slot and combination of values: "" when they are equal.
func rollupDiff(t *testing.T, st store.Store) string {
	t.Helper()
	const keys = "cluster, slot, apiserver, verb, resource, namespace, user, user_agent, code, stage, level"
	read := func(sql string) map[string]string {
		out := map[string]string{}
		err := store.Each(context.Background(), st, "SELECT toString(tuple("+keys+")) AS k, n FROM ("+sql+")", nil, func(r struct {
			K string
			N uint64
		}) error {
			out[r.K] = strconv.FormatUint(r.N, 10)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rollup := read("SELECT " + keys + ", sum(n) AS n FROM audit_event_counts GROUP BY " + keys)
	final := read("SELECT cluster, toDateTime64(toStartOfInterval(ts, INTERVAL 30 SECOND), 0, 'UTC') AS slot, " +
		"apiserver, verb, resource, namespace, user, user_agent, code, stage, level, count() AS n FROM audit_events FINAL GROUP BY " + keys)
	if len(final) == 0 {
		t.Fatal("no events")
	}
	var diff []string
	for k, n := range final {
		if rollup[k] != n {
			diff = append(diff, fmt.Sprintf("%s: rollup %q, FINAL %s", k, rollup[k], n))
		}
	}
	for k, n := range rollup {
		if _, ok := final[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: rollup %s, no events", k, n))
		}
	}
	return strings.Join(diff, "\n")
}

// TestRollupBackfill: migration 0006 on a store that already holds events
// (some stored twice, not yet merged) counts each of them once, the view
// counts what is inserted after it, and running the migration again, as
// after a crash before its version was recorded, rebuilds the counts
// rather than adding them a second time.
func TestRollupBackfill(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A store from before 0006: its tables without the rollup.
	if _, err := Apply(ctx, st, Config{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"DROP VIEW audit_event_counts_mv", "DROP TABLE audit_event_counts", "TRUNCATE TABLE schema_migrations"} {
		if err := st.Exec(ctx, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2024, 6, 1, 10, 0, 7, 0, time.UTC)
	old := rollupTestRows(t0, "old", 2000)
	if err := st.Insert(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, old[:500]); err != nil { // copies FINAL drops
		t.Fatal(err)
	}

	res, err := Apply(ctx, st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Applied, func(m Migration) bool { return m.Name == "rollups" }) {
		t.Fatalf("applied %+v", res.Applied)
	}
	if d := rollupDiff(t, st); d != "" {
		t.Fatalf("after the backfill:\n%s", d)
	}

	if err := st.Insert(ctx, rollupTestRows(t0.Add(5*time.Minute), "new", 1000)); err != nil {
		t.Fatal(err)
	}
	if d := rollupDiff(t, st); d != "" {
		t.Fatalf("after new events:\n%s", d)
	}

	if err := st.Exec(ctx, "TRUNCATE TABLE schema_migrations", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, st, Config{}); err != nil {
		t.Fatal(err)
	}
	if d := rollupDiff(t, st); d != "" {
		t.Fatalf("after running the migration again:\n%s", d)
	}
}
