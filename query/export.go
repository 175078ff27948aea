package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ExportFormat is the file format of an export.
type ExportFormat int

const (
	// NDJSON is one stored event JSON per line, as Events writes it
	// without a jq program. It is the zero value.
	NDJSON ExportFormat = iota
	// Parquet is one Parquet file whose columns are the typed columns of
	// audit_events and raw, the event JSON (see parquetEvent).
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

// ExportStats describes what Export wrote.
type ExportStats struct {
	// Events is the number of events written.
	Events int64
	// Bytes is the number of bytes written.
	Bytes int64
}

// Export writes every event f matches (its Limit is ignored), in f's
// order, to w in format, as the store produces them: nothing holds the
// whole selection, however many events match. Any store will do.
//
// progress, when not nil, is called for Parquet after each time window's
// events are written, with the number of events written so far (the
// caller counts NDJSON lines itself).
//
// NDJSON is exactly what Events writes for f with All set and no jq
// program (auditlens query --all): each stored event JSON on a line, a
// copy of an event stored twice skipped. Parquet has one row for each of
// those events, in the same order, its raw column that line (without the
// newline).
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
		cw := &countWriter{w: w}
		n, err := exportParquet(ctx, st, f, cw, progress)
		if err != nil {
			err = fmt.Errorf("exporting events as Parquet: %w", err)
		}
		return ExportStats{Events: n, Bytes: cw.n}, err
	}
	return ExportStats{}, fmt.Errorf("%w: %v", ErrBadExportFormat, format)
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
