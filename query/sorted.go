package query

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/auditlens/auditlens/internal/chunks"
	"github.com/auditlens/auditlens/store"
)

// sortedWindow holds the events of one time window of an All read, read
// from the engine in no order and rebuilt, and hands them out in the
// filter's order: by time, then audit ID, stage and cluster, as the
// engine's ORDER BY would (strings compare bytewise in both). The engine
// sorts a window with every column in it several times slower than it
// reads it (Filter.unsortedSQL); here only the keys move. A window holds
// about windowEvents events, so this holds one window's events, as the
// engine's sort did.
//
// The events lie in chunks (internal/chunks) kept from window to window,
// not in one buffer: with a window-sized buffer, asynchronous preemption
// off, a 9.6 s export spent 2.3 s less system time.
type sortedWindow struct {
	chunks chunks.Chunks // the events, one after the other; an event lies in one chunk
	events []heldEvent
}

// heldEvent is one event of a sortedWindow: its key and where its JSON
// lies in the chunks.
type heldEvent struct {
	ts       int64 // microseconds, as the engine compares DateTime64(6)
	key      eventKey
	chunk    int32
	off, end int32
}

func (w *sortedWindow) reset() {
	w.chunks.Reset()
	clear(w.events) // the keys' strings
	w.events = w.events[:0]
}

// event returns the JSON of e.
func (w *sortedWindow) event(e *heldEvent) []byte { return w.chunks.Bytes(e.chunk, e.off, e.end) }

// add keeps the stored event of r, rebuilt (appendEvent).
func (w *sortedWindow) add(r *store.Row) error {
	c, buf := w.chunks.Next()
	off := len(buf)
	buf, err := appendEvent(buf, r)
	if err != nil {
		return err
	}
	w.chunks.Put(c, buf)
	w.events = append(w.events, heldEvent{ts: r.Time.UnixMicro(), key: keyOf(r), chunk: int32(c), off: int32(off), end: int32(len(buf))})
	return nil
}

// sort puts the events in order o.
func (w *sortedWindow) sort(o Order) {
	slices.SortFunc(w.events, func(a, b heldEvent) int {
		c := cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.key.AuditID, b.key.AuditID),
			cmp.Compare(a.key.Stage, b.key.Stage), cmp.Compare(a.key.Cluster, b.key.Cluster))
		if o == Desc {
			return -c
		}
		return c
	})
}

// readAll reads reads, the time windows of an All read in its order, one
// query each without ORDER BY, and calls fn with each event in order o.
// stop is the error of fn or of rebuilding an event, which ends the read;
// err is the store's.
//
// The next window is read while fn goes through the one before: the
// engine and the decoder work while the events are written. So at most
// two windows' events are held.
func readAll(ctx context.Context, st Selecter, reads []window, o Order, fn func(key eventKey, ev []byte) error) (stop, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		held      *sortedWindow
		stop, err error
	}
	free := make(chan *sortedWindow, 2)
	free <- new(sortedWindow)
	free <- new(sortedWindow)
	results := make(chan result, 1)
	go func() {
		defer close(results)
		for _, rf := range reads {
			var held *sortedWindow
			select {
			case held = <-free:
			case <-ctx.Done():
				return
			}
			held.reset()
			var res result
			sql, params := rf.unsortedSQL(eventColumns)
			res.err = st.SelectRows(ctx, sql, params, func(r *store.Row) error {
				if err := held.add(r); err != nil {
					res.stop = fmt.Errorf("event %s: %w", keyOf(r), err)
					return res.stop
				}
				return nil
			})
			if res.stop == nil && res.err == nil {
				held.sort(o)
				res.held = held
			}
			results <- res // buffered: the reader stops at ctx or the free buffers
			if res.held == nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range results { // the reader's last window, if it is on its way
		}
	}()
	for res := range results {
		if res.held == nil {
			return res.stop, res.err
		}
		for i := range res.held.events {
			e := &res.held.events[i]
			if stop = fn(e.key, res.held.event(e)); stop != nil {
				return stop, nil
			}
		}
		free <- res.held
	}
	return nil, ctx.Err()
}
