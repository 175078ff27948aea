package query

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/auditlens/auditlens/store"
)

// A page of events (a limit, not All) is the newest or oldest few of a
// window, but the engine cannot read them in order: the sort key puts
// resource and verb before the time, so ORDER BY ts LIMIT n reads the time
// of every event in the window to find the top n. At 52.8M events an hour
// that was most of the explorer's page (the newest 200 of the hour).
//
// limitWindows cuts such a read in two where the rollup's counts say the
// page surely lies: the newest (or oldest) slots that together hold more
// than the limit, read first, and the rest of the window after them, read
// only when the first part held fewer events than the counts said (copies
// that the rollup counted but the read drops, see rollup.go). The two
// windows partition time and the order is by time first, so reading them
// one after the other returns the same events in the same order as one
// read; Events stops at the limit, which the first window nearly always
// reaches.

// limitWindowsMin is the fewest events a window must hold (by the
// rollup's count) for limitWindows to cut it: below it, one read of the
// window costs less than the count (a variable for tests).
var limitWindowsMin int64 = 100_000

// limitWindows returns the windows Events reads f's page from, in f's
// order: f itself, or the part of f's window the page lies in and the
// rest. Only a bounded window (the explorer's always is) is cut: an open
// one is a question about all time, rarely asked of a page.
func limitWindows(ctx context.Context, st Selecter, f Filter) ([]window, error) {
	whole := []window{{Filter: f}}
	if f.All || f.Since.IsZero() || f.Until.IsZero() || !useRollup(f, "verb", rollupSlot) {
		return whole, nil
	}
	p := store.Params{}
	sql := countSQL(f, "$T - positiveModulo($T, 30000) AS t", "t", true, p)
	slots, err := selectBuckets(ctx, st, sql, p, time.UnixMilli, rollupSlot)
	if err != nil {
		return nil, fmt.Errorf("counting the events per %s to find the page: %w", rollupSlot, err)
	}
	var total int64
	for _, s := range slots {
		total += s.n
	}
	if total < limitWindowsMin {
		return whole, nil
	}
	want := int64(f.limit()) + 1 // Events reads one more to know it is truncated
	if f.Order == Desc {
		slices.SortFunc(slots, func(a, b bucket) int { return b.start.Compare(a.start) })
	} else {
		slices.SortFunc(slots, func(a, b bucket) int { return a.start.Compare(b.start) })
	}
	var n int64
	for _, s := range slots {
		n += s.n
		if n < want {
			continue
		}
		page, rest := f, f
		if f.Order == Desc {
			cut := s.start
			if !cut.After(f.Since) {
				return whole, nil
			}
			page.Since, rest.Until = cut, cut
		} else {
			cut := s.start.Add(s.width)
			if !f.Until.IsZero() && !cut.Before(f.Until) {
				return whole, nil
			}
			page.Until, rest.Since = cut, cut
		}
		return []window{{Filter: page, events: n}, {Filter: rest, events: total - n}}, nil
	}
	return whole, nil
}
