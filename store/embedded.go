package store

// The embedded engine: ClickHouse in-process through libchdb (package
// store/chdb). The library is loaded by OpenEmbedded, not before, so a
// process that talks to a server never needs it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

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

// embeddedArgs are the settings of every connection. JSONEachRow output
// keeps 64-bit integers unquoted, as the Store contract says.
var embeddedArgs = []string{"--output_format_json_quote_64bit_integers=0"}

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
	args := slices.Clone(embeddedArgs)
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

// Select implements Store. Rows come from the engine's JSONEachRow output
// as it streams, split on newlines (JSON strings never hold a raw one); a
// row that straddles two chunks is joined first. The query is cancelled
// when fn fails or ctx ends: ctx is checked between chunks, and its
// deadline becomes the query's max_execution_time, which stops a query
// that is slow to produce its first rows. Parameters are as for Exec.
func (e *Embedded) Select(ctx context.Context, sql string, params Params, fn func(row []byte) error) error {
	var carry []byte // the start of a row whose end is in the next chunk
	var fnErr error
	emit := func(row []byte) error {
		if len(row) == 0 {
			return nil
		}
		if err := fn(row); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	err := e.db.QueryStream(ctx, sql, "JSONEachRow", params, func(chunk []byte) error {
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				carry = append(carry, chunk...)
				return nil
			}
			row := chunk[:i]
			if len(carry) > 0 {
				carry = append(carry, row...)
				row = carry
			}
			if err := emit(row); err != nil {
				return err
			}
			carry = carry[:0]
			chunk = chunk[i+1:]
		}
		return nil
	})
	if err == nil && len(carry) > 0 {
		err = emit(carry)
	}
	switch {
	case err == nil:
		return nil
	case fnErr != nil && errors.Is(err, fnErr):
		return err // the caller's own error, as it was
	default: // wraps ctx.Err() when ctx ended the query
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

// rowBinaryColumns are the audit_events columns the embedded Insert writes,
// in the order appendRowBinary encodes them, with the ClickHouse type each
// encoding is for (checked against the migration by a test).
var rowBinaryColumns = [...]struct{ name, typ string }{
	{"cluster", "LowCardinality(String)"},
	{"apiserver", "LowCardinality(String)"},
	{"ts", "DateTime64(6, 'UTC')"},
	{"received_at", "DateTime64(6, 'UTC')"},
	{"audit_id", "String"},
	{"stage", "LowCardinality(String)"},
	{"level", "LowCardinality(String)"},
	{"verb", "LowCardinality(String)"},
	{"request_uri", "String"},
	{"user", "LowCardinality(String)"},
	{"user_groups", "Array(LowCardinality(String))"},
	{"impersonated_user", "LowCardinality(String)"},
	{"user_agent", "LowCardinality(String)"},
	{"source_ip", "LowCardinality(String)"},
	{"resource", "LowCardinality(String)"},
	{"subresource", "LowCardinality(String)"},
	{"api_group", "LowCardinality(String)"},
	{"api_version", "LowCardinality(String)"},
	{"namespace", "LowCardinality(String)"},
	{"name", "String"},
	{"object_rv", "String"},
	{"object_uid", "String"},
	{"code", "Int32"},
	{"response_rv", "String"},
	{"watch", "Bool"},
	{"req_rv", "String"},
	{"req_rv_match", "LowCardinality(String)"},
	{"timeout_seconds", "Int32"},
	{"label_selector", "String"},
	{"field_selector", "String"},
	{"req_limit", "Int64"},
	{"req_continue", "String"},
	{"annotations", "Map(LowCardinality(String), String)"},
	{"raw", "String"},
	{"residual", "String"},
}

var embeddedInsertSQL = func() string {
	names := make([]string, len(rowBinaryColumns))
	for i, c := range rowBinaryColumns {
		names[i] = c.name
	}
	return "INSERT INTO audit_events (" + strings.Join(names, ", ") + ")"
}()

// maxPooledBatch keeps an outsized batch buffer from being held forever.
const maxPooledBatch = 64 << 20

// appendRowBinary appends r in ClickHouse's RowBinary format, columns in
// rowBinaryColumns order: String as uvarint length and bytes
// (LowCardinality(String) too), DateTime64(6) as int64 microseconds, Int32
// and Int64 little-endian, Bool as one byte, Array as uvarint count and
// elements, Map as uvarint count and key/value pairs (sorted by key, so a
// row always encodes the same).
func appendRowBinary(b []byte, r *Row) []byte {
	b = rbString(b, r.Cluster)
	b = rbString(b, r.APIServer)
	b = rbTime(b, r.Time)
	b = rbTime(b, r.ReceivedAt)
	b = rbString(b, r.AuditID)
	b = rbString(b, r.Stage)
	b = rbString(b, r.Level)
	b = rbString(b, r.Verb)
	b = rbString(b, r.RequestURI)
	b = rbString(b, r.User)
	b = binary.AppendUvarint(b, uint64(len(r.Groups)))
	for _, g := range r.Groups {
		b = rbString(b, g)
	}
	b = rbString(b, r.ImpersonatedUser)
	b = rbString(b, r.UserAgent)
	b = rbString(b, r.SourceIP)
	b = rbString(b, r.Resource)
	b = rbString(b, r.Subresource)
	b = rbString(b, r.APIGroup)
	b = rbString(b, r.APIVersion)
	b = rbString(b, r.Namespace)
	b = rbString(b, r.Name)
	b = rbString(b, r.ObjectRV)
	b = rbString(b, r.ObjectUID)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Code))
	b = rbString(b, r.ResponseRV)
	b = rbBool(b, r.Watch)
	b = rbString(b, r.RequestedRV)
	b = rbString(b, r.RVMatch)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.TimeoutSeconds))
	b = rbString(b, r.LabelSelector)
	b = rbString(b, r.FieldSelector)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Limit))
	b = rbString(b, r.Continue)
	b = rbMap(b, r.Annotations)
	b = binary.AppendUvarint(b, uint64(len(r.Raw)))
	b = append(b, r.Raw...)
	b = binary.AppendUvarint(b, uint64(len(r.Residual)))
	return append(b, r.Residual...)
}

// rowBinarySize is an upper bound of the size of r in RowBinary, so that a
// batch buffer is allocated once: the strings, up to 3 bytes of length
// each (10 for the raw event and the residual), and the fixed-size columns.
func rowBinarySize(r *Row) int {
	n := len(r.Cluster) + len(r.APIServer) + len(r.AuditID) + len(r.Stage) + len(r.Level) + len(r.Verb) +
		len(r.RequestURI) + len(r.User) + len(r.ImpersonatedUser) + len(r.UserAgent) +
		len(r.SourceIP) + len(r.Resource) + len(r.Subresource) + len(r.APIGroup) +
		len(r.APIVersion) + len(r.Namespace) + len(r.Name) + len(r.ObjectRV) +
		len(r.ObjectUID) + len(r.ResponseRV) + len(r.RequestedRV) + len(r.RVMatch) +
		len(r.LabelSelector) + len(r.FieldSelector) + len(r.Continue) + len(r.Raw) + len(r.Residual)
	n += 25*3 + 2*10 + 2*8 + 8 + 2*4 + 1 + 2*10 // string lengths, raw's and residual's, times, limit, ints, bool, counts
	for _, g := range r.Groups {
		n += 3 + len(g)
	}
	for k, v := range r.Annotations {
		n += 6 + len(k) + len(v)
	}
	return n
}

func rbString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// rbTime encodes a DateTime64(6); the zero time becomes the epoch.
func rbTime(b []byte, t time.Time) []byte {
	var us int64
	if !t.IsZero() {
		us = t.UnixMicro()
	}
	return binary.LittleEndian.AppendUint64(b, uint64(us))
}

func rbBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func rbMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	switch len(m) {
	case 0:
		return b
	case 1:
		for k, v := range m {
			b = rbString(b, k)
			b = rbString(b, v)
		}
		return b
	}
	// Few keys per event: a small stack array avoids an allocation.
	var arr [8]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = rbString(b, k)
		b = rbString(b, m[k])
	}
	return b
}
