package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store/chdb"
)

// TestEmbeddedSelectFormat: SelectFormat writes one whole formatted output
// (one Parquet file, many row groups) that the engine reads back, and
// fails cleanly, without hanging or a SIGPIPE, when the statement fails
// or the writer does.
func TestEmbeddedSelectFormat(t *testing.T) {
	e := openTestEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Three queries whose rows make one file: 0..199999 in order.
	var queries []Query
	for i := range 3 {
		queries = append(queries, Query{
			SQL: "SELECT number AS n, repeat('x', {w:UInt32}) AS s, toLowCardinality(toString(number % 7)) AS lc, " +
				"toDateTime64(number, 6, 'UTC') AS ts FROM numbers({from:UInt64}, {count:UInt64}) ORDER BY n",
			Params: Params{"w": "100", "from": strconv.Itoa([]int{0, 50000, 120000}[i]), "count": strconv.Itoa([]int{50000, 70000, 80000}[i])},
		})
	}
	settings := map[string]string{"output_format_parquet_row_group_size": "10000"}

	t.Run("parquet", func(t *testing.T) {
		var buf bytes.Buffer
		n, err := e.SelectFormat(ctx, "Parquet", settings, queries, &buf)
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
		got := embJSONRows(t, e, ctx, "SELECT count() AS c, sum(n) AS total, max(length(s)) AS l, uniqExact(lc) AS lcs, "+
			"toString(max(ts)) AS hi, groupArray(n) = range(200000) AS ordered FROM file({f:String}, Parquet) "+
			"SETTINGS max_threads = 1, input_format_parquet_preserve_order = 1", Params{"f": path})
		if want := `{"c":200000,"total":19999900000,"l":100,"lcs":7,"hi":"1970-01-03 07:33:19.000000","ordered":1}`; len(got) != 1 || got[0] != want {
			t.Errorf("read back %v, want %s", got, want)
		}
		// Row groups of about 10000 rows (the engine cuts them at block
		// boundaries): written as they fill, not one at the end.
		got = embJSONRows(t, e, ctx, "SELECT num_row_groups BETWEEN 10 AND 40 AS ok, num_row_groups FROM file({f:String}, ParquetMetadata)", Params{"f": path})
		if len(got) != 1 || !strings.HasPrefix(got[0], `{"ok":1,`) {
			t.Errorf("metadata %v, want 10 to 40 row groups", got)
		}
	})

	t.Run("no rows", func(t *testing.T) {
		var buf bytes.Buffer
		if _, err := e.SelectFormat(ctx, "Parquet", nil, []Query{{SQL: "SELECT number AS n FROM numbers(0)"}}, &buf); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "empty.parquet")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := embJSONRows(t, e, ctx, "SELECT count() AS c FROM file({f:String}, Parquet, 'n UInt64')", Params{"f": path}); len(got) != 1 || got[0] != `{"c":0}` {
			t.Errorf("read back %v (%d bytes), want no rows", got, buf.Len())
		}
	})

	t.Run("statement fails", func(t *testing.T) {
		var buf bytes.Buffer
		_, err := e.SelectFormat(ctx, "Parquet", nil, []Query{{SQL: "SELECT no_such_column FROM numbers(1)"}}, &buf)
		if err == nil || !strings.Contains(err.Error(), "no_such_column") || buf.Len() != 0 {
			t.Errorf("err %v, %d bytes; want the engine's error and nothing written", err, buf.Len())
		}
		// The second query fails after the first has sent rows.
		bad := append(slices.Clone(queries[:1]), Query{SQL: "SELECT throwIf(number = 5, 'boom') AS n, '' AS s, toLowCardinality('') AS lc, toDateTime64(0, 6, 'UTC') AS ts FROM numbers(10)"})
		if _, err := e.SelectFormat(ctx, "Parquet", nil, bad, io.Discard); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Errorf("a query failing midway: err %v, want its error", err)
		}
		// The insert fails: the second query's columns are not the first's.
		bad[1] = Query{SQL: "SELECT 'text' AS n, [1] AS s FROM numbers(10)"}
		if _, err := e.SelectFormat(ctx, "Parquet", nil, bad, io.Discard); err == nil || !strings.Contains(err.Error(), "writing Parquet") {
			t.Errorf("a failing insert: err %v, want its error", err)
		}
	})

	t.Run("writer fails", func(t *testing.T) {
		boom := errors.New("disk full")
		w := &failingWriter{after: 64 << 10, err: boom}
		n, err := e.SelectFormat(ctx, "Parquet", settings, queries, w)
		if !errors.Is(err, boom) || n > 64<<10 {
			t.Errorf("err %v after %d bytes; want the writer's error", err, n)
		}
		// The rows stop when the writer fails: a selection without end
		// (system.numbers) returns at all only if they do. The wait is a
		// guard against hanging the package, not a speed limit: a loaded
		// machine once took 44 s to get there.
		big := []Query{{SQL: "SELECT number AS n, repeat('x', 1000) AS s FROM system.numbers"}}
		done := make(chan error, 1)
		go func() {
			_, err := e.SelectFormat(ctx, "Parquet", settings, big, &failingWriter{after: 64 << 10, err: boom})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, boom) {
				t.Errorf("err %v, want the writer's error", err)
			}
		case <-time.After(5 * time.Minute):
			t.Fatal("an endless selection still running 5 minutes after the writer failed: the rows did not stop")
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		w := &failingWriter{after: 64 << 10, onFull: ccancel}
		_, err := e.SelectFormat(cctx, "Parquet", settings, queries, w)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	})

	// After each failure the pool is whole: as many statements at once as
	// it has connections.
	var wg sync.WaitGroup
	for range chdb.PoolSize {
		wg.Go(func() {
			if got := embJSONRows(t, e, ctx, "SELECT 1 AS x", nil); len(got) != 1 {
				t.Errorf("after the failures: %v", got)
			}
		})
	}
	wg.Wait()

	t.Run("bad input", func(t *testing.T) {
		q := []Query{{SQL: "SELECT 1"}}
		if _, err := e.SelectFormat(ctx, "Parquet') --", nil, q, &bytes.Buffer{}); err == nil {
			t.Error("a format name with SQL in it was accepted")
		}
		if _, err := e.SelectFormat(ctx, "Parquet", map[string]string{"a": "1; DROP"}, q, &bytes.Buffer{}); err == nil {
			t.Error("a setting value with SQL in it was accepted")
		}
		if _, err := e.SelectFormat(ctx, "Parquet", nil, nil, &bytes.Buffer{}); err == nil {
			t.Error("no query was accepted")
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
