package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/auditlens/auditlens/internal/health"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// Store is what the writer needs from the storage engine.
type Store interface {
	Insert(ctx context.Context, rows []store.Row) error
	store.Scanner
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// MaxRows is the largest insert (default DefaultBatchRows). ClickHouse
	// wants few, large inserts: about one per second per table.
	MaxRows int
	// MaxWait is how long the spool consumer waits to fill a batch once it
	// has some rows (default DefaultBatchWait).
	MaxWait time.Duration
	// RetryMin and RetryMax bound the backoff between failed inserts of
	// spooled rows (defaults 200ms and 5s). Spooled rows are retried until
	// they are stored; nothing acknowledged is dropped.
	RetryMin, RetryMax time.Duration
	// ProbeEvery is how often, while it waits to retry, the writer asks
	// the store a trivial query (default 1s): once one fails and a later
	// one succeeds, the store is back and the insert is retried at once.
	ProbeEvery time.Duration
	// Parallel is the number of concurrent inserts one batch is split into
	// (default 2). A part that failed is retried with the others: the
	// retry's lookup drops what the failed attempt did store.
	Parallel int
	// ColumnsOnly stores the typed columns alone, no residual: the events
	// cannot be read back, but everything the detectors read is there.
	// scan's throwaway store is written so (the residuals are most of an
	// import's work in the engine and much of it here).
	ColumnsOnly bool
	Logger      *slog.Logger
	Metrics     *Metrics
}

// DefaultBatchRows is the largest insert of the writer and of an import,
// unless set (serve's and import's --batch-rows): ClickHouse wants few,
// large inserts, and 50,000 events are ~50 MB of JSON.
const DefaultBatchRows = 50000

// DefaultBatchWait is how long the writer waits to fill an insert once it
// has rows, unless set (serve's --batch-wait).
const DefaultBatchWait = time.Second

func (c *WriterConfig) setDefaults() {
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultBatchRows
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultBatchWait
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 200 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = time.Second
	}
	if c.Parallel <= 0 {
		c.Parallel = 2
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
}

// Writer moves rows into the store in large batches and makes writes
// idempotent: a row whose (cluster, auditID, stage) is already stored, or
// appears twice in one batch, is dropped and counted as a duplicate.
type Writer struct {
	st     Store
	cfg    WriterConfig
	health *health.Condition // inserts of spooled rows succeed
}

// NewWriter returns a writer over st.
func NewWriter(st Store, cfg WriterConfig) *Writer {
	cfg.setDefaults()
	return &Writer{st: st, cfg: cfg, health: health.NewCondition("store",
		"acknowledged events wait in the spool and are stored once it answers", cfg.Logger, nil)}
}

// WriteStats counts what one Write did.
type WriteStats struct {
	Stored     int
	Duplicates int
}

// Write stores rows, dropping duplicates, in inserts of at most MaxRows.
func (w *Writer) Write(ctx context.Context, rows []store.Row) (WriteStats, error) {
	var total WriteStats
	for len(rows) > 0 {
		n := min(len(rows), w.cfg.MaxRows)
		st, err := w.writeOne(ctx, rows[:n])
		total.Stored += st.Stored
		total.Duplicates += st.Duplicates
		if err != nil {
			return total, err
		}
		rows = rows[n:]
	}
	return total, nil
}

func (w *Writer) writeOne(ctx context.Context, rows []store.Row) (WriteStats, error) {
	start := time.Now()
	fresh, err := w.dedup(ctx, rows)
	if err != nil {
		return WriteStats{}, err
	}
	st := WriteStats{Duplicates: len(rows) - len(fresh)}
	if err := w.insert(ctx, fresh); err != nil {
		w.cfg.Metrics.StoreErrors.Inc()
		return WriteStats{}, fmt.Errorf("inserting %d events: %w", len(fresh), err)
	}
	st.Stored = len(fresh)
	w.cfg.Metrics.Stored.Add(float64(st.Stored))
	w.cfg.Metrics.Duplicates.Add(float64(st.Duplicates))
	w.cfg.Metrics.BatchSeconds.Observe(time.Since(start).Seconds())
	w.cfg.Metrics.BatchRows.Observe(float64(len(rows)))
	return st, nil
}

// insert stores rows as Parallel concurrent inserts of equal parts. One
// insert keeps about one core busy in the engine; two use both cores of a
// small machine (measured: ~1.6x the rows/s of one). Each part is stored
// as residuals (see storedForm) by the goroutine that inserts it.
func (w *Writer) insert(ctx context.Context, rows []store.Row) error {
	parts := w.cfg.Parallel
	if len(rows) < parts*minParallelRows {
		parts = 1
	}
	if parts <= 1 {
		if len(rows) == 0 {
			return nil
		}
		return w.st.Insert(ctx, w.stored(rows))
	}
	errs := make(chan error, parts)
	size := (len(rows) + parts - 1) / parts
	for i := 0; i < len(rows); i += size {
		part := rows[i:min(i+size, len(rows))]
		go func() { errs <- w.st.Insert(ctx, w.stored(part)) }()
	}
	var err error
	for i := 0; i < len(rows); i += size {
		err = errors.Join(err, <-errs)
	}
	return err
}

// stored turns rows into what is stored (storedForm, or with ColumnsOnly
// the rows without their events) and returns them.
func (w *Writer) stored(rows []store.Row) []store.Row {
	if !w.cfg.ColumnsOnly {
		return storedForm(rows)
	}
	for i := range rows {
		rows[i].Raw = nil
	}
	return rows
}

// storedForm turns rows into what is stored and returns them: each event
// as its residual (what the typed columns cannot restore of it, package
// store/residual) and an empty Raw; readers rebuild the event from the
// columns and the residual. rows are the writer's own copies, made by
// dedup, so the caller's rows keep their Raw for a retry. The residuals of
// a part share one buffer.
func storedForm(rows []store.Row) []store.Row {
	ends := make([]int, len(rows))
	size := 0
	for i := range rows {
		size += len(rows[i].Raw)
	}
	buf := make([]byte, 0, size/3) // residuals are ~30% of generated events
	for i := range rows {
		if len(rows[i].Raw) > 0 {
			buf = residual.AppendSplit(buf, rows[i].Raw, &rows[i])
		}
		ends[i] = len(buf)
	}
	start := 0
	for i := range rows {
		if len(rows[i].Raw) > 0 {
			rows[i].Residual = buf[start:ends[i]:ends[i]]
			rows[i].Raw = nil
		}
		start = ends[i]
	}
	return rows
}

// minParallelRows is the smallest part worth its own insert.
const minParallelRows = 2000

// dedupSlack widens the time window of the existing-key lookup so that the
// same event written by tools with different timestamp precision is found.
const dedupSlack = time.Second

// dedup returns the rows whose keys are neither repeated earlier in rows nor
// already stored. The lookup reads the keys stored in each cluster's time
// window of the batch: the sort key (cluster, hour, …, ts) makes that a
// narrow range scan, and for new data it returns nothing. Passing the
// batch's IDs as an IN list instead costs more than the scan (measured:
// ~9 µs per row for 20k-ID lists).
func (w *Writer) dedup(ctx context.Context, rows []store.Row) ([]store.Row, error) {
	type window struct{ from, to time.Time }
	seen := make(map[store.Key]struct{}, len(rows))
	byCluster := map[string]*window{}
	out := make([]store.Row, 0, len(rows))
	for i := range rows {
		k := rows[i].Key()
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, rows[i])
		win := byCluster[k.Cluster]
		if win == nil {
			win = &window{from: rows[i].Time, to: rows[i].Time}
			byCluster[k.Cluster] = win
		}
		if rows[i].Time.Before(win.from) {
			win.from = rows[i].Time
		}
		if rows[i].Time.After(win.to) {
			win.to = rows[i].Time
		}
	}
	stored := map[store.Key]struct{}{}
	for cluster, win := range byCluster {
		err := store.Each(ctx, w.st, `SELECT audit_id, stage FROM audit_events
WHERE cluster = {cluster:String}
  AND ts >= {from:DateTime64(6, 'UTC')} AND ts <= {to:DateTime64(6, 'UTC')}`,
			store.Params{
				"cluster": store.StringParam(cluster),
				"from":    store.TimeParam(win.from.Add(-dedupSlack)),
				"to":      store.TimeParam(win.to.Add(dedupSlack)),
			}, func(r struct {
				AuditID string `ch:"audit_id"`
				Stage   string `ch:"stage"`
			}) error {
				k := store.Key{Cluster: cluster, AuditID: r.AuditID, Stage: r.Stage}
				if _, ok := seen[k]; ok {
					stored[k] = struct{}{}
				}
				return nil
			})
		if err != nil {
			w.cfg.Metrics.StoreErrors.Inc()
			return nil, fmt.Errorf("looking up already stored events: %w", err)
		}
	}
	if len(stored) == 0 {
		return out, nil
	}
	fresh := out[:0]
	for _, r := range out {
		if _, ok := stored[r.Key()]; !ok {
			fresh = append(fresh, r)
		}
	}
	return fresh, nil
}

// Health says whether spooled rows reach the store: it fails from a failed
// insert to the next that succeeds.
func (w *Writer) Health() *health.Condition { return w.health }

// wait waits d before a retry, or less: it probes the store every
// ProbeEvery and returns as soon as a probe succeeds after one failed.
func (w *Writer) wait(ctx context.Context, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(w.cfg.ProbeEvery)
	defer tick.Stop()
	down := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, w.cfg.ProbeEvery)
			err := store.Each(pctx, w.st, "SELECT 1", nil, func(uint8) error { return nil })
			cancel()
			switch {
			case err != nil:
				down = true
			case down:
				return nil
			}
		}
	}
}

// RunSpool moves spooled batches into the store until ctx is cancelled, then
// stores what is already durable in the spool (bounded by drain) and returns.
// A failed insert is retried with backoff; the spool keeps accepting
// meanwhile, so the apiserver never waits on the store.
func (w *Writer) RunSpool(ctx context.Context, sp *Spool, drain time.Duration) error {
	r := sp.Reader()
	defer r.Close()
	var (
		rows    []store.Row
		lastSeq uint64
		started time.Time
	)
	flush := func(ctx context.Context) error {
		if len(rows) == 0 {
			if lastSeq > 0 {
				return sp.Commit(lastSeq)
			}
			return nil
		}
		backoff := w.cfg.RetryMin
		for {
			_, err := w.Write(ctx, rows)
			if err == nil {
				w.health.OK()
				break
			}
			w.health.Fail(err)
			if err := w.wait(ctx, backoff); err != nil {
				return err
			}
			backoff = min(backoff*2, w.cfg.RetryMax)
		}
		rows = rows[:0]
		return sp.Commit(lastSeq)
	}
	fill := func() (bool, error) {
		got := false
		for len(rows) < w.cfg.MaxRows {
			rec, ok, err := r.Next()
			if err != nil {
				return got, err
			}
			if !ok {
				break
			}
			got = true
			lastSeq = rec.Seq
			if rec.Rows != nil {
				rows = append(rows, rec.Rows...)
				continue
			}
			for _, ev := range rec.Events {
				row, err := DecodeEvent(rec.Cluster, ev)
				row.APIServer = rec.APIServer
				if err != nil {
					// Validated before it was spooled; only a decoder change
					// between versions can get here.
					w.cfg.Logger.Warn("dropping a spooled event that no longer decodes", "seq", rec.Seq, "err", err)
					w.cfg.Metrics.Rejected.WithLabelValues(rec.Cluster).Inc()
					continue
				}
				rows = append(rows, row)
			}
		}
		return got, nil
	}
	w.cfg.Metrics.WatchSpool(sp)
	for {
		got, err := fill()
		if err != nil {
			return err
		}
		if got && started.IsZero() {
			started = time.Now()
		}
		full := len(rows) >= w.cfg.MaxRows
		due := !started.IsZero() && time.Since(started) >= w.cfg.MaxWait
		if full || due {
			if err := flush(ctx); err != nil {
				if errors.Is(err, context.Canceled) || ctx.Err() != nil {
					break
				}
				return err
			}
			started = time.Time{}
			continue
		}
		var timer <-chan time.Time
		if !started.IsZero() {
			timer = time.After(w.cfg.MaxWait - time.Since(started))
		}
		select {
		case <-ctx.Done():
		case <-sp.Notify():
			continue
		case <-timer:
			continue
		}
		if ctx.Err() != nil {
			break
		}
	}
	// Shutting down: store what is durable now, within the drain budget.
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	for {
		if _, err := fill(); err != nil {
			return err
		}
		if len(rows) == 0 {
			return flush(dctx)
		}
		if err := flush(dctx); err != nil {
			return fmt.Errorf("draining the spool at shutdown (the rest is replayed at the next start): %w", err)
		}
	}
}
