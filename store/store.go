// Package store is the one seam to ClickHouse. Two engines implement Store:
// the embedded engine (chDB, loaded lazily through package store/chdb) and a
// ClickHouse server or cluster (clickhouse-go/v2, native protocol). Both run
// the same SQL; callers never see which one they talk to.
package store

import (
	"context"
	"errors"
)

// Params binds server-side query parameters written as {name:Type} in the
// SQL text. Values are passed as strings and typed by the engine from the
// placeholder, so user input never becomes SQL text.
type Params map[string]string

// Store is what every engine provides.
type Store interface {
	// Exec runs a statement that returns no rows (DDL, ALTER, …).
	Exec(ctx context.Context, sql string, params Params) error
	// SelectRows runs sql, a SELECT whose result columns are columns of
	// audit_events by name (RowColumns lists them; any of them, in any
	// order, each of the table's type), and calls fn once per result row
	// decoded into a Row, the fields of the columns not selected left
	// zero. The engines read their typed output (the embedded engine's
	// RowBinary, the server's native columns), not JSON. The Row and its
	// Raw, Residual, Groups and Annotations are reused for the next row:
	// fn copies what it keeps but strings. A result column that is not a
	// Row column, or not of its column's type, fails the query before
	// any row is read. Cancellation and errors are as for Scan.
	SelectRows(ctx context.Context, sql string, params Params, fn func(r *Row) error) error
	// Scanner reads results typed: see Each and Rows.
	Scanner
	// Insert appends rows to audit_events in one batch.
	Insert(ctx context.Context, rows []Row) error
	// Kind names the engine: "chdb" or "clickhouse".
	Kind() string
	// Close releases the engine.
	Close() error
}

// ErrUnsupportedServer is returned when a ClickHouse server is older than
// the oldest version this project supports.
var ErrUnsupportedServer = errors.New("unsupported ClickHouse server version")

// ErrUnknownCluster is returned when a store URL names a cluster
// (?cluster=NAME) the server does not have.
var ErrUnknownCluster = errors.New("unknown ClickHouse cluster")
