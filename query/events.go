package query

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/auditlens/auditlens/internal/chunks"
	"github.com/auditlens/auditlens/store"
)

// Selecter runs queries: Scan decodes rows typed (see store.Each),
// SelectRows (what Events and Export read events with) decodes rows of
// audit_events columns into a store.Row. store.Store provides it.
type Selecter interface {
	store.Scanner
	SelectRows(ctx context.Context, sql string, params store.Params, fn func(r *store.Row) error) error
}

// Stats describes what Events did.
type Stats struct {
	// Matched is the number of events the filter selected and Events
	// read, at most the filter's limit.
	Matched int
	// Emitted is the number of lines written.
	Emitted int
	// Bytes is the number of bytes written, newlines included.
	Bytes int64
	// Truncated reports that the filter's limit cut the selection short:
	// more events may match than were read.
	Truncated bool
}

// flushEvery is the number of lines after which Events hands what it has
// written to the client.
const flushEvery = 64

// Events selects the events f matches, ordered by time (then audit ID,
// stage and cluster; newest first when f.Order is Desc) and writes them to
// w as NDJSON. With f.All it counts the matching events per minute first
// and reads them in time windows of about 50k events, one query each, so
// that neither the engine nor Events holds the selection (see
// timeWindows). Without a jq program each event is one line, the event as
// received: rebuilt from its typed columns and residual (package
// store/residual; the same JSON value, and for what kube-apiserver writes
// the same bytes), or its raw JSON exactly as stored for rows stored before
// residuals (unless it spans several lines; it is then compacted,
// whitespace outside strings removed). With one, each output of the program
// over each event is one line of compact JSON; the program sees the events
// one at a time, as jq does with a stream of inputs, and its halt ends the
// query early without an error.
//
// The jq program runs over the events the filter selects, so f's limit
// bounds the events it sees, not the outputs: narrow the filter rather
// than selecting a few events out of many with jq.
//
// lim bounds the whole query (the limits set on jq with WithLimits are
// not used). With lim.Worker set, the jq program runs in a worker process
// started for this query, and a program that crashes it (a stack overflow
// from deep recursion or nesting, running out of memory) fails the query
// instead of the caller's process. Events validates f first. When w has a Flush method (an
// http.ResponseWriter, a bufio.Writer) Events calls it every few lines so
// the client sees results while the query runs.
//
// On error, the lines already written are valid and the Stats count them.
// Errors wrap ErrBadFilter, a *LimitError, ErrJQFailed (with the key of
// the event the program failed on), the store's error, or w's error.
func Events(ctx context.Context, st Selecter, f Filter, jq *JQ, lim Limits, w io.Writer) (Stats, error) {
	var stats Stats
	if err := f.Validate(); err != nil {
		return stats, err
	}
	lim = lim.withDefaults()
	// A worker watches its own heap: this process's heap is not the
	// program's.
	runCtx, release := lim.start(ctx, jq != nil && lim.Worker == nil)
	defer release()

	var run jqRunner
	switch {
	case jq == nil:
	case lim.Worker != nil:
		wk, err := lim.Worker.start(runCtx, jq, lim)
		if err != nil {
			return stats, limitErr(ctx, runCtx, err)
		}
		defer wk.close(true) // a no-op once closed below
		run = wk
	default:
		run = &inProcess{ctx: runCtx, q: jq}
	}

	out := &lineWriter{w: bufio.NewWriterSize(w, 32<<10), flusher: w, lim: lim, stats: &stats}
	var (
		rebuild rebuilder
		line    []byte
		prev    eventKey // the key of the previous row, to skip a stored copy
		stop    error    // why fn stopped the query; the store may wrap it
	)
	// emit writes one event, in f's order: the event as a line, or the
	// program's outputs over it. Errors of the event itself are marked
	// (ofEvent), for the caller to name the event: its key is made only
	// then.
	emit := func(ev []byte) (err error, ofEvent bool) {
		if jq == nil {
			if line, err = appendRawLine(line[:0], ev); err != nil {
				return err, true
			}
			return out.write(line), false
		}
		err = run.run(ev, out)
		var ee eventError
		switch {
		case err == nil:
			return nil, false
		case errors.Is(err, ErrJQFailed), errors.As(err, &ee):
			return err, true
		}
		return err, false
	}
	fn := func(r *store.Row) error {
		key := keyOf(r)
		if stats.Matched > 0 && key == prev {
			return nil // the same event stored twice (see dupSlack)
		}
		prev = key
		if !f.All && stats.Matched == f.limit() {
			stats.Truncated = true
			stop = errHalt // the limit is reached and more events match
			return stop
		}
		stats.Matched++
		ev, err := rebuild.event(r)
		if err != nil {
			stop = fmt.Errorf("event %s: %w", key, err)
			return stop
		}
		if err, ofEvent := emit(ev); ofEvent {
			stop = fmt.Errorf("event %s: %w", key, err)
		} else {
			stop = err
		}
		return stop
	}
	// A read of every event runs one query per time window, so that the
	// engine never sorts more than a window (see timeWindows); a page of a
	// large window is read from the part of it the page lies in first (see
	// limitWindows).
	var reads []window
	var err error
	if f.All {
		reads, err = timeWindows(runCtx, st, f)
	} else {
		reads, err = limitWindows(runCtx, st, f)
	}
	if err != nil {
		return stats, limitErr(ctx, runCtx, err)
	}
	if f.All {
		stop, err = readAll(runCtx, st, reads, f.Order, allRead{columns: eventColumns, item: appendEvent,
			each: func(key chunks.Key, ev []byte) error {
				stats.Matched++
				err, ofEvent := emit(ev)
				if ofEvent {
					return fmt.Errorf("event %s: %w", keyString(key), err)
				}
				return err
			}})
		reads = nil
	}
	for _, rf := range reads {
		from, rows := stats.Matched, 0
		sql, params := rf.SQL(eventColumns)
		err = st.SelectRows(runCtx, sql, params, func(r *store.Row) error {
			rows++
			return fn(r)
		})
		if err != nil {
			break
		}
		if f.All || rows < rf.limit()+dupSlack {
			continue
		}
		// The window's LIMIT ran out before the page was full: more than
		// dupSlack of its rows were copies. Read it again with FINAL,
		// where each event is one row in the same order, and go on after
		// the events already written.
		skip := stats.Matched - from
		sql, params = rf.sql(eventColumns, "audit_events FINAL")
		err = st.SelectRows(runCtx, sql, params, func(r *store.Row) error {
			if skip > 0 {
				skip--
				return nil
			}
			return fn(r)
		})
		if err != nil {
			break
		}
	}
	if stop != nil {
		err = stop
	} else if err != nil {
		err = fmt.Errorf("selecting events: %w", err)
	}
	if run != nil {
		// Stop a worker still busy with an event (the query ends early:
		// a limit, halt, an error) rather than wait for it.
		if cerr := run.close(err != nil); err == nil {
			err = cerr
		}
	}
	if errors.Is(err, errHalt) {
		err = nil
	}
	err = limitErr(ctx, runCtx, err)
	if ferr := out.flush(); err == nil {
		err = ferr
	}
	return stats, err
}

// jqRunner runs a query's jq program over its events, one at a time.
type jqRunner interface {
	// run runs the program over one event and writes each output to
	// out as a line. It returns errHalt when the program halts, and an
	// error wrapping ErrJQFailed or an eventError for a failure that
	// concerns this event. Events calls it no more once it returned an
	// error.
	run(raw []byte, out *lineWriter) error
	// close releases what the runner holds; stop says the query ends
	// early, so work in progress is to be abandoned.
	close(stop bool) error
}

// eventError marks an error about the event being processed (not the
// program), such as a stored event that is not JSON. Events names the
// event in it.
type eventError struct{ error }

func (e eventError) Unwrap() error { return e.error }

// inProcess runs the program in this process.
type inProcess struct {
	ctx  context.Context
	q    *JQ
	line []byte
}

func (r *inProcess) run(raw []byte, out *lineWriter) error {
	input, err := DecodeEvent(raw)
	if err != nil {
		return eventError{fmt.Errorf("decoding the stored event: %w", err)}
	}
	return r.q.run(r.ctx, input, func(v any) error {
		var err error
		if r.line, err = appendJSON(r.line[:0], v); err != nil {
			return err
		}
		return out.write(append(r.line, '\n'))
	})
}

func (r *inProcess) close(bool) error { return nil }

// appendRawLine appends raw and a newline to b. Trailing whitespace is
// dropped, and raw is compacted when it spans several lines, so that it
// stays one NDJSON line.
func appendRawLine(b []byte, raw []byte) ([]byte, error) {
	raw = bytes.TrimRight(raw, " \t\r\n")
	if len(raw) == 0 {
		return b, errors.New("the stored event is empty")
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		b = append(b, raw...)
		return append(b, '\n'), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, fmt.Errorf("compacting the stored event: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// lineWriter writes NDJSON lines within the query's limits and flushes
// them to the client every flushEvery lines.
type lineWriter struct {
	w       *bufio.Writer
	flusher io.Writer // the caller's writer, flushed when it can be
	lim     Limits
	budget  budget
	stats   *Stats
	pending int
}

// write writes one line, newline included.
func (lw *lineWriter) write(line []byte) error {
	if err := lw.budget.spend(lw.lim, int64(len(line))); err != nil {
		return err
	}
	if _, err := lw.w.Write(line); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	lw.stats.Emitted++
	lw.stats.Bytes += int64(len(line))
	if lw.pending++; lw.pending >= flushEvery {
		return lw.flush()
	}
	return nil
}

// flush hands buffered lines to the caller's writer and flushes it.
func (lw *lineWriter) flush() error {
	lw.pending = 0
	if err := lw.w.Flush(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	if lw.stats.Emitted == 0 {
		// Nothing to hand over: an HTTP handler has not sent its headers
		// yet, so it can still answer an error with a status of its own.
		return nil
	}
	switch f := lw.flusher.(type) {
	case interface{ Flush() error }:
		if err := f.Flush(); err != nil {
			return fmt.Errorf("flushing results: %w", err)
		}
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}
