package query

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestLimitWindows: a page of events read from the part of the window the
// rollup's counts place it in, then from the rest, equals the page one read
// of the whole window returns — newest and oldest first, pages smaller and
// larger than a slot, filters, ragged windows — also where the rollup
// counted copies of events that the read drops (the first part then holds
// fewer than the page and the rest completes it).
func TestLimitWindows(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	rows := rollupRows(t0, 6000) // ten minutes: ~300 events per 30 s slot
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// Copies of the 40 oldest and 40 newest events, as two racing writers
	// leave them: counted twice by the rollup, read once by Events (fewer
	// than dupSlack, which a read of the whole window relies on).
	byTime := slices.Clone(rows)
	slices.SortFunc(byTime, func(a, b store.Row) int { return a.Time.Compare(b.Time) })
	copies := append(slices.Clone(byTime[:40]), byTime[len(byTime)-40:]...)
	if err := st.Insert(ctx, copies); err != nil {
		t.Fatal(err)
	}

	read := func(f Filter, cutMin int64) (string, Stats) {
		t.Helper()
		old := limitWindowsMin
		limitWindowsMin = cutMin
		defer func() { limitWindowsMin = old }()
		var buf bytes.Buffer
		stats, err := Events(ctx, st, f, nil, Limits{}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		return buf.String(), stats
	}
	whole := Filter{Since: t0, Until: t0.Add(10 * time.Minute)}
	ragged := Filter{Since: t0.Add(7*time.Second + 3*time.Millisecond), Until: t0.Add(9*time.Minute + 41*time.Second)}
	cuts, short := 0, 0
	for _, base := range []Filter{whole, ragged} {
		for _, order := range []Order{Desc, Asc} {
			for _, filter := range []func(*Filter){
				func(*Filter) {},
				func(f *Filter) { f.Verb = []string{"get", "watch"} },
				func(f *Filter) { f.Cluster, f.User = []string{rollupClusters[0]}, []string{"system:node:*"} },
			} {
				for _, limit := range []int{1, 300, 301, 1000, 7000} {
					f := base
					f.Order, f.Limit = order, limit
					filter(&f)
					name := fmt.Sprintf("%s-%s %s verb=%v user=%v limit %d", f.Since.Format("15:04:05.000"), f.Until.Format("15:04:05"), order, f.Verb, f.User, limit)
					ws, err := limitWindows(ctx, st, func() Filter { limitWindowsMin = 1; return f }())
					limitWindowsMin = 100_000
					if err != nil {
						t.Fatal(err)
					}
					if len(ws) == 2 {
						cuts++
						page, rest := ws[0].Filter, ws[1].Filter
						if order == Desc && (!page.Since.After(f.Since) || !rest.Until.Equal(page.Since) || !page.Until.Equal(f.Until) || !rest.Since.Equal(f.Since)) ||
							order == Asc && (!page.Until.Before(f.Until) || !rest.Since.Equal(page.Until) || !page.Since.Equal(f.Since) || !rest.Until.Equal(f.Until)) {
							t.Fatalf("%s: windows %v, %v do not partition the window", name, page, rest)
						}
						if _, s := read(page, 1<<62); s.Matched < limit {
							short++ // the rest completes the page
						}
					}
					got, gotStats := read(f, 1)
					want, wantStats := read(f, 1<<62)
					if got != want || gotStats != wantStats {
						t.Errorf("%s: %d windows: %+v, want %+v (one read); the pages differ: %v", name, len(ws), gotStats, wantStats, got != want)
					}
					if wantStats.Matched == 0 {
						t.Fatalf("%s: nothing read", name)
					}
				}
			}
		}
	}
	// Pages smaller than the window were cut (the test is not vacuous);
	// those larger than it, or than all but its first slot, were not.
	if cuts < 20 || short == 0 {
		t.Errorf("%d of %d reads were cut in two, %d of them with a first part short of the page", cuts, 2*2*3*5, short)
	}
	t.Logf("%d reads cut in two, %d with a short first part", cuts, short)
}
