package query

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// windowEvents is about the most events one query of an All read selects
// (a variable for tests):
// the engine sorts each query's selection by time in memory (ClickHouse's
// external sort did not bound it: 1.2M events of 1.3 KB peaked at 3.5 GB
// with max_bytes_before_external_sort at 512 MiB, against 0.8 GB read in
// 5 s windows of 40k events), so a read of every event is cut into time
// windows of at most this many.
var windowEvents int64 = 50_000

// timeWindows splits the time range of f into consecutive filters, each f
// with Since and Until narrowed to a window holding at most windowEvents
// of the events f matches (a single second that holds more is a window of
// its own), in f's order. Reading them one after the other returns the
// events of f in f's order: the windows partition time and the order is by
// time first. An event stored twice has one time, so its copies are in one
// window, next to each other.
//
// The windows come from counts per minute (and per second within a
// minute that holds more than windowEvents) taken when the read starts:
// with Since or Until left open, events stored later beyond the counted
// range are not read.
//
// Each window says how many events it held when counted (events stored
// twice count twice).
func timeWindows(ctx context.Context, st Selecter, f Filter) ([]window, error) {
	minutes, err := countPer(ctx, st, f, 60)
	if err != nil {
		return nil, err
	}
	// Each run of consecutive minutes that hold more than a window is
	// counted again per second, in one query.
	var buckets []bucket
	for i := 0; i < len(minutes); {
		m := minutes[i]
		if m.n <= windowEvents {
			buckets = append(buckets, m)
			i++
			continue
		}
		j := i + 1
		for j < len(minutes) && minutes[j].n > windowEvents && minutes[j].start.Equal(minutes[j-1].start.Add(time.Minute)) {
			j++
		}
		g := f
		g.Since, g.Until = later(f.Since, m.start), earlier(f.Until, minutes[j-1].start.Add(time.Minute))
		secs, err := countPer(ctx, st, g, 1)
		if err != nil {
			return nil, err
		}
		buckets = append(buckets, secs...)
		i = j
	}
	if len(buckets) == 0 {
		return nil, nil
	}
	// Window boundaries are the starts of buckets: each lies after
	// f.Since and before f.Until, since its bucket holds an event there.
	starts := []time.Time{buckets[0].start}
	counts := []int64{0}
	for _, b := range buckets {
		if n := counts[len(counts)-1]; n > 0 && n+b.n > windowEvents {
			starts = append(starts, b.start)
			counts = append(counts, 0)
		}
		counts[len(counts)-1] += b.n
	}
	last := buckets[len(buckets)-1]
	end := last.start.Add(last.width)
	out := make([]window, len(starts))
	for i, s := range starts {
		w := f
		w.Since = s
		if i == 0 && !f.Since.IsZero() {
			w.Since = f.Since
		}
		w.Until = end
		if i+1 < len(starts) {
			w.Until = starts[i+1]
		} else if !f.Until.IsZero() {
			w.Until = f.Until
		}
		out[i] = window{Filter: w, events: counts[i]}
	}
	if f.Order == Desc {
		slices.Reverse(out)
	}
	return out, nil
}

// window is one query of an All read: f narrowed to a time window, and
// the number of events counted in it.
type window struct {
	Filter
	events int64
}

// bucket is the number of matching events in [start, start+width).
type bucket struct {
	start time.Time
	width time.Duration
	n     int64
}

// countPer counts the events f matches per interval of secs seconds, in
// time order, leaving out intervals without any.
func countPer(ctx context.Context, st Selecter, f Filter, secs int) ([]bucket, error) {
	p := store.Params{}
	var b strings.Builder
	// In microseconds of DateTime64: toUnixTimestamp's UInt32 seconds
	// overflow after 2106 (and before 1970), which events may claim.
	fmt.Fprintf(&b, "SELECT toUnixTimestamp64Micro(ts) - positiveModulo(toUnixTimestamp64Micro(ts), %d) AS t, count() AS n\nFROM audit_events", secs*1_000_000)
	b.WriteString(f.where(p))
	b.WriteString("\nGROUP BY t\nORDER BY t")
	out, err := selectBuckets(ctx, st, b.String(), p, time.UnixMicro, time.Duration(secs)*time.Second)
	if err != nil {
		return nil, fmt.Errorf("counting the events to read per %ds: %w", secs, err)
	}
	return out, nil
}

// selectBuckets runs sql, whose rows are a bucket's start t (a Unix time
// that at reads: time.UnixMicro, time.UnixMilli) and its count n, and
// returns the buckets, each width wide.
func selectBuckets(ctx context.Context, st Selecter, sql string, p store.Params, at func(int64) time.Time, width time.Duration) ([]bucket, error) {
	var out []bucket
	err := store.Each(ctx, st, sql, p, func(r struct{ T, N int64 }) error {
		out = append(out, bucket{start: at(r.T).UTC(), width: width, n: r.N})
		return nil
	})
	return out, err
}

// later returns the later of a (zero: open) and b.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// earlier returns the earlier of a (zero: open) and b.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
