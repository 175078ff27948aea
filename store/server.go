package store

// The ClickHouse server (or cluster) engine, over clickhouse-go/v2's native
// protocol. Cluster mode (clickhouse://…?cluster=NAME) is a matter for the
// migrations (Distributed tables over Replicated local ones, see package
// migrations); this engine reads and writes the table names it is given,
// which on a cluster are the Distributed tables. It checks at start that
// the named cluster exists, and inserts in the foreground (below).

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

func init() { openServer = openClickHouse }

// minServerVersion is the oldest ClickHouse server this version of
// auditlens supports. It is the driver's own floor (clickhouse-go v2.51.0
// resources.MinSupportedVersion); a test fails if a driver upgrade raises
// that floor above this one.
var minServerVersion = proto.Version{Major: 25, Minor: 8, Patch: 0}

// Timings of the query cancellation in each (see killUntil).
const (
	killTimeout  = 5 * time.Second // per KILL QUERY statement
	killInterval = time.Second     // between repeated KILL QUERY statements
	killAttempts = 10
)

// server is the Store over a ClickHouse server or cluster.
type server struct {
	conn driver.Conn
	log  *slog.Logger
	// insertSettings are added to every Insert.
	insertSettings clickhouse.Settings
}

// foregroundInsert is the setting that makes an INSERT into a Distributed
// table return only once every shard has stored its part of the block
// (its older name is insert_distributed_sync). Without it the node that
// receives the INSERT queues the block on its own disk and sends it later,
// and the writer would advance the spool's checkpoint for rows that are in
// no replicated table yet. With it, a shard that is down fails the insert,
// the writer retries from the spool, and the webhook keeps accepting
// events into the spool. A URL can turn it off
// (?distributed_foreground_insert=0) to trade that guarantee for inserts
// that succeed while a shard is down. On a single server it changes
// nothing.
const foregroundInsert = "distributed_foreground_insert"

var _ Store = (*server)(nil)

// openClickHouse connects to the server named by url, a clickhouse-go DSN:
//
//	clickhouse://user:pass@host:9000/db?dial_timeout=5s&secure=true&compress=lz4
//
// Query parameters the driver does not know become ClickHouse settings for
// every query (for example max_memory_usage=…). It pings the server and
// refuses a server older than minServerVersion with ErrUnsupportedServer.
func openClickHouse(ctx context.Context, url string, opts Options) (Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := ParseCluster(url)
	if err != nil {
		return nil, err
	}
	if url, err = withoutCluster(url); err != nil {
		return nil, err
	}
	chOpts, err := clickhouse.ParseDSN(url)
	if err != nil {
		// The driver redacts the password from its parse errors; the URL
		// itself is not repeated here for the same reason.
		return nil, fmt.Errorf("parsing ClickHouse server URL: %w", err)
	}
	addr := strings.Join(chOpts.Addr, ",")
	// The driver's own logging stays off (Logger nil): it logs every failed
	// query at error level, and the callers report those errors already.
	conn, err := clickhouse.Open(chOpts)
	if err != nil {
		return nil, fmt.Errorf("opening ClickHouse connection to %s: %w", addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		// A server too old for the driver may still complete the
		// handshake; say so rather than report the protocol error.
		if v, verr := conn.ServerVersion(); verr == nil {
			if verr := checkServerVersion(v.Version); verr != nil {
				conn.Close()
				return nil, verr
			}
		}
		conn.Close()
		return nil, fmt.Errorf("connecting to ClickHouse at %s: %w", addr, err)
	}
	v, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("reading the ClickHouse server version from %s: %w", addr, err)
	}
	if err := checkServerVersion(v.Version); err != nil {
		conn.Close()
		return nil, err
	}
	s := &server{conn: conn, log: log, insertSettings: insertSettings(chOpts.Settings)}
	if spec.Name != "" {
		if err := s.checkCluster(ctx, spec.Name); err != nil {
			conn.Close()
			return nil, err
		}
	}
	log.Info("connected to ClickHouse server", "addr", addr, "database", chOpts.Auth.Database,
		"cluster", spec.Name, "version", v.Version.String(), "server", v.DisplayName)
	return s, nil
}

// insertSettings returns the settings Insert adds to those of the URL:
// foregroundInsert on, unless the URL sets it (or its older name).
func insertSettings(url clickhouse.Settings) clickhouse.Settings {
	_, set := url[foregroundInsert]
	_, setOld := url["insert_distributed_sync"]
	if set || setOld {
		return nil
	}
	return clickhouse.Settings{foregroundInsert: 1}
}

// checkCluster fails unless the server knows cluster name (its
// remote_servers configuration), so that a typo in ?cluster= is reported
// at start rather than by the first ON CLUSTER statement.
func (s *server) checkCluster(ctx context.Context, name string) error {
	var n uint64
	row := s.conn.QueryRow(withParams(ctx, Params{"c": StringParam(name)}), "SELECT count() FROM system.clusters WHERE cluster = {c:String}")
	if err := row.Scan(&n); err != nil {
		return fmt.Errorf("looking up cluster %q in system.clusters: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the server has no cluster %q in its remote_servers configuration "+
			"(SELECT DISTINCT cluster FROM system.clusters lists those it has)", ErrUnknownCluster, name)
	}
	return nil
}

// unsupportedServerError names the version found and the oldest supported.
type unsupportedServerError struct {
	found, min proto.Version
}

func (e *unsupportedServerError) Error() string {
	return fmt.Sprintf("ClickHouse server %s is older than %d.%d, the oldest this version of auditlens supports; "+
		"upgrade the server or use the embedded engine (chdb://…)", e.found, e.min.Major, e.min.Minor)
}

func (e *unsupportedServerError) Unwrap() error { return ErrUnsupportedServer }

// checkServerVersion returns an error wrapping ErrUnsupportedServer when v
// is older than minServerVersion.
func checkServerVersion(v proto.Version) error {
	if proto.CheckMinVersion(minServerVersion, v) {
		return nil
	}
	return &unsupportedServerError{found: v, min: minServerVersion}
}

// Kind implements Store.
func (s *server) Kind() string { return "clickhouse" }

// Close implements Store.
func (s *server) Close() error { return s.conn.Close() }

// withParams binds params as server-side query parameters: the server
// substitutes {name:Type} placeholders, so values never become SQL text.
// Values are sent unchanged; ClickHouse reads each as text in its escaped
// (TSV) form, as it does for every client (clickhouse-client --param_…,
// HTTP param_…): `\\` is a backslash, `\t` a tab.
func withParams(ctx context.Context, params Params, opts ...clickhouse.QueryOption) context.Context {
	if len(params) > 0 {
		opts = append(opts, clickhouse.WithParameters(clickhouse.Parameters(params)))
	}
	if len(opts) == 0 {
		return ctx
	}
	return clickhouse.Context(ctx, opts...)
}

// Exec implements Store.
func (s *server) Exec(ctx context.Context, sql string, params Params) error {
	if err := s.conn.Exec(withParams(ctx, params), sql); err != nil {
		return fmt.Errorf("running %s on ClickHouse: %w", sqlHead(sql), err)
	}
	return nil
}

// sqlHead is the start of a statement, for error messages.
func sqlHead(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}

// SelectRows implements Store: each result column is scanned by the
// driver straight into its Row field. Cancellation is as for each.
func (s *server) SelectRows(ctx context.Context, sql string, params Params, fn func(r *Row) error) error {
	var row Row
	return s.each(ctx, sql, params, func(types []driver.ColumnType) ([]any, error) {
		dests := make([]any, len(types))
		seen := make(map[int]bool, len(types))
		for i, t := range types {
			c, err := resultColumn(t.Name(), t.DatabaseTypeName())
			if err != nil {
				return nil, err
			}
			if seen[c] {
				return nil, fmt.Errorf("result column %q twice", t.Name())
			}
			seen[c] = true
			dests[i] = rowColumns[c].field(&row)
		}
		return dests, nil
	}, func() error { return fn(&row) })
}

// Scan implements Scanner: the driver scans each result column straight
// into its destination, which must be of the column's ValueType.
// Cancellation is as for each.
func (s *server) Scan(ctx context.Context, sql string, params Params, bind func([]Column) ([]any, error), row func() error) error {
	return s.each(ctx, sql, params, func(types []driver.ColumnType) ([]any, error) {
		cols := make([]Column, len(types))
		for i, t := range types {
			cols[i] = Column{Name: t.Name(), Type: t.DatabaseTypeName()}
		}
		dests, err := bind(cols)
		if err != nil {
			return nil, err
		}
		if len(dests) != len(cols) {
			return nil, fmt.Errorf("%d destinations for %d result columns", len(dests), len(cols))
		}
		for i, c := range cols {
			vt, err := ValueType(c.Type)
			if err != nil {
				return nil, fmt.Errorf("result column %q: %w", c.Name, err)
			}
			if dt := reflect.TypeOf(dests[i]); dt == nil || dt.Kind() != reflect.Pointer || dt.Elem() != vt {
				return nil, fmt.Errorf("result column %q of type %s: the destination is %T, want *%s", c.Name, c.Type, dests[i], vt)
			}
		}
		return dests, nil
	}, row)
}

// each runs sql, scans each result row into the destinations that setup
// returns for the result's columns, and calls row after each scan.
//
// The query runs under a context that is never cancelled: clickhouse-go
// v2.51.0 can panic with "send on closed channel" when the context of a
// streaming query is cancelled while its reader goroutine waits to hand
// over a block (conn_process.go returns before that goroutine ends;
// clickhouse-go PR #1677). Instead, when ctx ends or row fails, each asks
// the server to stop with KILL QUERY on another connection and drains what
// is left. The context deadline becomes the server's max_execution_time
// (plus a second) as a backstop.
func (s *server) each(ctx context.Context, sql string, params Params, setup func([]driver.ColumnType) ([]any, error), row func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	qid := newQueryID()
	opts := []clickhouse.QueryOption{clickhouse.WithQueryID(qid)}
	if d, ok := ctx.Deadline(); ok {
		sec := max(1, int(math.Ceil(time.Until(d).Seconds()))+1)
		opts = append(opts, clickhouse.WithSettings(clickhouse.Settings{"max_execution_time": sec}))
	}
	qctx := withParams(context.WithoutCancel(ctx), params, opts...)

	finished := make(chan struct{})
	defer close(finished)
	var killOnce sync.Once
	kill := func() { killOnce.Do(func() { go s.killUntil(qid, finished) }) }
	defer context.AfterFunc(ctx, kill)()

	rows, err := s.conn.Query(qctx, sql)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("running %s on ClickHouse: %w", sqlHead(sql), ctx.Err())
		}
		return fmt.Errorf("running %s on ClickHouse: %w", sqlHead(sql), err)
	}
	ended := false // rows.Next returned false: the stream is over and drained
	defer func() {
		if !ended {
			kill()
			rows.Close() // drains what the server sends until it stops
		}
	}()

	dests, err := setup(rows.ColumnTypes())
	if err != nil {
		return fmt.Errorf("reading the result of %s: %w", sqlHead(sql), err)
	}
	for {
		if !rows.Next() {
			ended = true
			break
		}
		if ctx.Err() != nil {
			break
		}
		if err := rows.Scan(dests...); err != nil {
			return fmt.Errorf("scanning a row of %s: %w", sqlHead(sql), err)
		}
		if err := row(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reading the result of %s: %w", sqlHead(sql), err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the result of %s: %w", sqlHead(sql), err)
	}
	return nil
}

// killUntil asks the server to stop query qid until finished is closed,
// at most killAttempts times: a KILL that reaches the server before the
// query registered, or a server other than the one running it (several
// hosts in the URL), finds nothing, and the next attempt may.
func (s *server) killUntil(qid string, finished <-chan struct{}) {
	for range killAttempts {
		ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		// qid is hex from newQueryID, safe to quote into SQL.
		err := s.conn.Exec(ctx, "KILL QUERY WHERE query_id = '"+qid+"' ASYNC")
		cancel()
		if err != nil {
			s.log.Debug("stopping ClickHouse query", "query_id", qid, "error", err)
		}
		select {
		case <-finished:
			return
		case <-time.After(killInterval):
		}
	}
}

// newQueryID returns a random query id; replaced in tests.
var newQueryID = func() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Insert implements Store. It builds a new batch on every call: a batch
// whose Send failed is spent (clickhouse-go #529), and the caller retries
// by calling Insert again with the same rows. The batch carries an
// insert_deduplication_token derived from the rows' keys, so a retried
// block that the server did store is dropped by replicated tables (and by
// MergeTree tables with non_replicated_deduplication_window > 0).
func (s *server) Insert(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	cols := getInsertColumns()
	defer putInsertColumns(cols)
	cols.appendRows(rows)

	settings := clickhouse.Settings{"insert_deduplication_token": dedupToken(rows)}
	for k, v := range s.insertSettings {
		settings[k] = v
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(settings))
	batch, err := s.conn.PrepareBatch(ctx, insertSQL)
	if err != nil {
		return fmt.Errorf("preparing an insert of %d rows into audit_events: %w", len(rows), err)
	}
	defer batch.Close()
	for i, v := range cols.values() {
		if err := batch.Column(i).Append(v); err != nil {
			return fmt.Errorf("appending column %s of %d rows for audit_events: %w", storedColumns[i].name, len(rows), err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("inserting %d rows into audit_events: %w", len(rows), err)
	}
	return nil
}

// dedupToken identifies a batch by the keys of its rows, in order.
func dedupToken(rows []Row) string {
	h := sha256.New()
	var buf []byte
	for i := range rows {
		r := &rows[i]
		buf = buf[:0]
		for _, s := range [...]string{r.Cluster, r.AuditID, r.Stage} {
			// Length-prefixed, so ("ab","c") and ("a","bc") differ.
			buf = binary.LittleEndian.AppendUint64(buf, uint64(len(s)))
			buf = append(buf, s...)
		}
		h.Write(buf)
	}
	return "auditlens-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// insertSQL writes storedColumns, in their order.
var insertSQL = "INSERT INTO audit_events (" + strings.Join(storedColumnNames(), ", ") + ")"

// insertBatch holds rows as columns, one slice per column of
// storedColumns, for the columnar appends of clickhouse-go. Its columns are
// built from rowColumns, the one description of the table's columns.
type insertBatch struct {
	cols []insertColumn
}

// insertColumn is one or, for a column stored in another form, two of the
// batch's slices.
type insertColumn interface {
	add(r *Row)
	// values appends the column's slices, in storedColumns order.
	values(out []any) []any
	// reset empties the slices, keeping their capacity and dropping the
	// references to the rows' strings, slices and maps.
	reset()
}

// fieldColumn holds the values of one Row field.
type fieldColumn[T any] struct {
	vals []T
	get  func(r *Row) any // rowColumn.field: a *T
}

func (c *fieldColumn[T]) add(r *Row)             { c.vals = append(c.vals, *c.get(r).(*T)) }
func (c *fieldColumn[T]) values(out []any) []any { return append(out, c.vals) }
func (c *fieldColumn[T]) reset()                 { clear(c.vals); c.vals = c.vals[:0] }

// splitColumn holds a column stored as two (derived.go), split once per
// row.
type splitColumn[A, B any] struct {
	a     []A
	b     []B
	split func(r *Row) (A, B)
}

func (c *splitColumn[A, B]) add(r *Row) {
	x, y := c.split(r)
	c.a, c.b = append(c.a, x), append(c.b, y)
}
func (c *splitColumn[A, B]) values(out []any) []any { return append(out, c.a, c.b) }
func (c *splitColumn[A, B]) reset() {
	clear(c.a)
	clear(c.b)
	c.a, c.b = c.a[:0], c.b[:0]
}

// newInsertBatch builds a batch's columns from rowColumns.
func newInsertBatch() *insertBatch {
	b := &insertBatch{cols: make([]insertColumn, len(rowColumns))}
	for i, c := range rowColumns {
		switch i {
		case colReceivedAt:
			b.cols[i] = &splitColumn[time.Time, int64]{split: func(r *Row) (time.Time, int64) {
				full, lag := splitReceivedAt(r)
				return time.UnixMicro(full).UTC(), lag
			}}
			continue
		case colRequestURI:
			b.cols[i] = &splitColumn[string, string]{split: splitRequestURI}
			continue
		}
		switch c.field(&Row{}).(type) {
		case *string:
			b.cols[i] = &fieldColumn[string]{get: c.field}
		case *[]byte:
			b.cols[i] = &fieldColumn[[]byte]{get: c.field}
		case *time.Time:
			b.cols[i] = &fieldColumn[time.Time]{get: c.field}
		case *int32:
			b.cols[i] = &fieldColumn[int32]{get: c.field}
		case *int64:
			b.cols[i] = &fieldColumn[int64]{get: c.field}
		case *bool:
			b.cols[i] = &fieldColumn[bool]{get: c.field}
		case *[]string:
			b.cols[i] = &fieldColumn[[]string]{get: c.field}
		case *map[string]string:
			b.cols[i] = &fieldColumn[map[string]string]{get: c.field}
		default:
			panic(fmt.Sprintf("store: no insert column for %s's field %T", c.name, c.field(&Row{})))
		}
	}
	return b
}

var insertPool = sync.Pool{New: func() any { return newInsertBatch() }}

func getInsertColumns() *insertBatch { return insertPool.Get().(*insertBatch) }

func putInsertColumns(b *insertBatch) {
	b.reset()
	insertPool.Put(b)
}

// reset empties the columns, keeping their capacity.
func (b *insertBatch) reset() {
	for _, c := range b.cols {
		c.reset()
	}
}

// appendRows adds rows to the columns.
func (b *insertBatch) appendRows(rows []Row) {
	for _, c := range b.cols {
		for i := range rows {
			c.add(&rows[i])
		}
	}
}

// values returns the columns in storedColumns order.
func (b *insertBatch) values() []any {
	out := make([]any, 0, len(storedColumns))
	for _, c := range b.cols {
		out = c.values(out)
	}
	return out
}
