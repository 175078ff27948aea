package query

// Events on the real embedded engine (chDB): the schema from package
// migrations, rows inserted through store.Store, and the SQL of Filter.SQL
// with its parameters. The engine is found as store.Open finds it
// (CHDB_LIB_PATH, or the cache `make chdb` fills); without it the test
// fails with the error that says how to provide it, as the store's own
// tests do. The engine runs on one data path per process, so everything
// here shares one.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

func TestEventsOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)

	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	const hostileName = `'; DROP TABLE audit_events; --`
	const hostileUser = `o'brien\`
	const hostileAgent = "evil\x00agent\ttab\nnewline'\\N"
	const hostileNamespace = `ns\'x`
	// Raw events are stored as received: odd spacing and escapes must come
	// back byte for byte.
	raw := map[string]string{
		"get":     `{"auditID":"a1", "verb":"get",  "objectRef":{"resource":"pods","name":"web-1"},"user":{"username":"alice"},"responseStatus":{"code":200},"note":"caf\u00e9"}`,
		"watchRR": `{"auditID":"a2","stage":"RequestReceived","verb":"watch","objectRef":{"resource":"endpoints","name":"kube-dns"}}`,
		"watch":   `{"auditID":"a2","stage":"ResponseComplete","verb":"watch","objectRef":{"resource":"endpoints","name":"kube-dns"},"responseStatus":{"code":200}}`,
		"delete":  `{"auditID":"a1","verb":"delete","objectRef":{"resource":"namespaces","name":"old"},"responseStatus":{"code":404}}`,
		"hostile": `{"auditID":"a5","verb":"create","objectRef":{"name":"'; DROP TABLE audit_events; --","namespace":"ns\\'x"},"user":{"username":"o'brien\\"},"userAgent":"evil\u0000agent\ttab\nnewline'\\N","responseStatus":{"code":201}}`,
	}
	rows := []store.Row{
		{Cluster: "prod", AuditID: "a1", Stage: "ResponseComplete", Level: "Metadata", Verb: "get",
			Time: t0.Add(1 * time.Second), User: "alice", UserAgent: "kubectl/v1.30.0 (linux/amd64)",
			Resource: "pods", Namespace: "default", Name: "web-1", Code: 200, Raw: []byte(raw["get"])},
		{Cluster: "prod", AuditID: "a2", Stage: "RequestReceived", Level: "Request", Verb: "watch",
			Time: t0.Add(2 * time.Second), User: "system:serviceaccount:kube-system:endpoint-controller",
			UserAgent: "kube-controller-manager/v1.31.0", Resource: "endpoints", Namespace: "kube-system",
			Name: "kube-dns", Raw: []byte(raw["watchRR"])},
		{Cluster: "prod", AuditID: "a2", Stage: "ResponseComplete", Level: "Request", Verb: "watch",
			Time: t0.Add(2*time.Second + time.Millisecond), User: "system:serviceaccount:kube-system:endpoint-controller",
			UserAgent: "kube-controller-manager/v1.31.0", Resource: "endpoints", Namespace: "kube-system",
			Name: "kube-dns", Code: 200, Raw: []byte(raw["watch"])},
		// The same audit ID in another cluster is another event.
		{Cluster: "staging", AuditID: "a1", Stage: "ResponseComplete", Level: "Metadata", Verb: "delete",
			Time: t0.Add(3 * time.Second), User: "alice", UserAgent: "kubectl/v1.29.1", Resource: "namespaces",
			Name: "old", Code: 404, Raw: []byte(raw["delete"])},
		{Cluster: "prod", AuditID: "a5", Stage: "ResponseComplete", Level: "Metadata", Verb: "create",
			Time: t0.Add(4 * time.Second), User: hostileUser, UserAgent: hostileAgent, Namespace: hostileNamespace,
			Name: hostileName, Code: 201, Raw: []byte(raw["hostile"])},
	}
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatalf("inserting: %v", err)
	}
	// A retried webhook batch: the same (cluster, audit ID, stage) again, in
	// another part. Events must return it once.
	if err := st.Insert(ctx, []store.Row{rows[2], rows[0]}); err != nil {
		t.Fatalf("inserting again: %v", err)
	}

	lines := func(names ...string) string {
		var b strings.Builder
		for _, n := range names {
			b.WriteString(raw[n])
			b.WriteByte('\n')
		}
		return b.String()
	}
	tests := []struct {
		name      string
		f         Filter
		jq        string
		want      string
		truncated bool
	}{
		{name: "everything, oldest first", want: lines("get", "watchRR", "watch", "delete", "hostile")},
		{name: "newest first", f: Filter{Order: Desc}, want: lines("hostile", "delete", "watch", "watchRR", "get")},
		{name: "limit", f: Filter{Limit: 2}, want: lines("get", "watchRR"), truncated: true},
		{name: "time range", f: Filter{Since: t0.Add(2 * time.Second), Until: t0.Add(3 * time.Second)}, want: lines("watchRR", "watch")},
		{name: "until is exclusive", f: Filter{Until: t0.Add(2 * time.Second)}, want: lines("get")},
		{name: "since rounds up to the microsecond", f: Filter{Since: t0.Add(2*time.Second + 1)}, want: lines("watch", "delete", "hostile")},
		{name: "verb", f: Filter{Verb: []string{"watch"}}, want: lines("watchRR", "watch")},
		{name: "verb and stage", f: Filter{Verb: []string{"watch", "get"}, Stage: []string{"ResponseComplete"}}, want: lines("get", "watch")},
		{name: "cluster", f: Filter{Cluster: []string{"staging"}}, want: lines("delete")},
		{name: "resource and namespace", f: Filter{Resource: []string{"endpoints", "pods"}, Namespace: []string{"default"}}, want: lines("get")},
		{name: "cluster-scoped", f: Filter{Namespace: []string{""}}, want: lines("delete")},
		{name: "user prefix", f: Filter{User: []string{"system:serviceaccount:*"}}, want: lines("watchRR", "watch")},
		{name: "user exact and prefix", f: Filter{User: []string{"alice", "system:serviceaccount:kube-system:*"}, Cluster: []string{"prod"}}, want: lines("get", "watchRR", "watch")},
		{name: "user agent prefix", f: Filter{UserAgent: []string{"kubectl/*"}}, want: lines("get", "delete")},
		{name: "user agent prefix is not a substring", f: Filter{UserAgent: []string{"v1.30*"}}, want: ""},
		{name: "level", f: Filter{Level: []string{"Request"}}, want: lines("watchRR", "watch")},
		{name: "code 0 is no response", f: Filter{Code: []int32{0}}, want: lines("watchRR")},
		{name: "codes", f: Filter{Code: []int32{404, 201}}, want: lines("delete", "hostile")},
		{name: "hostile name", f: Filter{Name: []string{hostileName}}, want: lines("hostile")},
		{name: "hostile user", f: Filter{User: []string{hostileUser}}, want: lines("hostile")},
		{name: "hostile user as a prefix", f: Filter{User: []string{`o'b*`}}, want: lines("hostile")},
		{name: "hostile user agent", f: Filter{UserAgent: []string{hostileAgent}}, want: lines("hostile")},
		{name: "hostile namespace", f: Filter{Namespace: []string{hostileNamespace}}, want: lines("hostile")},
		{name: "near misses of hostile values", f: Filter{Name: []string{`'; DROP TABLE audit_events; -`, `\'; DROP TABLE audit_events; --`}, Namespace: []string{`ns'x`, `ns\\'x`}}, want: ""},
		{name: "jq select", jq: `select(.verb == "watch") | .objectRef.name`, want: "\"kube-dns\"\n\"kube-dns\"\n"},
		{name: "jq with filter", f: Filter{Cluster: []string{"prod"}, Stage: []string{"ResponseComplete"}},
			jq:   `{id: .auditID, code: .responseStatus.code}`,
			want: `{"code":200,"id":"a1"}` + "\n" + `{"code":200,"id":"a2"}` + "\n" + `{"code":201,"id":"a5"}` + "\n"},
		{name: "jq over hostile strings", f: Filter{Name: []string{hostileName}}, jq: `.user.username, .userAgent`,
			want: `"o'brien\\"` + "\n" + `"evil\u0000agent\ttab\nnewline'\\N"` + "\n"},
		{name: "jq keeps unicode", f: Filter{Verb: []string{"get"}}, jq: `.note`, want: "\"café\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var jq *JQ
			if tt.jq != "" {
				jq = mustJQ(t, tt.jq)
			}
			var w bytes.Buffer
			stats, err := Events(ctx, st, tt.f, jq, Limits{}, &w)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			if w.String() != tt.want {
				t.Errorf("wrote\n%s\nwant\n%s", w.String(), tt.want)
			}
			if stats.Truncated != tt.truncated {
				t.Errorf("Truncated = %v, want %v (%+v)", stats.Truncated, tt.truncated, stats)
			}
			if stats.Emitted != strings.Count(tt.want, "\n") {
				t.Errorf("Emitted = %d for %d lines", stats.Emitted, strings.Count(tt.want, "\n"))
			}
		})
	}

	// The table is still there and whole after all of the above.
	var w bytes.Buffer
	if stats, err := Events(ctx, st, Filter{}, nil, Limits{}, &w); err != nil || stats.Matched != len(rows) {
		t.Fatalf("after the queries: %+v, %v; want %d events", stats, err, len(rows))
	}
}

// TestEventsAllOnEmbeddedEngine: All streams every matching event past
// any limit (an export), where the same filter without it stops at the
// limit and says more match.
func TestEventsAllOnEmbeddedEngine(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const n = DefaultLimit + 2*dupSlack + 37
	rows := make([]store.Row, n)
	for i := range rows {
		id := "all-" + strconv.Itoa(i)
		rows[i] = store.Row{Cluster: "export", AuditID: id, Stage: "ResponseComplete", Verb: "get", Time: t0.Add(time.Duration(i) * time.Millisecond),
			Resource: "pods", Code: 200, Raw: []byte(`{"auditID":"` + id + `"}`)}
	}
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	f := Filter{Cluster: []string{"export"}, Since: t0, Until: t0.Add(time.Hour)}
	var limited bytes.Buffer
	stats, err := Events(ctx, st, f, nil, Limits{}, &limited)
	if err != nil || stats.Matched != DefaultLimit || !stats.Truncated {
		t.Fatalf("without All: %+v, %v; want %d and truncated", stats, err, DefaultLimit)
	}
	f.All = true
	if sql, _ := f.SQL("raw"); strings.Contains(sql, "LIMIT") {
		t.Errorf("All still limits: %s", sql)
	}
	var all bytes.Buffer
	stats, err = Events(ctx, st, f, nil, Limits{}, &all)
	if err != nil || stats.Matched != n || stats.Truncated {
		t.Fatalf("with All: %+v, %v; want all %d", stats, err, n)
	}
	lines := strings.Split(strings.TrimSuffix(all.String(), "\n"), "\n")
	if len(lines) != n || lines[0] != `{"auditID":"all-0"}` || lines[n-1] != `{"auditID":"all-`+strconv.Itoa(n-1)+`"}` {
		t.Errorf("with All: %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

// TestEventsManyCopies: a page whose window holds more stored copies of
// one event than dupSlack is still full, in order, and says more match;
// the copies come back once. Merges are stopped so the copies stay.
func TestEventsManyCopies(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	if err := st.Exec(ctx, "SYSTEM STOP MERGES audit_events", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Exec(context.Background(), "SYSTEM START MERGES audit_events", nil) })
	t0 := time.Date(2024, 6, 2, 12, 0, 0, 0, time.UTC)
	// Event 10 is in the oldest page of 20, event 39 in the newest.
	const n, copies, limit = 50, dupSlack + 5, 20
	rows := make([]store.Row, n)
	for i := range rows {
		id := fmt.Sprintf("copy-%02d", i)
		rows[i] = store.Row{Cluster: "copies", AuditID: id, Stage: "ResponseComplete", Verb: "get", Time: t0.Add(time.Duration(i) * time.Second),
			Resource: "pods", Code: 200, Raw: []byte(`{"auditID":"` + id + `"}`)}
	}
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// One insert a copy of each: the engine collapses copies inside one
	// insert.
	for range copies {
		if err := st.Insert(ctx, []store.Row{rows[10], rows[39]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, order := range []Order{Asc, Desc} {
		f := Filter{Cluster: []string{"copies"}, Since: t0, Until: t0.Add(time.Hour), Limit: limit, Order: order}
		var buf bytes.Buffer
		stats, err := Events(ctx, st, f, nil, Limits{}, &buf)
		if err != nil || stats.Matched != limit || !stats.Truncated {
			t.Fatalf("%s: %+v, %v; want %d events and truncated", order, stats, err, limit)
		}
		var want []string
		for i := range limit {
			if order == Desc {
				i = n - 1 - i
			}
			want = append(want, fmt.Sprintf(`{"auditID":"copy-%02d"}`, i))
		}
		if got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); !slices.Equal(got, want) {
			t.Errorf("%s: lines\n%v\nwant\n%v", order, got, want)
		}
	}
}
