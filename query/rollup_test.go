package query

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

func TestRollupSlots(t *testing.T) {
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		since, until time.Time
		lo, hi       time.Time
	}{
		{t0, t0.Add(time.Hour), t0, t0.Add(time.Hour)},
		{t0.Add(time.Microsecond), t0.Add(time.Hour - time.Microsecond), t0.Add(30 * time.Second), t0.Add(time.Hour - 30*time.Second)},
		{t0.Add(29 * time.Second), t0.Add(61 * time.Second), t0.Add(30 * time.Second), t0.Add(60 * time.Second)},
		{time.Time{}, t0.Add(45 * time.Second), time.Time{}, t0.Add(30 * time.Second)},
		{t0.Add(45 * time.Second), time.Time{}, t0.Add(60 * time.Second), time.Time{}},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}, time.Time{}},
		// Before 1970 too: slots are counted from the Unix epoch.
		{time.Date(1950, 3, 4, 1, 2, 47, 0, time.UTC), time.Date(1950, 3, 4, 1, 3, 47, 0, time.UTC),
			time.Date(1950, 3, 4, 1, 3, 0, 0, time.UTC), time.Date(1950, 3, 4, 1, 3, 30, 0, time.UTC)},
	} {
		lo, hi := rollupSlots(tc.since, tc.until)
		if !lo.Equal(tc.lo) || !hi.Equal(tc.hi) {
			t.Errorf("rollupSlots(%s, %s) = %s, %s; want %s, %s", tc.since, tc.until, lo, hi, tc.lo, tc.hi)
		}
		if !lo.IsZero() && lo.UnixMilli()%rollupSlot.Milliseconds() != 0 {
			t.Errorf("lo %s is not on a slot boundary", lo)
		}
	}
}

func TestUseRollup(t *testing.T) {
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	hour := Filter{Since: t0.Add(7 * time.Second), Until: t0.Add(time.Hour + 3*time.Second)}
	with := func(f Filter, set func(*Filter)) Filter { set(&f); return f }
	for _, tc := range []struct {
		name string
		f    Filter
		by   string
		step time.Duration
		want bool
	}{
		{"ragged hour, 30 s bars", hour, "verb", 30 * time.Second, true},
		{"every rollup filter", with(hour, func(f *Filter) {
			f.Cluster, f.APIServer, f.Verb, f.Resource, f.Namespace = []string{"a"}, []string{""}, []string{"get"}, []string{"pods"}, []string{""}
			f.User, f.UserAgent, f.Stage, f.Level, f.Code = []string{"system:node:*"}, []string{"kubelet/*"}, []string{"ResponseComplete"}, []string{"Metadata"}, []int32{200}
		}), "user", time.Minute, true},
		{"name filter", with(hour, func(f *Filter) { f.Name = []string{"x"} }), "verb", time.Minute, false},
		{"values of name", hour, "name", 0, false},
		{"15 s bars", hour, "verb", 15 * time.Second, false},
		{"45 s bars", hour, "verb", 45 * time.Second, false},
		{"values over an open window", Filter{}, "user", 0, true},
		{"no whole slot", Filter{Since: t0.Add(40 * time.Second), Until: t0.Add(70 * time.Second)}, "verb", 0, false},
		{"one whole slot", Filter{Since: t0.Add(25 * time.Second), Until: t0.Add(65 * time.Second)}, "verb", 0, true},
	} {
		if got := useRollup(tc.f, tc.by, tc.step); got != tc.want {
			t.Errorf("%s: useRollup = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// rollupClusters are the clusters of rollupRows.
var rollupClusters = []string{"roll-a", "roll-b", "roll-c"}

// rollupRows are n events of several clusters, apiservers, clients and
// outcomes over ten minutes from t0, some on slot boundaries and some a
// microsecond before one.
func rollupRows(t0 time.Time, n int) []store.Row {
	r := rand.New(rand.NewPCG(13, 6))
	pick := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	rows := make([]store.Row, n)
	for i := range rows {
		at := time.Duration(r.Int64N(int64(10 * time.Minute))).Truncate(time.Microsecond)
		switch i % 10 {
		case 0:
			at = at.Truncate(rollupSlot)
		case 1:
			at = at.Truncate(rollupSlot) + rollupSlot - time.Microsecond
		}
		user := pick("alice", "bob", "system:node:n1", "system:node:n2", "system:serviceaccount:kube-system:endpoint-controller")
		stage := pick("ResponseComplete", "ResponseComplete", "ResponseStarted", "RequestReceived")
		code := []int32{200, 200, 201, 404, 409, 500}[r.IntN(6)]
		if stage == "RequestReceived" {
			code = 0
		}
		id := fmt.Sprintf("r%05d", i)
		rows[i] = store.Row{
			Cluster: pick(rollupClusters...), APIServer: pick("", "api-1", "api-2"), AuditID: id, Stage: stage,
			Level: pick("Metadata", "Request"), Verb: pick("get", "list", "watch", "create", "update", "delete"),
			Time: t0.Add(at), User: user, UserAgent: pick("kubectl/v1.30.0", "kube-controller-manager/v1.31.0", "kubelet/v1.31.0"),
			SourceIP: "10.0.0.1", Resource: pick("pods", "endpoints", "services", "nodes"), Namespace: pick("", "web", "kube-system"),
			Name: pick("a", "b", "c", ""), Code: code,
			Raw: fmt.Appendf(nil, `{"auditID":%q,"stage":%q}`, id, stage),
		}
	}
	return rows
}

// writeRetried stores rows through the real writer as a webhook's retries
// would reach it: every batch, then batches again whole, half again with
// new rows, and a batch holding each of its rows twice.
func writeRetried(t *testing.T, st store.Store, rows []store.Row) {
	t.Helper()
	w := ingest.NewWriter(st, ingest.WriterConfig{MaxRows: 400})
	ctx := t.Context()
	write := func(batch []store.Row) ingest.WriteStats {
		t.Helper()
		s, err := w.Write(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	third := len(rows) / 3
	write(rows[:third])
	if s := write(rows[:third]); s.Stored != 0 || s.Duplicates != third {
		t.Fatalf("a retried batch: %+v, want every row a duplicate", s)
	}
	half := append(append([]store.Row{}, rows[third/2:third]...), rows[third:2*third]...)
	if s := write(half); s.Stored != third || s.Duplicates != third-third/2 {
		t.Fatalf("half a batch again: %+v", s)
	}
	twice := append(append([]store.Row{}, rows[2*third:]...), rows[2*third:]...)
	if s := write(twice); s.Stored != len(rows)-2*third {
		t.Fatalf("a batch holding each row twice: %+v", s)
	}
	// A copy from a tool with another timestamp precision: same key, its
	// time within the writer's slack.
	again := rows[5]
	again.Time = again.Time.Truncate(time.Second)
	if s := write([]store.Row{again}); s.Stored != 0 {
		t.Fatalf("a copy with a truncated timestamp was stored: %+v", s)
	}
}

// finalCount is the number of events f selects in audit_events read with
// FINAL: one per event however often it was stored.
func finalCount(t *testing.T, st store.Store, f Filter) int64 {
	t.Helper()
	p := store.Params{}
	var n int64
	err := store.Each(t.Context(), st, "SELECT count() AS n FROM audit_events FINAL"+f.where(p), p, func(c int64) error {
		n = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRollupEqualsEvents: for a table of requests — every stack-by field,
// every filter the rollup has and one it lacks, windows with ragged and
// aligned edges, several clusters and a client scoped to one — the
// histogram and value lists read from the rollup equal those counted from
// the events, and both equal FINAL's count, over events written through
// the writer with retried and duplicate batches.
func TestRollupEqualsEvents(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	rows := rollupRows(t0, 6000)
	writeRetried(t, st, rows)

	windows := []struct {
		name         string
		since, until time.Time
		rollup       bool // whether a 30 s or coarser step reads the rollup
	}{
		{"aligned", t0, t0.Add(10 * time.Minute), true},
		{"ragged", t0.Add(7*time.Second + 300*time.Millisecond), t0.Add(9*time.Minute + 41*time.Second + 200*time.Microsecond), true},
		{"edges a microsecond off a slot", t0.Add(30*time.Second + time.Microsecond), t0.Add(5*time.Minute - time.Microsecond), true},
		{"beyond the data", t0.Add(-time.Hour - 13*time.Second), t0.Add(time.Hour + 17*time.Second), true},
		{"one whole slot and two edges", t0.Add(25 * time.Second), t0.Add(65 * time.Second), true},
		{"no whole slot", t0.Add(40 * time.Second), t0.Add(70 * time.Second), false},
	}
	filters := []struct {
		name   string
		f      Filter
		rollup bool
	}{
		{"none", Filter{}, true},
		{"one cluster", Filter{Cluster: []string{"roll-a"}}, true},
		{"two clusters", Filter{Cluster: []string{"roll-a", "roll-c"}}, true},
		{"a client that may read no cluster", Filter{Cluster: []string{"\x00"}}, true},
		{"verbs and a resource", Filter{Cluster: []string{"roll-b"}, Verb: []string{"get", "list"}, Resource: []string{"pods"}}, true},
		{"user and user agent prefixes", Filter{User: []string{"system:node:*", "alice"}, UserAgent: []string{"kube*"}}, true},
		{"code, stage, level", Filter{Code: []int32{200, 0}, Stage: []string{"ResponseComplete", "RequestReceived"}, Level: []string{"Metadata"}}, true},
		{"cluster-scoped, apiservers", Filter{Namespace: []string{""}, APIServer: []string{"api-1", ""}}, true},
		{"a name", Filter{Cluster: []string{"roll-a"}, Name: []string{"a"}}, false},
	}
	bys := []string{"verb", "user", "user_agent", "resource", "namespace", "code", "cluster", "apiserver", "stage"}

	check := func(t *testing.T, f Filter, opt HistogramOptions, wantRollup bool) {
		t.Helper()
		got, err := HistogramEvents(ctx, st, f, opt)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: SourceRollup, false: SourceEvents}[wantRollup]; got.Source != want {
			t.Errorf("source %s, want %s", got.Source, want)
		}
		opt.FromEvents = true
		want, err := HistogramEvents(ctx, st, f, opt)
		if err != nil {
			t.Fatal(err)
		}
		got.Source = want.Source
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("from the rollup\n%s\nfrom the events\n%s", g, w)
		}
		if n := finalCount(t, st, f); got.Total != n {
			t.Errorf("total %d, FINAL counts %d", got.Total, n)
		}
	}
	for _, win := range windows {
		for _, fl := range filters {
			if win.name != "ragged" && fl.name != "none" && fl.name != "two clusters" && fl.name != "a name" {
				continue // every filter in one window, every window with three filters
			}
			f := fl.f
			f.Since, f.Until = win.since, win.until
			t.Run(win.name+"/"+fl.name, func(t *testing.T) {
				for _, by := range bys {
					// 20 bars of at least 30 s: the rollup's step;
					// 120 bars: a step under a slot, the events'.
					buckets := []int{20, 120}
					if by == "verb" {
						buckets = append(buckets, 3)
					}
					for _, buckets := range buckets {
						step := HistogramStep(f.Until.Sub(f.Since), buckets)
						wantRollup := win.rollup && fl.rollup && step%rollupSlot == 0
						check(t, f, HistogramOptions{By: by, Buckets: buckets, Top: 3}, wantRollup)
					}
				}
				if fl.f.Cluster == nil && win.name == "ragged" {
					// An open top: a value list up to now.
					f.Until = time.Time{}
				}
				for _, field := range append(bys, "name") {
					f.Limit = 4
					got, err := values(ctx, st, f, field, true)
					if err != nil {
						t.Fatal(err)
					}
					want, err := values(ctx, st, f, field, false)
					if err != nil {
						t.Fatal(err)
					}
					if g, w := fmt.Sprint(got), fmt.Sprint(want); g != w {
						t.Errorf("values of %s: from the rollup %s, from the events %s", field, g, w)
					}
				}
			})
		}
	}
	t.Run("scoped to one cluster", func(t *testing.T) {
		// What web/access.go does for a client of roll-a: its filter's
		// clusters narrowed to roll-a, whatever it asked.
		f := Filter{Cluster: []string{"roll-a"}, Since: windows[1].since, Until: windows[1].until}
		h, err := HistogramEvents(ctx, st, f, HistogramOptions{By: "cluster", Buckets: 20})
		if err != nil {
			t.Fatal(err)
		}
		if h.Source != SourceRollup || len(h.Series) != 1 || h.Series[0].Key != "roll-a" || h.Total != finalCount(t, st, f) {
			t.Errorf("histogram of roll-a by cluster: source %s, series %+v, total %d", h.Source, h.Series, h.Total)
		}
	})
}

// TestRollupCountsCopiesOfRacingWriters shows the one way the rollup's
// counts exceed FINAL's in normal operation, and by how much: two writers
// that both looked up a batch before either inserted it store it twice.
// The events count the copies until ClickHouse merges them; the rollup
// counts them for good, so it exceeds FINAL by exactly the copies.
func TestRollupCountsCopiesOfRacingWriters(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	rows := rollupRows(t0, 1000)
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	copies := rows[:300]
	if err := st.Insert(ctx, copies); err != nil { // the other writer
		t.Fatal(err)
	}
	f := Filter{Since: t0, Until: t0.Add(10 * time.Minute)}
	total := func(fromEvents bool) int64 {
		h, err := HistogramEvents(ctx, st, f, HistogramOptions{Buckets: 20, FromEvents: fromEvents})
		if err != nil {
			t.Fatal(err)
		}
		return h.Total
	}
	if r, e, n := total(false), total(true), finalCount(t, st, f); r != 1300 || e != 1300 || n != 1000 {
		t.Fatalf("before the merge: rollup %d, events %d, FINAL %d; want 1300, 1300, 1000", r, e, n)
	}
	if err := st.Exec(ctx, "OPTIMIZE TABLE audit_events FINAL", nil); err != nil {
		t.Fatal(err)
	}
	if r, e, n := total(false), total(true), finalCount(t, st, f); r != 1300 || e != 1000 || n != 1000 {
		t.Fatalf("after the merge: rollup %d, events %d, FINAL %d; want 1300, 1000, 1000", r, e, n)
	}
}
