package query

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/store"
)

// Dimensions are the event fields a histogram can be stacked by and that
// Values can list, each with the SQL that reads it.
var dimensions = map[string]string{
	"verb":       "verb",
	"user":       "user",
	"user_agent": "user_agent",
	"resource":   "resource",
	"namespace":  "namespace",
	"name":       "name",
	"code":       "toString(code)",
	"cluster":    "cluster",
	"apiserver":  "apiserver",
	"stage":      "stage",
}

// Dimension reports whether name is a field Histogram can stack by and
// Values can list.
func Dimension(name string) bool {
	_, ok := dimensions[name]
	return ok
}

// OtherSeries is the key of the series that gathers every value beyond a
// histogram's top ones.
const OtherSeries = "(other)"

// HistogramOptions shape a histogram.
type HistogramOptions struct {
	// By is the dimension the bars are stacked by (default verb).
	By string
	// Buckets is about how many bars to draw (default 120, at most
	// 1000); the step is the nicest duration that gives at most this
	// many.
	Buckets int
	// Top is the number of series named; the rest are summed into
	// OtherSeries (default 8, at most 50).
	Top int
	// FromEvents counts audit_events even when the rollup could answer:
	// for the tests and benchmarks that compare the two.
	FromEvents bool
}

// Histogram is the number of events per time bucket, stacked by the values
// of one dimension: the JSON of GET /api/v1/histogram.
type Histogram struct {
	Since  time.Time `json:"since"` // the start of the first bucket
	Until  time.Time `json:"until"`
	StepMS int64     `json:"step_ms"`
	By     string    `json:"by"`
	// Series are the stacked values, most events first; OtherSeries last
	// when there is one.
	Series  []Series `json:"series"`
	Buckets []Bucket `json:"buckets"`
	Total   int64    `json:"total"`
	// Source says what was counted: SourceRollup or SourceEvents.
	Source string `json:"source"`
}

// The sources of a histogram's counts.
const (
	// SourceEvents: the events of the window (audit_events).
	SourceEvents = "events"
	// SourceRollup: the rollup's counts for the window's whole slots, the
	// events for its edges (see rollupSlot).
	SourceRollup = "rollup"
)

// Series is one value of the dimension and its number of events.
type Series struct {
	Key   string `json:"key"`
	Total int64  `json:"total"`
}

// Bucket is one step of time; Counts[i] is the events of Series[i].
type Bucket struct {
	T      time.Time `json:"t"`
	Counts []int64   `json:"counts"`
}

// niceSteps are the bucket widths a histogram uses.
var niceSteps = []time.Duration{
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
}

// HistogramStep returns the smallest nice step that cuts span into at most
// n buckets.
func HistogramStep(span time.Duration, n int) time.Duration {
	for _, s := range niceSteps {
		if span <= s*time.Duration(n) {
			return s
		}
	}
	last := niceSteps[len(niceSteps)-1]
	return (span/time.Duration(n)/last + 1) * last
}

// HistogramEvents counts the events f selects (its limit and order are not
// used) per time bucket and per value of opt.By. f must bound the time on
// both ends.
//
// It counts stored events, not requests: a request whose policy records
// several stages counts once per stage, as the event table lists it.
//
// It reads the rollup when that answers exactly (f filters on no object
// name and the step is a whole number of rollupSlot) and audit_events
// otherwise, without FINAL as a listing does (see dupSlack). Either way an
// event stored twice, which the writer's lookup makes rare, counts twice:
// in the events until ClickHouse merges the copies, in the rollup for good
// (see rollupSlot).
func HistogramEvents(ctx context.Context, st Selecter, f Filter, opt HistogramOptions) (Histogram, error) {
	if f.Since.IsZero() || f.Until.IsZero() {
		return Histogram{}, fmt.Errorf("%w: a histogram needs since and until", ErrBadFilter)
	}
	if err := f.Validate(); err != nil {
		return Histogram{}, err
	}
	if opt.By == "" {
		opt.By = "verb"
	}
	col, ok := dimensions[opt.By]
	if !ok || opt.By == "name" {
		return Histogram{}, fmt.Errorf("%w: cannot stack by %q: use verb, user, user_agent, resource, namespace, code, cluster, apiserver or stage", ErrBadFilter, opt.By)
	}
	switch {
	case opt.Buckets == 0:
		opt.Buckets = 120
	case opt.Buckets < 1 || opt.Buckets > 1000:
		return Histogram{}, fmt.Errorf("%w: buckets %d is not from 1 to 1000", ErrBadFilter, opt.Buckets)
	}
	switch {
	case opt.Top == 0:
		opt.Top = 8
	case opt.Top < 1 || opt.Top > 50:
		return Histogram{}, fmt.Errorf("%w: top %d is not from 1 to 50", ErrBadFilter, opt.Top)
	}

	step := HistogramStep(f.Until.Sub(f.Since), opt.Buckets)
	start := f.Since.UTC().Truncate(step)
	n := int((f.Until.Sub(start) + step - 1) / step)
	h := Histogram{Since: start, Until: f.Until.UTC(), StepMS: step.Milliseconds(), By: opt.By, Source: SourceEvents}
	rollup := !opt.FromEvents && useRollup(f, opt.By, step)
	if rollup {
		h.Source = SourceRollup
	}

	p := map[string]string{}
	sql := countSQL(f, "toUInt32(intDiv($T - {start_ms:Int64}, {step_ms:Int64})) AS b, "+col+" AS k", "b, k", rollup, p)
	p["start_ms"] = strconv.FormatInt(start.UnixMilli(), 10)
	p["step_ms"] = strconv.FormatInt(h.StepMS, 10)

	type cell struct {
		b int
		n int64
	}
	cells := map[string][]cell{}
	totals := map[string]int64{}
	err := store.Each(ctx, st, sql, p, func(r struct {
		B uint32 `json:"b"`
		K string `json:"k"`
		N int64  `json:"n"`
	}) error {
		if int(r.B) >= n {
			return nil // cannot happen: ts < until
		}
		cells[r.K] = append(cells[r.K], cell{int(r.B), r.N})
		totals[r.K] += r.N
		h.Total += r.N
		return nil
	})
	if err != nil {
		return Histogram{}, fmt.Errorf("counting events: %w", err)
	}

	keys := make([]string, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(totals[b], totals[a]), cmp.Compare(a, b)) })
	index := map[string]int{}
	for i, k := range keys {
		if i == opt.Top && len(keys) > opt.Top+1 {
			h.Series = append(h.Series, Series{Key: OtherSeries})
		}
		if len(h.Series) > opt.Top {
			index[k] = opt.Top
			h.Series[opt.Top].Total += totals[k]
			continue
		}
		index[k] = len(h.Series)
		h.Series = append(h.Series, Series{Key: k, Total: totals[k]})
	}
	if h.Series == nil {
		h.Series = []Series{}
	}
	h.Buckets = make([]Bucket, n)
	counts := make([]int64, n*len(h.Series))
	for i := range h.Buckets {
		h.Buckets[i] = Bucket{T: start.Add(time.Duration(i) * step), Counts: counts[i*len(h.Series) : (i+1)*len(h.Series) : (i+1)*len(h.Series)]}
	}
	for k, cs := range cells {
		s := index[k]
		for _, c := range cs {
			h.Buckets[c.b].Counts[s] += c.n
		}
	}
	return h, nil
}

// Value is one value of a field and the number of events that have it.
type Value struct {
	Value string `json:"value"`
	Count int64  `json:"count"`
}

// Values lists the most frequent values of field among the events f
// selects, the most frequent first, at most f's limit. For filter
// suggestions, so it reads without FINAL; from the rollup when it answers
// (see HistogramEvents).
func Values(ctx context.Context, st Selecter, f Filter, field string) ([]Value, error) {
	return values(ctx, st, f, field, true)
}

// values is Values, reading the rollup only when allowed to.
func values(ctx context.Context, st Selecter, f Filter, field string, rollup bool) ([]Value, error) {
	col, ok := dimensions[field]
	if !ok {
		return nil, fmt.Errorf("%w: field %q: use verb, user, user_agent, resource, namespace, name, code, cluster, apiserver or stage", ErrBadFilter, field)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	p := map[string]string{}
	sql := countSQL(f, col+" AS v", "v", rollup && useRollup(f, field, 0), p) + "\nORDER BY n DESC, v\nLIMIT {limit:UInt32}"
	p["limit"] = strconv.Itoa(f.limit())
	out := []Value{}
	err := store.Each(ctx, st, sql, p, func(r struct {
		V string `json:"v"`
		N int64  `json:"n"`
	}) error {
		out = append(out, Value{r.V, r.N})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing values of %s: %w", field, err)
	}
	return out, nil
}
