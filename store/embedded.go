package store

// The embedded engine: ClickHouse in-process through libchdb (package
// store/chdb). The library is loaded by OpenEmbedded, not before, so a
// process that talks to a server never needs it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/auditlens/auditlens/store/chdb"
)

// EmbeddedOptions configures OpenEmbedded.
type EmbeddedOptions struct {
	// ChdbLib is the value of the --chdb-lib flag: the path of libchdb.so.
	// When empty the library is looked up as chdb.LibraryPath describes
	// (CHDB_LIB_PATH, the user cache filled by `make chdb`,
	// /usr/local/lib/libchdb.so).
	ChdbLib string
	// ConfigFile, when set, is a ClickHouse configuration file the engine
	// reads at start (--config-file), e.g. a remote_servers section so that
	// tests can run the cluster-mode schema's Distributed tables over a
	// one-shard cluster on this engine. It is read when the engine
	// starts: it has no effect while another Embedded is open on the same
	// data path (they share the engine).
	ConfigFile string
	// Settings are ClickHouse settings for every statement
	// (skip_unavailable_shards=1, …), applied to each connection as if it
	// had run SET.
	Settings map[string]string
	// Logger receives start-up messages; nil discards them.
	Logger *slog.Logger
}

// Embedded is the Store on the embedded ClickHouse engine (chDB). It is
// safe for concurrent use; statements run on a small pool of connections
// (chdb.PoolSize).
type Embedded struct {
	db  *chdb.DB
	log *slog.Logger
	// bufs keeps Insert's batch buffers for reuse (a 10k-row batch of
	// 1.3 KB events is about 15 MB). Unlike a sync.Pool it survives garbage
	// collections, which a busy writer triggers between two batches.
	bufs chan []byte
}

var _ Store = (*Embedded)(nil)

// OpenEmbedded starts the embedded engine on dataPath (created if
// missing). Only one data path can be open per process. When libchdb.so
// cannot be found the error wraps chdb.ErrLibraryNotFound and says how to
// provide it.
func OpenEmbedded(ctx context.Context, dataPath string, opts EmbeddedOptions) (*Embedded, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lib, err := chdb.LibraryPath(opts.ChdbLib)
	if err != nil {
		return nil, fmt.Errorf("opening the embedded engine: %w", err)
	}
	var args []string
	if opts.ConfigFile != "" {
		args = append(args, "--config-file="+opts.ConfigFile)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Settings)) {
		args = append(args, "--"+k+"="+opts.Settings[k])
	}
	db, err := chdb.Open(lib, dataPath, args...)
	if err != nil {
		return nil, fmt.Errorf("opening the embedded engine on %s: %w", dataPath, err)
	}
	log.Info("opened embedded ClickHouse engine", "path", db.Path(), "chdb", db.Version(), "lib", lib)
	return &Embedded{db: db, log: log, bufs: make(chan []byte, 2)}, nil
}

// Kind implements Store.
func (e *Embedded) Kind() string { return "chdb" }

// Close implements Store. It waits for statements in flight.
func (e *Embedded) Close() error { return e.db.Close() }

// Exec implements Store. Parameter values are read by ClickHouse as text in
// its escaped (TSV) form, as for every client: `\\` is a backslash, `\t` a
// tab. A statement cannot be interrupted once it runs, but a ctx deadline
// becomes its max_execution_time. Unlike a server, the embedded engine also
// runs several statements separated by semicolons.
func (e *Embedded) Exec(ctx context.Context, sql string, params Params) error {
	if _, err := e.db.Query(ctx, sql, "Null", params); err != nil {
		return fmt.Errorf("running %s on the embedded engine: %w", stmtHead(sql), err)
	}
	return nil
}

// SelectRows implements Store. The engine writes its result as
// RowBinaryWithNamesAndTypes, decoded as it streams (rowDecoder) on a
// goroutine of its own (decodeAhead), so the engine produces the next
// chunk while the last one is decoded and fn works on its rows.
// Cancellation and parameters are as for Scan.
func (e *Embedded) SelectRows(ctx context.Context, sql string, params Params, fn func(r *Row) error) error {
	var fnErr error
	d := &rowDecoder{fn: func(r *Row) error {
		if err := fn(r); err != nil {
			fnErr = err
			return err
		}
		return nil
	}}
	return streamErr(sql, e.readRowBinary(ctx, sql, params, d), fnErr)
}

// Scan implements Scanner. The engine writes its result as
// RowBinaryWithNamesAndTypes, decoded as it streams, on a goroutine of its
// own as for SelectRows. The query is cancelled when row fails or ctx
// ends: ctx is checked between chunks, and its deadline becomes the
// query's max_execution_time, which stops a query that is slow to produce
// its first rows. Parameters are as for Exec.
func (e *Embedded) Scan(ctx context.Context, sql string, params Params, bind func([]Column) ([]any, error), row func() error) error {
	var fnErr error
	d := &scanDecoder{bindFn: bind, row: func() error {
		if err := row(); err != nil {
			fnErr = err
			return err
		}
		return nil
	}}
	return streamErr(sql, e.readRowBinary(ctx, sql, params, d), fnErr)
}

// readRowBinary runs sql with its result as RowBinaryWithNamesAndTypes,
// framed by an rbStream and decoded by rows ahead of the engine
// (decodeAhead).
func (e *Embedded) readRowBinary(ctx context.Context, sql string, params Params, rows rbRows) error {
	s := rbStream{rows: rows}
	err := decodeAhead(func(take func([]byte) error) error {
		return e.db.QueryStream(ctx, sql, "RowBinaryWithNamesAndTypes", params, take)
	}, s.write)
	if err == nil {
		err = s.end()
	}
	return err
}

// aheadChunks is how many chunks of the engine's output decodeAhead holds
// (the engine's chunks are ~1 MB, at most a few MB).
const aheadChunks = 4

// aheadBufSize is the least a chunk's copy is given. Copies of up to twice
// that are kept for the next read (aheadBufs): fresh memory for every
// chunk of every read was faulted in page by page.
const aheadBufSize = 2 << 20

var aheadBufs = make(chan []byte, 2*aheadChunks)

// decodeAhead runs stream, which hands its output chunk by chunk to take
// (each chunk valid only during the call), and calls decode with each
// chunk in order on another goroutine, from a copy: the engine then
// fetches and formats the next chunk while the last one is decoded. An
// export of 800k events spent as long waiting on one as on the other
// until they overlapped. The first error of decode cancels the stream
// (take returns it) and is what decodeAhead returns; else the stream's.
func decodeAhead(stream func(take func([]byte) error) error, decode func([]byte) error) error {
	free := make(chan []byte, aheadChunks)
	for range aheadChunks {
		select {
		case b := <-aheadBufs:
			free <- b
		default:
			free <- nil
		}
	}
	full := make(chan []byte, aheadChunks)
	var (
		mu     sync.Mutex
		decErr error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range full {
			mu.Lock()
			failed := decErr != nil
			mu.Unlock()
			if !failed {
				if err := decode(b); err != nil {
					mu.Lock()
					decErr = err
					mu.Unlock()
				}
			}
			free <- b[:0]
		}
	}()
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return decErr
	}
	err := stream(func(chunk []byte) error {
		b := <-free
		if err := failed(); err != nil {
			free <- b
			return err
		}
		if cap(b) < len(chunk) {
			b = make([]byte, 0, max(len(chunk)+len(chunk)/4, aheadBufSize))
		}
		full <- append(b, chunk...)
		return nil
	})
	close(full)
	<-done
	for range aheadChunks {
		if b := <-free; b != nil && cap(b) <= 2*aheadBufSize {
			select {
			case aheadBufs <- b:
			default:
			}
		}
	}
	if err := failed(); err != nil {
		return err
	}
	return err
}

// streamErr is what a streaming read returns for the engine's err: nil,
// the caller's own error fnErr as it was when fn failed, or err wrapped
// with the statement (it wraps ctx.Err() when ctx ended the query).
func streamErr(sql string, err, fnErr error) error {
	switch {
	case err == nil:
		return nil
	case fnErr != nil && errors.Is(err, fnErr):
		return err
	default:
		return fmt.Errorf("running %s on the embedded engine: %w", stmtHead(sql), err)
	}
}

// Insert implements Store. The rows go to the engine in ClickHouse's
// RowBinary format, encoded in a pooled buffer, through the streaming
// insert API.
func (e *Embedded) Insert(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	var buf []byte
	select {
	case buf = <-e.bufs:
	default:
	}
	need := 0
	for i := range rows {
		need += rowBinarySize(&rows[i])
	}
	buf = slices.Grow(buf[:0], need)
	for i := range rows {
		buf = appendRowBinary(buf, &rows[i])
	}
	defer func() {
		if cap(buf) <= maxPooledBatch {
			select {
			case e.bufs <- buf:
			default:
			}
		}
	}()
	if err := e.db.Insert(ctx, embeddedInsertSQL, "RowBinary", buf); err != nil {
		return fmt.Errorf("inserting %d rows into audit_events on the embedded engine: %w", len(rows), err)
	}
	return nil
}

// stmtHead is the start of a statement, for error messages.
func stmtHead(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}

var embeddedInsertSQL = func() string {
	return "INSERT INTO audit_events (" + strings.Join(storedColumnNames(), ", ") + ")"
}()

// maxPooledBatch keeps an outsized batch buffer from being held forever.
const maxPooledBatch = 64 << 20
