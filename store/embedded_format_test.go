package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedSelectFormat: SelectFormat writes one whole formatted output
// (one Parquet file, many row groups) that the engine reads back, and
// fails cleanly, without hanging or a SIGPIPE, when the statement fails
// or the writer does.
func TestEmbeddedSelectFormat(t *testing.T) {
	e := openTestEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sel = "SELECT number AS n, repeat('x', {w:UInt32}) AS s FROM numbers(200000) ORDER BY n SETTINGS output_format_parquet_row_group_size = 10000"

	t.Run("parquet", func(t *testing.T) {
		var buf bytes.Buffer
		n, err := e.SelectFormat(ctx, sel, "Parquet", Params{"w": "100"}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(buf.Len()) || !bytes.HasPrefix(buf.Bytes(), []byte("PAR1")) || !bytes.HasSuffix(buf.Bytes(), []byte("PAR1")) {
			t.Fatalf("%d bytes reported, %d written; want one Parquet file (PAR1 … PAR1)", n, buf.Len())
		}
		path := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		got := embSelectAll(t, e, ctx, "SELECT count() AS c, sum(n) AS total, max(length(s)) AS l FROM file({f:String}, Parquet)", Params{"f": path})
		if want := `{"c":200000,"total":19999900000,"l":100}`; len(got) != 1 || got[0] != want {
			t.Errorf("read back %v, want %s", got, want)
		}
		// Row groups of about 10000 rows (the engine cuts them at block
		// boundaries): written as they fill, not one at the end.
		got = embSelectAll(t, e, ctx, "SELECT num_row_groups BETWEEN 10 AND 30 AS ok, num_row_groups FROM file({f:String}, ParquetMetadata)", Params{"f": path})
		if len(got) != 1 || !strings.HasPrefix(got[0], `{"ok":1,`) {
			t.Errorf("metadata %v, want 10 to 30 row groups", got)
		}
	})

	t.Run("statement fails", func(t *testing.T) {
		var buf bytes.Buffer
		_, err := e.SelectFormat(ctx, "SELECT no_such_column FROM numbers(1)", "Parquet", nil, &buf)
		if err == nil || !strings.Contains(err.Error(), "no_such_column") || buf.Len() != 0 {
			t.Errorf("err %v, %d bytes; want the engine's error and nothing written", err, buf.Len())
		}
	})

	t.Run("writer fails", func(t *testing.T) {
		boom := errors.New("disk full")
		w := &failingWriter{after: 64 << 10, err: boom}
		n, err := e.SelectFormat(ctx, sel, "Parquet", Params{"w": "100"}, w)
		if !errors.Is(err, boom) || n > 64<<10 {
			t.Errorf("err %v after %d bytes; want the writer's error", err, n)
		}
		// The engine finished its statement: the pool is usable.
		if got := embSelectAll(t, e, ctx, "SELECT 1 AS x", nil); len(got) != 1 {
			t.Errorf("after a failed writer: %v", got)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		w := &failingWriter{after: 64 << 10, onFull: ccancel}
		_, err := e.SelectFormat(cctx, sel, "Parquet", Params{"w": "100"}, w)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		if _, err := e.SelectFormat(ctx, "SELECT 1", "Parquet') --", nil, &bytes.Buffer{}); err == nil {
			t.Error("a format name with SQL in it was accepted")
		}
		if _, err := e.SelectFormat(ctx, "SELECT 1", "Parquet", Params{pipeParam: "x"}, &bytes.Buffer{}); err == nil {
			t.Error("the reserved parameter name was accepted")
		}
	})
}

// failingWriter accepts after bytes, then fails with err (or, with onFull
// set, calls it and goes on accepting).
type failingWriter struct {
	after  int
	n      int
	err    error
	onFull func()
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.after {
		if w.onFull != nil {
			w.onFull()
			w.n += len(p)
			return len(p), nil
		}
		return 0, w.err
	}
	w.n += len(p)
	return len(p), nil
}
