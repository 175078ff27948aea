package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/store"
)

// ExportFormat is the file format of an export.
type ExportFormat int

const (
	// NDJSON is one stored event JSON per line, as Events writes it
	// without a jq program. It is the zero value.
	NDJSON ExportFormat = iota
	// Parquet is one Parquet file whose columns are those of
	// audit_events (see ParquetExportSQL), written by the engine.
	Parquet
)

// String returns "ndjson" or "parquet".
func (f ExportFormat) String() string {
	switch f {
	case NDJSON:
		return "ndjson"
	case Parquet:
		return "parquet"
	}
	return fmt.Sprintf("ExportFormat(%d)", int(f))
}

// ErrBadExportFormat is wrapped by ParseExportFormat's errors.
var ErrBadExportFormat = errors.New("unknown export format")

// ParseExportFormat parses "ndjson" (also "jsonl") or "parquet", ignoring
// case.
func ParseExportFormat(s string) (ExportFormat, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "ndjson", "jsonl":
		return NDJSON, nil
	case "parquet":
		return Parquet, nil
	}
	return 0, fmt.Errorf("%w %q: use ndjson or parquet", ErrBadExportFormat, s)
}

// ErrExportUnsupported is returned by Export when the store cannot write
// the format asked for (Parquet on a ClickHouse server).
var ErrExportUnsupported = errors.New("export format not supported by this store")

// FormatSelecter runs SELECTs one after the other and writes all their
// rows to w as one output in a ClickHouse output format, while the engine
// produces it; it returns the bytes written. The embedded engine
// (store.Embedded) provides it. A ClickHouse server's native protocol
// carries result blocks rather than formatted output, so the server engine
// does not.
type FormatSelecter interface {
	SelectFormat(ctx context.Context, format string, settings map[string]string, queries []store.Query, w io.Writer) (int64, error)
}

// ExportStats describes what Export wrote.
type ExportStats struct {
	// Events is the number of events written, for NDJSON; -1 for
	// Parquet, whose rows the engine counts (the file's footer says).
	Events int64
	// Bytes is the number of bytes written.
	Bytes int64
}

// parquetSettings are the engine's settings for an export's Parquet
// file: row groups of at most 65536 rows or 128 MiB, small enough that the
// one being filled stays a modest buffer, large enough for a reader to
// skip by their statistics. The rows reach the writer in blocks of 8192
// rows or 16 MiB (an insert otherwise gathers up to a million rows or
// 256 MiB first): on 800k stored events, these took the export's peak RSS
// from 2.4 GiB to 0.9 GiB. Row groups are encoded on two threads, which
// on the same events took a second off and ~30 MiB more.
var parquetSettings = map[string]string{
	"output_format_parquet_row_group_size":       "65536",
	"output_format_parquet_row_group_size_bytes": "134217728",
	"min_insert_block_size_rows":                 "8192",
	"min_insert_block_size_bytes":                "16777216",
	"output_format_parquet_parallel_encoding":    "1",
}

// ParquetExportSQL is the query a Parquet export runs for each time window
// of f (see timeWindows): every column of audit_events (store.RowColumns,
// which a test holds to the migrations: the typed columns and the
// residual), then raw, in no order and without FINAL. The engine stores
// an event as its residual, raw left empty; Export puts the whole event
// JSON into raw on the rows' way to the file (rebuildRaw), and has the
// window's rows sorted in f's order and an event stored twice sent once
// (store.RowOrder), as the NDJSON export does: the engine's sort moves
// every column of the window; on 800k stored events the export took
// 13–14 s with it and 8–9 s without.
func ParquetExportSQL(f Filter) (string, store.Params) {
	f.All = true
	cols := slices.DeleteFunc(store.RowColumns(), func(c string) bool { return c == "raw" })
	return f.unsortedSQL(strings.Join(append(cols, "raw"), ", "))
}

// rowOrder is the store's name for o.
func rowOrder(o Order) store.RowOrder {
	if o == Desc {
		return store.Descending
	}
	return store.Ascending
}

// rebuildRaw returns the function a Parquet export's rows pass through:
// each row's raw column becomes the event (Events' rebuild: raw as
// stored, or rebuilt from the typed columns and residual), bytes as they
// are.
func rebuildRaw() func(r *store.Row) error {
	var rb rebuilder
	return func(r *store.Row) error {
		ev, err := rb.event(r)
		if err != nil {
			return fmt.Errorf("event %s: %w", keyOf(r), err)
		}
		r.Raw = ev
		return nil
	}
}

// Export writes every event f matches (its Limit is ignored), in f's
// order, to w in format, as the store produces them: nothing holds the
// whole selection, however many events match.
//
// progress, when not nil, is called for Parquet after each time window's
// events have gone to the engine, with the number of events sent so far
// as counted when the export started (the engine encodes and counts the
// rows; the caller counts NDJSON lines itself).
//
// NDJSON is exactly what Events writes for f with All set and no jq
// program (auditlens query --all): each stored event JSON on a line, a
// copy of an event stored twice skipped. Parquet needs a FormatSelecter
// (the embedded engine); on another store Export returns an error
// wrapping ErrExportUnsupported before reading anything.
//
// On error, what was written is incomplete. Errors wrap ErrBadFilter, the
// store's error or w's.
func Export(ctx context.Context, st Selecter, f Filter, format ExportFormat, w io.Writer, progress func(events int64)) (ExportStats, error) {
	f.All = true
	if err := f.Validate(); err != nil {
		return ExportStats{}, err
	}
	switch format {
	case NDJSON:
		// Every limit off: the caller asked for every event, and ctx
		// bounds the time.
		stats, err := Events(ctx, st, f, nil, Limits{Timeout: -1, MaxOutputs: -1, MaxOutputBytes: -1}, w)
		return ExportStats{Events: int64(stats.Emitted), Bytes: stats.Bytes}, err
	case Parquet:
		fs, ok := st.(FormatSelecter)
		if !ok {
			return ExportStats{Events: -1}, fmt.Errorf("%w: Parquet is written by the embedded engine only; "+
				"a ClickHouse server's native protocol sends result blocks, not files: export ndjson instead", ErrExportUnsupported)
		}
		windows, err := timeWindows(ctx, st, f)
		if err != nil {
			return ExportStats{Events: -1}, err
		}
		if len(windows) == 0 {
			windows = []window{{Filter: f}} // no events: a file with the columns and no rows
		}
		queries := make([]store.Query, len(windows))
		var sent int64
		for i, win := range windows {
			queries[i].SQL, queries[i].Params = ParquetExportSQL(win.Filter)
			queries[i].Rows = rebuildRaw()
			queries[i].Order = rowOrder(win.Order)
			if progress != nil {
				n := win.events
				queries[i].Sent = func() {
					sent += n
					progress(sent)
				}
			}
		}
		n, err := fs.SelectFormat(ctx, "Parquet", parquetSettings, queries, w)
		if err != nil {
			err = fmt.Errorf("exporting events as Parquet: %w", err)
		}
		return ExportStats{Events: -1, Bytes: n}, err
	}
	return ExportStats{}, fmt.Errorf("%w: %v", ErrBadExportFormat, format)
}
