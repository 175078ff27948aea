package chdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// PoolSize is how many connections a DB opens at most. Each connection runs
// one statement at a time; callers beyond PoolSize wait for a free one.
const PoolSize = 4

// MemoryPath is the data path of a throw-away in-memory engine.
const MemoryPath = ":memory:"

var (
	// ErrClosed is returned by the methods of a DB after Close.
	ErrClosed = errors.New("chdb: database is closed")
	// ErrDataPathInUse is returned by Open when the engine already runs on
	// another data path in this process.
	ErrDataPathInUse = errors.New("chdb: the engine is already open on another data path")
)

// engine is the process-wide state of libchdb: the loaded library and the
// one data path its connections share. It is the package's only global.
var engine struct {
	mu    sync.Mutex
	lib   *library // nil until the first successful load
	path  string   // data path of the open connections
	conns int      // open connections across all DBs

	// What libchdb did to signal handlers, accumulated over every connect
	// and close: see signalSet.restore.
	restored, adopted []syscall.Signal
}

// noteSignals records the outcome of a signalSet.restore. engine.mu must be
// held.
func noteSignals(restored, adopted []syscall.Signal) {
	for _, s := range restored {
		if !slices.Contains(engine.restored, s) {
			engine.restored = append(engine.restored, s)
		}
	}
	for _, s := range adopted {
		if !slices.Contains(engine.adopted, s) {
			engine.adopted = append(engine.adopted, s)
		}
	}
}

// DB is a pool of connections to the embedded engine on one data path.
// It is safe for concurrent use by multiple goroutines.
type DB struct {
	lib  *library
	path string
	args []string

	slots chan struct{} // a token per connection in use or being made
	done  chan struct{} // closed by Close

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// Open loads libchdb from libPath (resolved with [LibraryPath] when empty)
// on first use and connects to the engine on dataPath, which is created if
// missing ([MemoryPath] for a throw-away in-memory engine). args are passed
// to every connection of the pool, e.g.
// "--output_format_json_quote_64bit_integers=0"; query-level settings given
// this way apply to that connection as if it had run SET.
//
// The engine runs on one data path per process: Open fails with
// [ErrDataPathInUse] while any DB is open on another path. More DBs on the
// same path share the engine.
func Open(libPath, dataPath string, args ...string) (*DB, error) {
	if dataPath == "" {
		return nil, errors.New("chdb: empty data path")
	}
	path := dataPath
	if path != MemoryPath {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("chdb: resolving data path %s: %w", path, err)
		}
		path = abs
	}

	engine.mu.Lock()
	defer engine.mu.Unlock()
	if libPath == "" && engine.lib != nil {
		libPath = engine.lib.path
	}
	if libPath == "" {
		p, err := LibraryPath("")
		if err != nil {
			return nil, err
		}
		libPath = p
	}
	lib, err := loadLocked(libPath)
	if err != nil {
		return nil, err
	}
	if engine.conns > 0 && engine.path != path {
		return nil, fmt.Errorf("%w: running on %s, asked for %s; close every DB on the first path before opening another",
			ErrDataPathInUse, engine.path, path)
	}
	if path != MemoryPath {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return nil, fmt.Errorf("chdb: creating data path: %w", err)
		}
	}
	args = slices.Clone(args)
	c, err := connectLocked(lib, path, args)
	if err != nil {
		return nil, err
	}
	return &DB{
		lib:   lib,
		path:  path,
		args:  args,
		slots: make(chan struct{}, PoolSize),
		done:  make(chan struct{}),
		idle:  []*conn{c},
	}, nil
}

// loadLocked returns the loaded library, loading it from path the first
// time. Unlike sync.Once it lets a failed load be retried with another
// path. engine.mu must be held.
func loadLocked(path string) (*library, error) {
	if engine.lib != nil {
		if !sameFile(engine.lib.path, path) {
			return nil, fmt.Errorf("chdb: libchdb is already loaded from %s; one process cannot load %s as well",
				engine.lib.path, path)
		}
		return engine.lib, nil
	}
	lib, err := loadLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("chdb: %w", err)
	}
	engine.lib = lib
	return lib, nil
}

func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// Path returns the absolute data path (or [MemoryPath]).
func (db *DB) Path() string { return db.path }

// Version returns the version of the loaded libchdb, as chdb_version()
// reports it.
func (db *DB) Version() string { return db.lib.version }

// Close waits for the statements in flight, then closes every connection.
// When the last DB on a path closes, the engine may be opened on another.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	close(db.done)
	db.mu.Unlock()

	// Take every slot: this waits for connections in use to come back.
	for range cap(db.slots) {
		db.slots <- struct{}{}
	}
	db.mu.Lock()
	idle := db.idle
	db.idle = nil
	db.mu.Unlock()

	engine.mu.Lock()
	defer engine.mu.Unlock()
	for _, c := range idle {
		c.closeLocked()
	}
	return nil
}

// acquire takes a free connection, making one when the pool has room.
func (db *DB) acquire(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case db.slots <- struct{}{}:
	case <-db.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		<-db.slots
		return nil, ErrClosed
	}
	if n := len(db.idle); n > 0 {
		c := db.idle[n-1]
		db.idle = db.idle[:n-1]
		db.mu.Unlock()
		return c, nil
	}
	db.mu.Unlock()

	engine.mu.Lock()
	c, err := connectLocked(db.lib, db.path, db.args)
	engine.mu.Unlock()
	if err != nil {
		<-db.slots
		return nil, err
	}
	return c, nil
}

// release returns c to the pool.
func (db *DB) release(c *conn) {
	db.mu.Lock()
	db.idle = append(db.idle, c)
	db.mu.Unlock()
	<-db.slots
}

// Query runs sql and returns its whole output in format (TabSeparated when
// empty). params bind {name:Type} placeholders server-side; values are
// never spliced into the SQL text but read by the engine as text in
// ClickHouse's escaped (TSV) form, as with the HTTP interface's param_
// arguments: `\\` is a backslash, `\t` a tab, and a raw tab or newline is
// an error. sql, format and values may hold any bytes.
//
// A running statement cannot be interrupted from outside; ctx is checked
// before it starts, and a ctx deadline becomes the statement's
// max_execution_time, so the engine stops it then. The error of a statement
// stopped that way wraps ctx.Err().
func (db *DB) Query(ctx context.Context, sql, format string, params map[string]string) ([]byte, error) {
	if sql == "" {
		return nil, errors.New("chdb query: empty statement")
	}
	c, err := db.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("chdb query: %w", err)
	}
	defer db.release(c)
	if err := db.setDeadline(ctx, c); err != nil {
		return nil, fmt.Errorf("chdb query: %w", err)
	}
	defer db.clearDeadline(ctx, c)
	res := c.query(sql, format, params)
	if res != nil {
		defer c.lib.destroyResult(res)
	}
	if err := c.lib.resultErr(res, "query"); err != nil {
		return nil, withCtxErr(ctx, err)
	}
	return bytes.Clone(c.lib.resultBytes(res)), nil
}

// setDeadline makes ctx's deadline, if any, the connection's
// max_execution_time, so the engine itself stops a statement that would
// outlive it.
func (db *DB) setDeadline(ctx context.Context, c *conn) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(dl)
	if left <= 0 {
		return context.DeadlineExceeded
	}
	secs := strconv.FormatFloat(max(left.Seconds(), 0.001), 'f', 3, 64)
	return c.exec("SET max_execution_time = " + secs)
}

// clearDeadline puts back the max_execution_time the connection was opened
// with.
func (db *DB) clearDeadline(ctx context.Context, c *conn) {
	if _, ok := ctx.Deadline(); !ok {
		return
	}
	v := "0"
	for _, a := range db.args {
		if s, ok := strings.CutPrefix(a, "--max_execution_time="); ok {
			if _, err := strconv.ParseFloat(s, 64); err == nil {
				v = s
			}
		}
	}
	// A failure leaves a stale limit on an idle connection; the next
	// statement with a deadline replaces it, one without would be limited.
	_ = c.exec("SET max_execution_time = " + v)
}

// withCtxErr adds ctx's error to err when ctx is done: the engine reports a
// statement it stopped at the deadline as TIMEOUT_EXCEEDED, possibly a
// moment before ctx's own timer marks it done.
func withCtxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	// The engine's own clock may stop the statement a hair before ctx's
	// timer fires: a TIMEOUT_EXCEEDED under a deadline is that deadline.
	if _, ok := ctx.Deadline(); cerr == nil && ok && err != nil && strings.Contains(err.Error(), "TIMEOUT_EXCEEDED") {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// QueryStream runs sql like Query but hands its output to fn chunk by chunk
// as the engine produces it (a chunk is the formatted output of one or more
// blocks; a row may in principle straddle two chunks). The chunk is only
// valid during the call. The query is cancelled when fn returns an error,
// which QueryStream then returns, or when ctx is done.
func (db *DB) QueryStream(ctx context.Context, sql, format string, params map[string]string, fn func(chunk []byte) error) error {
	if sql == "" {
		return errors.New("chdb stream query: empty statement")
	}
	c, err := db.acquire(ctx)
	if err != nil {
		return fmt.Errorf("chdb stream query: %w", err)
	}
	defer db.release(c)
	if err := db.setDeadline(ctx, c); err != nil {
		return fmt.Errorf("chdb stream query: %w", err)
	}
	defer db.clearDeadline(ctx, c)
	l := c.lib
	res := c.stream(sql, format, params)
	if res == nil {
		return l.resultErr(nil, "stream query")
	}
	defer l.destroyResult(res)
	if err := l.resultErr(res, "stream query"); err != nil {
		return withCtxErr(ctx, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			l.streamCancel(c.c, res)
			return fmt.Errorf("chdb stream query: %w", err)
		}
		chunk := l.streamFetch(c.c, res)
		if err := l.resultErr(chunk, "stream query"); err != nil {
			if chunk != nil {
				l.destroyResult(chunk)
			}
			return withCtxErr(ctx, err)
		}
		data := l.resultBytes(chunk)
		if len(data) == 0 {
			l.destroyResult(chunk)
			return nil
		}
		err := fn(data)
		l.destroyResult(chunk)
		if err != nil {
			l.streamCancel(c.c, res)
			return err
		}
	}
}

// insertChunk is how much data one chdb_stream_append call hands over.
const insertChunk = 1 << 20

// Insert runs insertSQL (an INSERT without FORMAT clause or data, e.g.
// "INSERT INTO t (a, b)") with data encoded in format (e.g. "RowBinary",
// "JSONEachRow"). It uses the streaming-insert API, which measured faster
// than one chdb_query_n with the data inline (see BenchmarkInsert). ctx is
// checked between chunks; a cancelled insert commits nothing it had not
// already flushed (ClickHouse inserts are not transactions).
func (db *DB) Insert(ctx context.Context, insertSQL, format string, data []byte) error {
	off := 0
	return db.insert(ctx, insertSQL, format, func() ([]byte, error) {
		if off >= len(data) {
			return nil, io.EOF
		}
		chunk := data[off:min(off+insertChunk, len(data))]
		off += len(chunk)
		return chunk, nil
	})
}

// insert runs a streaming insert of the chunks next returns, until it
// returns io.EOF (with or without a last chunk). Any other error of next,
// or ctx ending, cancels the insert; next's error is returned as it is.
func (db *DB) insert(ctx context.Context, insertSQL, format string, next func() ([]byte, error)) error {
	if insertSQL == "" || format == "" {
		return errors.New("chdb insert: empty statement or format")
	}
	c, err := db.acquire(ctx)
	if err != nil {
		return fmt.Errorf("chdb insert: %w", err)
	}
	defer db.release(c)
	l := c.lib
	s := l.insertN(c.c, unsafe.StringData(insertSQL), uintptr(len(insertSQL)),
		unsafe.StringData(format), uintptr(len(format)))
	if s == nil {
		return errors.New("chdb insert: no stream (connection closed?)")
	}
	defer l.insertDestroy(s)
	if msg := l.insertError(s); msg != "" {
		return fmt.Errorf("chdb insert: %s", msg)
	}
	for {
		if err := ctx.Err(); err != nil {
			l.insertCancel(s)
			return fmt.Errorf("chdb insert: %w", err)
		}
		chunk, rerr := next()
		if len(chunk) > 0 && l.insertAppend(s, unsafe.Pointer(unsafe.SliceData(chunk)), uintptr(len(chunk))) != 0 {
			msg := l.insertError(s)
			if msg == "" {
				msg = "append failed"
			}
			return fmt.Errorf("chdb insert: %s", msg)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			l.insertCancel(s)
			return rerr
		}
	}
	res := l.insertDone(s)
	if res != nil {
		defer l.destroyResult(res)
	}
	return l.resultErr(res, "insert")
}

// conn is one chDB connection. It runs one statement at a time.
type conn struct {
	lib    *library
	handle *cConn // what chdb_connect returned, for chdb_close_conn
	c      cConn  // *handle, what the query functions take
}

// connectLocked opens a connection with the process's signal handlers
// saved before and restored after. engine.mu must be held.
func connectLocked(lib *library, path string, args []string) (*conn, error) {
	argv := make([]string, 0, 2+len(args))
	argv = append(argv, "clickhouse")
	if path != MemoryPath {
		argv = append(argv, "--path="+path)
	}
	argv = append(argv, args...)

	var pin runtime.Pinner
	defer pin.Unpin()
	cargv := make([]unsafe.Pointer, len(argv)+1) // NULL-terminated like main's argv
	for i, a := range argv {
		b := append([]byte(a), 0)
		pin.Pin(&b[0])
		cargv[i] = unsafe.Pointer(&b[0])
	}

	saved := saveSignals()
	if lib.setSignalHandlersEnabled != nil {
		lib.setSignalHandlersEnabled(0)
	}
	h := lib.connect(int32(len(argv)), &cargv[0])
	noteSignals(saved.restore())
	if h == nil || *h == nil {
		return nil, fmt.Errorf("chdb: connecting with %q failed (libchdb gives no reason: check the arguments and that the data path is writable)", argv[1:])
	}
	engine.conns++
	engine.path = path
	return &conn{lib: lib, handle: h, c: *h}, nil
}

// closeLocked closes the connection. engine.mu must be held.
func (c *conn) closeLocked() {
	saved := saveSignals()
	c.lib.closeConn(c.handle)
	noteSignals(saved.restore())
	engine.conns--
	if engine.conns == 0 {
		engine.path = ""
	}
}

// exec runs a statement whose output does not matter.
func (c *conn) exec(sql string) error {
	res := c.query(sql, "", nil)
	if res != nil {
		defer c.lib.destroyResult(res)
	}
	return c.lib.resultErr(res, "query")
}

// query starts chdb_query_n, or chdb_query_with_params_n when params are
// given. The caller destroys the result.
func (c *conn) query(sql, format string, params map[string]string) cResult {
	if format == "" {
		format = "TabSeparated"
	}
	q, ql := unsafe.StringData(sql), uintptr(len(sql))
	f, fl := unsafe.StringData(format), uintptr(len(format))
	if len(params) == 0 {
		return c.lib.queryN(c.c, q, ql, f, fl)
	}
	p := newCParams(params)
	defer p.release()
	return c.lib.queryParamsN(c.c, q, ql, f, fl, p.names(), p.nameLens(), p.values(), p.valueLens(), p.count())
}

// stream starts chdb_stream_query_with_params_n. The caller destroys the
// result.
func (c *conn) stream(sql, format string, params map[string]string) cResult {
	if format == "" {
		format = "TabSeparated"
	}
	p := newCParams(params)
	defer p.release()
	return c.lib.streamParamsN(c.c, unsafe.StringData(sql), uintptr(len(sql)),
		unsafe.StringData(format), uintptr(len(format)),
		p.names(), p.nameLens(), p.values(), p.valueLens(), p.count())
}

// cParams lays query parameters out as the C arrays that
// chdb_*_with_params_n take. All strings live in one pinned buffer, so the
// pointer arrays handed to C hold only pinned Go pointers.
type cParams struct {
	pin  runtime.Pinner
	ptrs []unsafe.Pointer // names, then values; one spare so it is never empty
	lens []uintptr        // their lengths
	n    int
}

func newCParams(params map[string]string) *cParams {
	n := len(params)
	p := &cParams{n: n, ptrs: make([]unsafe.Pointer, 2*n+1), lens: make([]uintptr, 2*n+1)}
	if n == 0 {
		return p
	}
	size := 1 // never empty, so &buf[off] is valid for an empty last value
	for k, v := range params {
		size += len(k) + len(v)
	}
	buf := make([]byte, size)
	p.pin.Pin(&buf[0])
	off, i := 0, 0
	put := func(slot int, s string) {
		copy(buf[off:], s)
		p.ptrs[slot] = unsafe.Pointer(&buf[off])
		p.lens[slot] = uintptr(len(s))
		off += len(s)
	}
	for k, v := range params {
		put(i, k)
		put(n+i, v)
		i++
	}
	return p
}

func (p *cParams) names() *unsafe.Pointer  { return &p.ptrs[0] }
func (p *cParams) values() *unsafe.Pointer { return &p.ptrs[p.n] }
func (p *cParams) nameLens() *uintptr      { return &p.lens[0] }
func (p *cParams) valueLens() *uintptr     { return &p.lens[p.n] }
func (p *cParams) count() uintptr          { return uintptr(p.n) }
func (p *cParams) release()                { p.pin.Unpin() }
