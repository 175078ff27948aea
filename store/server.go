package store

// The ClickHouse server (or cluster) engine, over clickhouse-go/v2's native
// protocol. Cluster mode (clickhouse://…?cluster=NAME) is a matter for the
// migrations (Distributed tables over Replicated local ones, see package
// migrations); this engine reads and writes the table names it is given,
// which on a cluster are the Distributed tables. It checks at start that
// the named cluster exists, and inserts in the foreground (below).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"slices"
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

// Timings of the query cancellation in Select (see killUntil).
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

// Select implements Store.
//
// The query runs under a context that is never cancelled: clickhouse-go
// v2.51.0 can panic with "send on closed channel" when the context of a
// streaming query is cancelled while its reader goroutine waits to hand
// over a block (conn_process.go returns before that goroutine ends;
// clickhouse-go PR #1677). Instead, when ctx ends or fn fails, Select asks
// the server to stop with KILL QUERY on another connection and drains what
// is left. The context deadline becomes the server's max_execution_time
// (plus a second) as a backstop.
func (s *server) Select(ctx context.Context, sql string, params Params, fn func(row []byte) error) error {
	var enc *rowEncoder
	bp := getBuffer()
	defer putBuffer(bp)
	buf := *bp
	defer func() { *bp = buf }()
	return s.each(ctx, sql, params, func(types []driver.ColumnType) ([]any, error) {
		enc = newRowEncoder(types)
		return enc.dests, nil
	}, func() error {
		buf = enc.encode(buf[:0])
		return fn(buf)
	})
}

// SelectRows implements Store: each result column is scanned by the
// driver straight into its Row field. Cancellation is as for Select.
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
// Cancellation is as for Select.
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
// returns for the result's columns, and calls row after each scan. See
// Select for how a query is stopped.
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

var bufferPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuffer() *[]byte { return bufferPool.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) > 1<<20 {
		return // keep one huge row from pinning memory
	}
	*b = (*b)[:0]
	bufferPool.Put(b)
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
			return fmt.Errorf("appending column %s of %d rows for audit_events: %w", insertColumns[i], len(rows), err)
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

// insertColumns are the audit_events columns Insert writes, in the order
// of insertBatch.values: received_at and request_uri in their stored forms
// (derived.go).
var insertColumns = [...]string{
	"cluster", "apiserver", "ts", "received_at_full", "received_lag", "audit_id", "stage", "level", "verb",
	"request_uri_full", "request_uri_tmpl", "user", "user_groups", "impersonated_user", "user_agent", "source_ip",
	"resource", "subresource", "api_group", "api_version", "namespace", "name",
	"object_rv", "object_uid", "code", "response_rv", "watch",
	"req_rv", "req_rv_match", "timeout_seconds", "label_selector", "field_selector",
	"req_limit", "req_continue", "annotations", "raw", "residual",
}

var insertSQL = "INSERT INTO audit_events (" + strings.Join(insertColumns[:], ", ") + ")"

// insertBatch holds rows as columns, one slice per column, for the
// columnar appends of clickhouse-go.
type insertBatch struct {
	cluster, apiServer, auditID, stage, level, verb, requestURIFull []string
	requestURITmpl                                                  []string
	user                                                            []string
	impersonatedUser, userAgent, sourceIP, resource, subresource    []string
	apiGroup, apiVersion, namespace, name, objectRV, objectUID      []string
	responseRV, requestedRV, rvMatch, labelSelector, fieldSelector  []string
	continue_                                                       []string
	ts, receivedAtFull                                              []time.Time
	receivedLag                                                     []int64
	groups                                                          [][]string
	code, timeoutSeconds                                            []int32
	watch                                                           []bool
	limit                                                           []int64
	annotations                                                     []map[string]string
	raw, residual                                                   [][]byte
}

var insertPool = sync.Pool{New: func() any { return new(insertBatch) }}

func getInsertColumns() *insertBatch { return insertPool.Get().(*insertBatch) }

func putInsertColumns(b *insertBatch) {
	b.reset()
	insertPool.Put(b)
}

// stringColumns returns the string columns, for reset.
func (b *insertBatch) stringColumns() []*[]string {
	return []*[]string{
		&b.cluster, &b.apiServer, &b.auditID, &b.stage, &b.level, &b.verb, &b.requestURIFull, &b.requestURITmpl, &b.user,
		&b.impersonatedUser, &b.userAgent, &b.sourceIP, &b.resource, &b.subresource,
		&b.apiGroup, &b.apiVersion, &b.namespace, &b.name, &b.objectRV, &b.objectUID,
		&b.responseRV, &b.requestedRV, &b.rvMatch, &b.labelSelector, &b.fieldSelector,
		&b.continue_,
	}
}

// reset empties the columns, keeping their capacity and dropping the
// references to the rows' strings, slices and maps.
func (b *insertBatch) reset() {
	for _, c := range b.stringColumns() {
		clear(*c)
		*c = (*c)[:0]
	}
	clear(b.groups)
	clear(b.annotations)
	clear(b.raw)
	clear(b.residual)
	b.ts, b.receivedAtFull, b.receivedLag = b.ts[:0], b.receivedAtFull[:0], b.receivedLag[:0]
	b.groups, b.code, b.timeoutSeconds = b.groups[:0], b.code[:0], b.timeoutSeconds[:0]
	b.watch, b.limit, b.annotations, b.raw = b.watch[:0], b.limit[:0], b.annotations[:0], b.raw[:0]
	b.residual = b.residual[:0]
}

// appendRows adds rows to the columns.
func (b *insertBatch) appendRows(rows []Row) {
	for i := range rows {
		r := &rows[i]
		b.cluster = append(b.cluster, r.Cluster)
		b.apiServer = append(b.apiServer, r.APIServer)
		b.ts = append(b.ts, r.Time)
		full, lag := splitReceivedAt(r)
		b.receivedAtFull = append(b.receivedAtFull, time.UnixMicro(full).UTC())
		b.receivedLag = append(b.receivedLag, lag)
		b.auditID = append(b.auditID, r.AuditID)
		b.stage = append(b.stage, r.Stage)
		b.level = append(b.level, r.Level)
		b.verb = append(b.verb, r.Verb)
		uri, tmpl := splitRequestURI(r)
		b.requestURIFull = append(b.requestURIFull, uri)
		b.requestURITmpl = append(b.requestURITmpl, tmpl)
		b.user = append(b.user, r.User)
		b.groups = append(b.groups, r.Groups)
		b.impersonatedUser = append(b.impersonatedUser, r.ImpersonatedUser)
		b.userAgent = append(b.userAgent, r.UserAgent)
		b.sourceIP = append(b.sourceIP, r.SourceIP)
		b.resource = append(b.resource, r.Resource)
		b.subresource = append(b.subresource, r.Subresource)
		b.apiGroup = append(b.apiGroup, r.APIGroup)
		b.apiVersion = append(b.apiVersion, r.APIVersion)
		b.namespace = append(b.namespace, r.Namespace)
		b.name = append(b.name, r.Name)
		b.objectRV = append(b.objectRV, r.ObjectRV)
		b.objectUID = append(b.objectUID, r.ObjectUID)
		b.code = append(b.code, r.Code)
		b.responseRV = append(b.responseRV, r.ResponseRV)
		b.watch = append(b.watch, r.Watch)
		b.requestedRV = append(b.requestedRV, r.RequestedRV)
		b.rvMatch = append(b.rvMatch, r.RVMatch)
		b.timeoutSeconds = append(b.timeoutSeconds, r.TimeoutSeconds)
		b.labelSelector = append(b.labelSelector, r.LabelSelector)
		b.fieldSelector = append(b.fieldSelector, r.FieldSelector)
		b.limit = append(b.limit, r.Limit)
		b.continue_ = append(b.continue_, r.Continue)
		b.annotations = append(b.annotations, r.Annotations)
		b.raw = append(b.raw, r.Raw)
		b.residual = append(b.residual, r.Residual)
	}
}

// values returns the columns in insertColumns order.
func (b *insertBatch) values() []any {
	return []any{
		b.cluster, b.apiServer, b.ts, b.receivedAtFull, b.receivedLag, b.auditID, b.stage, b.level, b.verb,
		b.requestURIFull, b.requestURITmpl, b.user, b.groups, b.impersonatedUser, b.userAgent, b.sourceIP,
		b.resource, b.subresource, b.apiGroup, b.apiVersion, b.namespace, b.name,
		b.objectRV, b.objectUID, b.code, b.responseRV, b.watch,
		b.requestedRV, b.rvMatch, b.timeoutSeconds, b.labelSelector, b.fieldSelector,
		b.limit, b.continue_, b.annotations, b.raw, b.residual,
	}
}

// JSON encoding of scanned rows, byte for byte as ClickHouse's JSONEachRow
// prints them with output_format_json_quote_64bit_integers=0 (the
// embedded engine's setting) and the other defaults: integers of any width
// and decimals unquoted, floats in ClickHouse's shortest form with NaN and
// infinities as null, DateTime64(p) as "2006-01-02 15:04:05.000000" with p
// fractional digits in the column's time zone, Date as "2006-01-02", UUID,
// IP and Enum values as strings, Arrays and unnamed Tuples as arrays, Maps
// and named Tuples as objects, strings escaped as writeJSONString does.
// server_test.go checks this against the engine itself. One difference:
// map keys come out sorted, where ClickHouse keeps the stored order (Go
// maps, which the driver scans into, have none). Types not handled here
// (Dynamic, Variant, JSON, geo types, Time, Interval, …) fall back to
// encoding/json's rendering of the scanned Go value.

// rowEncoder holds one scan destination per result column and turns the
// scanned values into one JSON object.
type rowEncoder struct {
	dests []any
	cols  []columnEncoder
}

type columnEncoder struct {
	key []byte // `{"name":` for the first column, `,"name":` for the others
	enc func(b []byte) []byte
}

func newRowEncoder(types []driver.ColumnType) *rowEncoder {
	e := &rowEncoder{dests: make([]any, len(types)), cols: make([]columnEncoder, len(types))}
	for i, ct := range types {
		st := ct.ScanType()
		if st == nil {
			st = reflect.TypeFor[any]()
		}
		dest := reflect.New(st)
		e.dests[i] = dest.Interface()
		var key []byte
		if i == 0 {
			key = append(key, '{')
		} else {
			key = append(key, ',')
		}
		key = appendJSONString(key, ct.Name())
		key = append(key, ':')
		e.cols[i] = columnEncoder{key: key, enc: bindEncoder(parseType(ct.DatabaseTypeName()), dest)}
	}
	return e
}

// bindEncoder returns an encoder of the value dest points to, with typed
// fast paths for the common scalar columns.
func bindEncoder(t chType, dest reflect.Value) func(b []byte) []byte {
	switch p := dest.Interface().(type) {
	case *string:
		if t.name == "String" || t.name == "LowCardinality" || t.name == "FixedString" || strings.HasPrefix(t.name, "Enum") {
			return func(b []byte) []byte { return appendJSONString(b, *p) }
		}
	case *int64:
		return func(b []byte) []byte { return strconv.AppendInt(b, *p, 10) }
	case *int32:
		return func(b []byte) []byte { return strconv.AppendInt(b, int64(*p), 10) }
	case *uint64:
		return func(b []byte) []byte { return strconv.AppendUint(b, *p, 10) }
	case *uint32:
		return func(b []byte) []byte { return strconv.AppendUint(b, uint64(*p), 10) }
	case *bool:
		return func(b []byte) []byte { return strconv.AppendBool(b, *p) }
	case *time.Time:
		if layout, prec, ok := timeLayout(t); ok {
			return func(b []byte) []byte { return appendTime(b, *p, layout, prec) }
		}
	}
	enc := compileEncoder(t)
	v := dest.Elem()
	return func(b []byte) []byte { return enc(b, v) }
}

// encode appends the current row as one JSON object.
func (e *rowEncoder) encode(b []byte) []byte {
	if len(e.cols) == 0 {
		return append(b, "{}"...)
	}
	for i := range e.cols {
		b = append(b, e.cols[i].key...)
		b = e.cols[i].enc(b)
	}
	return append(b, '}')
}

// chType is a parsed ClickHouse type name: "Map(String, Array(UInt8))" is
// name "Map" with args "String" and "Array(UInt8)".
type chType struct {
	name string
	args []string
}

func parseType(s string) chType {
	s = strings.TrimSpace(s)
	i := strings.IndexByte(s, '(')
	if i < 0 || !strings.HasSuffix(s, ")") {
		return chType{name: s}
	}
	return chType{name: strings.TrimSpace(s[:i]), args: splitArgs(s[i+1 : len(s)-1])}
}

// splitArgs splits at the commas outside parentheses and quotes.
func splitArgs(s string) []string {
	var (
		args  []string
		depth int
		quote byte // ' or ` while inside a quoted literal or identifier
		start int
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" || len(args) > 0 {
		args = append(args, rest)
	}
	return args
}

// tupleElement splits a Tuple argument into its name ("" when unnamed) and
// type: "a String", "`a b` String", "String".
func tupleElement(arg string) (name, typ string) {
	if strings.HasPrefix(arg, "`") {
		for i := 1; i < len(arg); i++ {
			switch arg[i] {
			case '\\':
				i++
			case '`':
				n, err := strconv.Unquote(arg[:i+1])
				if err != nil {
					n = arg[1:i]
				}
				return n, strings.TrimSpace(arg[i+1:])
			}
		}
		return "", arg
	}
	sp := strings.IndexByte(arg, ' ')
	if sp < 0 {
		return "", arg
	}
	if p := strings.IndexByte(arg, '('); p >= 0 && p < sp {
		return "", arg
	}
	return arg[:sp], strings.TrimSpace(arg[sp+1:])
}

// timeLayout gives the text form of the date and time types.
func timeLayout(t chType) (layout string, prec int, ok bool) {
	switch t.name {
	case "Date", "Date32":
		return "2006-01-02", 0, true
	case "DateTime":
		return "2006-01-02 15:04:05", 0, true
	case "DateTime64":
		prec = 3
		if len(t.args) > 0 {
			if p, err := strconv.Atoi(t.args[0]); err == nil {
				prec = min(max(p, 0), 9)
			}
		}
		return "2006-01-02 15:04:05", prec, true
	case "Nullable", "LowCardinality":
		if len(t.args) == 1 {
			return timeLayout(parseType(t.args[0]))
		}
	}
	return "", 0, false
}

// encodeFunc appends the JSON form of v.
type encodeFunc func(b []byte, v reflect.Value) []byte

var ipType = reflect.TypeFor[net.IP]()

// compileEncoder returns the encoder of values of ClickHouse type t as
// clickhouse-go scans them. Every encoder writes null for a nil pointer or
// interface (Nullable) and for a missing value.
func compileEncoder(t chType) encodeFunc {
	arg := func(i int) chType {
		if i < len(t.args) {
			return parseType(t.args[i])
		}
		return chType{}
	}
	var enc encodeFunc
	switch t.name {
	case "Nullable", "LowCardinality":
		return compileEncoder(arg(0))
	case "SimpleAggregateFunction":
		return compileEncoder(arg(len(t.args) - 1))
	case "String", "FixedString", "Enum8", "Enum16", "Enum", "UUID", "IPv4":
		enc = encodeText
	case "IPv6":
		enc = encodeIPv6
	case "Bool", "Int8", "Int16", "Int32", "Int64", "Int128", "Int256",
		"UInt8", "UInt16", "UInt32", "UInt64", "UInt128", "UInt256",
		"Float32", "Float64", "BFloat16",
		"Decimal", "Decimal32", "Decimal64", "Decimal128", "Decimal256":
		enc = encodeNumber
	case "Date", "Date32", "DateTime", "DateTime64":
		layout, prec, _ := timeLayout(t)
		enc = func(b []byte, v reflect.Value) []byte {
			if v.Type() != timeType {
				return encodeGeneric(b, v)
			}
			return appendTime(b, timeOf(v), layout, prec)
		}
	case "Array":
		enc = encodeArray(compileEncoder(arg(0)))
	case "Map":
		enc = encodeMap(compileEncoder(arg(0)), compileEncoder(arg(1)))
	case "Tuple":
		enc = encodeTuple(t.args)
	case "Nothing":
		return func(b []byte, _ reflect.Value) []byte { return append(b, "null"...) }
	default:
		enc = encodeGeneric
	}
	return func(b []byte, v reflect.Value) []byte {
		v, ok := deref(v)
		if !ok {
			return append(b, "null"...)
		}
		return enc(b, v)
	}
}

// deref follows pointers and interfaces; ok is false for nil and for an
// invalid Value.
func deref(v reflect.Value) (_ reflect.Value, ok bool) {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, v.IsValid()
}

// addressable returns v or, when v is not addressable, a copy that is, so
// that methods with pointer receivers (big.Int.String) can be called.
func addressable(v reflect.Value) reflect.Value {
	if v.CanAddr() {
		return v
	}
	p := reflect.New(v.Type()).Elem()
	p.Set(v)
	return p
}

func stringer(v reflect.Value) (fmt.Stringer, bool) {
	s, ok := addressable(v).Addr().Interface().(fmt.Stringer)
	return s, ok
}

func timeOf(v reflect.Value) time.Time {
	if v.CanAddr() {
		return *v.Addr().Interface().(*time.Time)
	}
	return v.Interface().(time.Time)
}

func encodeText(b []byte, v reflect.Value) []byte {
	if v.Kind() == reflect.String {
		return appendJSONString(b, v.String())
	}
	if s, ok := stringer(v); ok {
		return appendJSONString(b, s.String())
	}
	return encodeGeneric(b, v)
}

// encodeIPv6 prints addresses as ClickHouse (and inet_ntop) do, which for
// IPv4-mapped and IPv4-compatible addresses is not net.IP.String's form:
// "::ffff:1.2.3.4" and "::1.2.3.4" (net.IP prints "1.2.3.4" and "::102:304").
func encodeIPv6(b []byte, v reflect.Value) []byte {
	if v.Type() == ipType {
		ip := v.Interface().(net.IP)
		if len(ip) == net.IPv6len {
			zero10 := true
			for _, c := range ip[:10] {
				zero10 = zero10 && c == 0
			}
			switch {
			case zero10 && ip[10] == 0xff && ip[11] == 0xff:
				return appendJSONString(b, "::ffff:"+net.IP(ip[12:]).String())
			case zero10 && ip[10] == 0 && ip[11] == 0 && (ip[12] != 0 || ip[13] != 0):
				return appendJSONString(b, "::"+net.IP(ip[12:]).String())
			}
		}
	}
	return encodeText(b, v)
}

func encodeNumber(b []byte, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32:
		return appendFloat(b, v.Float(), 32)
	case reflect.Float64:
		return appendFloat(b, v.Float(), 64)
	}
	if s, ok := stringer(v); ok { // big.Int, decimal.Decimal
		return append(b, s.String()...)
	}
	return encodeGeneric(b, v)
}

func encodeArray(elem encodeFunc) encodeFunc {
	return func(b []byte, v reflect.Value) []byte {
		if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
			return encodeGeneric(b, v)
		}
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = elem(b, v.Index(i))
		}
		return append(b, ']')
	}
}

// encodeMap writes a JSON object with the keys in sorted order; keys that
// are not strings are written as strings, as ClickHouse does ({"1":…}).
func encodeMap(key, val encodeFunc) encodeFunc {
	type entry struct {
		start, end int // of the key in keys
		val        reflect.Value
	}
	var (
		keys    []byte
		entries []entry
		strKeys []string
	)
	return func(b []byte, v reflect.Value) []byte {
		if v.Kind() != reflect.Map {
			return encodeGeneric(b, v)
		}
		if m, ok := v.Interface().(map[string]string); ok {
			return appendStringMap(b, m, &strKeys)
		}
		keys, entries = keys[:0], entries[:0]
		for it := v.MapRange(); it.Next(); {
			start := len(keys)
			keys = key(keys, it.Key())
			if len(keys) == start || keys[start] != '"' {
				keys = append(keys[:start], '"')
				keys = key(keys, it.Key())
				keys = append(keys, '"')
			}
			entries = append(entries, entry{start, len(keys), it.Value()})
		}
		slices.SortFunc(entries, func(x, y entry) int {
			return strings.Compare(string(keys[x.start:x.end]), string(keys[y.start:y.end]))
		})
		b = append(b, '{')
		for i, e := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, keys[e.start:e.end]...)
			b = append(b, ':')
			b = val(b, e.val)
		}
		clear(entries) // drop the references to the values
		return append(b, '}')
	}
}

// appendStringMap is encodeMap for map[string]string (Map(String, String)
// and LowCardinality variants), without reflection; scratch holds the keys.
func appendStringMap(b []byte, m map[string]string, scratch *[]string) []byte {
	keys := (*scratch)[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	clear(keys)
	*scratch = keys
	return append(b, '}')
}

// encodeTuple writes a named tuple (scanned as map[string]any) as an
// object in declared order and an unnamed one (scanned as []any) as an
// array.
func encodeTuple(args []string) encodeFunc {
	names := make([]string, len(args))
	elems := make([]encodeFunc, len(args))
	named := len(args) > 0
	for i, a := range args {
		name, typ := tupleElement(a)
		names[i], elems[i] = name, compileEncoder(parseType(typ))
		if name == "" {
			named = false
		}
	}
	keys := make([][]byte, len(names))
	for i, n := range names {
		keys[i] = append(appendJSONString(nil, n), ':')
	}
	return func(b []byte, v reflect.Value) []byte {
		switch {
		case named && v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String:
			b = append(b, '{')
			for i, n := range names {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, keys[i]...)
				b = elems[i](b, v.MapIndex(reflect.ValueOf(n).Convert(v.Type().Key())))
			}
			return append(b, '}')
		case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
			b = append(b, '[')
			for i := range v.Len() {
				if i > 0 {
					b = append(b, ',')
				}
				if i < len(elems) {
					b = elems[i](b, v.Index(i))
				} else {
					b = encodeGeneric(b, v.Index(i))
				}
			}
			return append(b, ']')
		}
		return encodeGeneric(b, v)
	}
}

// encodeGeneric is the fallback for types not handled above.
func encodeGeneric(b []byte, v reflect.Value) []byte {
	v, ok := deref(v)
	if !ok || !v.CanInterface() {
		return append(b, "null"...)
	}
	j, err := json.Marshal(v.Interface())
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// appendTime writes t in its own location (the column's time zone, as the
// driver sets it) with prec fractional digits.
func appendTime(b []byte, t time.Time, layout string, prec int) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, layout)
	if prec > 0 {
		var digits [9]byte
		frac := t.Nanosecond()
		for i := 8; i >= 0; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		b = append(b, '.')
		b = append(b, digits[:prec]...)
	}
	return append(b, '"')
}

// appendFloat writes f as ClickHouse does: the shortest form that reads
// back as the same value, in plain notation from 1e-6 up to 1e21 and as
// 1.5e-7 or 1e21 outside; NaN and infinities, which JSON cannot express,
// as null (output_format_json_quote_denormals=0).
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// Go writes 1.5e-07 and 1e+21; ClickHouse 1.5e-7 and 1e21.
		e := start + bytes.IndexByte(b[start:], 'e') + 1
		digits := e
		if b[e] == '+' || b[e] == '-' {
			digits++
		}
		n := digits
		for n < len(b)-1 && b[n] == '0' {
			n++
		}
		b = append(b[:digits], b[n:]...)
		if b[e] == '+' {
			b = append(b[:e], b[e+1:]...)
		}
	}
	return b
}

// appendJSONString writes s quoted and escaped as ClickHouse's
// writeJSONString does: \b \f \n \r \t \\ \" \/, other bytes below 0x20 as
// \u00XX, U+2028 and U+2029 as \u2028 and \u2029, all other bytes as they
// are (invalid UTF-8 is not replaced).
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789ABCDEF"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !jsonSpecial[c] {
			continue
		}
		var esc string
		switch c {
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case '/':
			esc = `\/`
		case '\b':
			esc = `\b`
		case '\f':
			esc = `\f`
		case '\n':
			esc = `\n`
		case '\r':
			esc = `\r`
		case '\t':
			esc = `\t`
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 >= len(s) || s[i+1] != 0x80 || (s[i+2] != 0xA8 && s[i+2] != 0xA9) {
				continue
			}
			esc = `\u2028`
			if s[i+2] == 0xA9 {
				esc = `\u2029`
			}
			b = append(b, s[start:i]...)
			b = append(b, esc...)
			i += 2
			start = i + 1
			continue
		default: // the other bytes below 0x20
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, esc...)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonSpecial marks the bytes appendJSONString looks at.
var jsonSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'], t['/'], t[0xE2] = true, true, true, true
	return t
}()
