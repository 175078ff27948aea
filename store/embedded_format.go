package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/auditlens/auditlens/internal/chunks"
)

// Query is one SELECT and its parameters.
type Query struct {
	SQL    string
	Params Params
	// Sent, when not nil, is called by SelectFormat once every row of
	// the query has gone to the engine's formatting.
	Sent func()
	// Rows, when not nil, is called with each row on its way to the
	// formatting, decoded into a Row as SelectRows decodes it (the
	// query's columns must be Row columns), which it may change (the
	// row's columns are encoded again when it returns; it must not keep
	// the Row, whose buffers are the decoder's). The rows then travel as
	// RowBinary. Either every query of a SelectFormat has one or none has.
	Rows func(r *Row) error
	// Order, with Rows, holds the query's rows until its end and sends
	// them sorted by event (see RowOrder), a row with the key of the one before
	// it left out: the query then needs neither ORDER BY nor FINAL. The
	// engine sorts a result by moving every column of it; here only the
	// keys move. Unordered (the zero value) sends the rows as they come.
	Order RowOrder
}

// RowOrder is the order in which SelectFormat sends a query's rows.
type RowOrder int

const (
	// Unordered sends rows as the engine returns them.
	Unordered RowOrder = iota
	// Ascending sorts rows by time, audit ID, stage and cluster, as
	// ORDER BY ts, audit_id, stage, cluster does (strings bytewise).
	Ascending
	// Descending is Ascending reversed.
	Descending
)

// SelectFormat runs the SELECTs of queries one after the other and writes
// all their rows to w as one output in a ClickHouse output format such as
// "Parquet" (one Parquet file: row groups, then the footer), while the
// engine produces it. The queries must return the same columns. settings
// are ClickHouse settings of the formatting, such as
// output_format_parquet_row_group_size. It returns the number of bytes
// written to w.
//
// The engine's streaming query API (what Scan and SelectRows read) formats each block
// as an output of its own, which for Parquet is a whole file per block,
// and one query cannot be formatted across several. So the rows travel in
// the engine's Native format: each query's output is streamed into one
// streaming INSERT INTO FUNCTION file(PIPE, format, STRUCTURE) on another
// connection, which the engine formats as it would write a file of its
// own, into a named pipe in a private temporary directory; SelectFormat
// copies from the pipe to w. Nothing holds the whole result: the engine
// keeps what one query selects (sorts) and what the format buffers (for
// Parquet one row group), the pipes a few MiB, and an ordered query's
// rows are held here until its end.
//
// When a query fails, ctx ends or w fails, SelectFormat stops sending
// rows, lets the insert finish on what it has (the engine then closes the
// pipe; what it writes after the error is discarded) and returns the
// error. The pipe is never closed under the engine, which would end the
// process with SIGPIPE: if the insert itself fails, the engine may keep
// the pipe open, and SelectFormat leaves a goroutine draining it.
func (e *Embedded) SelectFormat(ctx context.Context, format string, settings map[string]string, queries []Query, w io.Writer) (int64, error) {
	if !isName(format) {
		return 0, fmt.Errorf("formatting on the embedded engine: %q is not a ClickHouse format name", format)
	}
	if len(queries) == 0 {
		return 0, errors.New("formatting on the embedded engine: no query")
	}
	var set strings.Builder
	set.WriteString("engine_file_truncate_on_insert = 1")
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if !isName(k) || !isName(settings[k]) {
			return 0, fmt.Errorf("formatting on the embedded engine: setting %q = %q is not a name and a plain value", k, settings[k])
		}
		set.WriteString(", " + k + " = " + settings[k])
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// The rows travel as Native blocks, or as RowBinary through the
	// queries' Rows.
	typed := queries[0].Rows != nil
	ordered := queries[0].Order != Unordered
	for _, q := range queries {
		if (q.Rows != nil) != typed {
			return 0, errors.New("formatting on the embedded engine: every query or none has Rows")
		}
		if (q.Order != Unordered) != ordered || ordered && q.Rows == nil {
			return 0, errors.New("formatting on the embedded engine: every query or none has an Order, and Rows with it")
		}
	}
	selectFormat, insertFormat := "Native", "Native"
	if typed {
		selectFormat, insertFormat = "RowBinaryWithNamesAndTypes", "RowBinary"
	}
	structure, err := e.structure(ctx, queries[0])
	if err != nil {
		return 0, err
	}

	dir, err := os.MkdirTemp("", "auditlens-format-")
	if err != nil {
		return 0, fmt.Errorf("formatting %s on the embedded engine: %w", format, err)
	}
	defer os.RemoveAll(dir) // the pipe's name; open ends stay valid
	path := filepath.Join(dir, "out")
	rd, keeper, err := openPipe(path)
	if err != nil {
		return 0, fmt.Errorf("formatting %s on the embedded engine: %w", format, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The pipe to w, through a gate that SelectFormat shuts when it
	// returns without waiting for the engine.
	out := &gate{w: w}
	done := make(chan error, 1)
	go func() {
		err := out.copyFrom(ctx, rd, cancel) // a failing w stops the rows
		rd.Close()                           // after EOF: the engine has closed its end
		done <- err
	}()

	// The queries' rows, in Native, to the insert. They stop at a chunk's
	// end, so that the insert sees whole blocks and finishes normally.
	pr, pw := io.Pipe()
	var serr error
	selected := make(chan struct{})
	go func() {
		defer close(selected)
		var held *heldRows // an ordered query's rows, until its end
		if ordered {
			held = new(heldRows)
		}
		var out []byte
		for _, q := range queries {
			send := func(chunk []byte) error {
				_, err := pw.Write(chunk)
				return err
			}
			var rows *rowTransform
			if q.Rows != nil {
				rows = newRowTransform(q.Rows, pw)
				rows.held = held
				send = rows.write
			}
			serr = e.db.QueryStream(ctx, q.SQL, selectFormat, q.Params, send)
			if serr == nil && rows != nil {
				serr = rows.flush()
			}
			if serr == nil && held != nil {
				// The next window is read once this one is formatted:
				// reading it meanwhile was a second faster on 800k
				// events but held two windows, 1.3 GiB at the peak
				// rather than 1.0.
				out, serr = held.writeSorted(pw, q.Order, out[:0])
				held.reset()
			}
			if serr != nil {
				serr = fmt.Errorf("selecting %s on the embedded engine: %w", stmtHead(q.SQL), serr)
				break
			}
			if q.Sent != nil {
				q.Sent()
			}
		}
		pw.Close()
	}()

	// The streaming insert takes no parameters: the path and the structure
	// are quoted into the statement (neither comes from a user). It runs
	// to the end of what the queries send, whatever ctx says.
	stmt := "INSERT INTO FUNCTION file(" + quoteString(path) + ", '" + format + "', " + quoteString(structure) + ")\n" +
		"SETTINGS " + set.String()
	ierr := e.db.InsertFrom(context.WithoutCancel(ctx), stmt, insertFormat, pr)
	pr.CloseWithError(errInsertEnded) // the queries stop if it ended early
	<-selected
	if ierr != nil {
		out.shut()
		keeper.Close()
		if serr != nil && !errors.Is(serr, errInsertEnded) {
			return out.written(), serr
		}
		return out.written(), fmt.Errorf("writing %s on the embedded engine: %w", format, ierr)
	}
	keeper.Close() // the engine has closed its end: this is the reader's EOF
	cerr := <-done
	switch {
	case cerr != nil:
		return out.written(), cerr
	case serr != nil:
		return out.written(), serr
	}
	return out.written(), nil
}

// rowTransform passes RowBinaryWithNamesAndTypes output through a row
// function: it decodes each row, calls fn and writes the row's columns
// again in RowBinary, in the output's order, to w, a MiB or so at a
// time.
type rowTransform struct {
	dec  rowDecoder
	w    io.Writer
	out  []byte
	held *heldRows // the rows, when the query is ordered, for SelectFormat to sort
}

// rowTransformFlush is how much RowBinary a rowTransform gathers before
// it writes.
const rowTransformFlush = 1 << 20

func newRowTransform(fn func(*Row) error, w io.Writer) *rowTransform {
	t := &rowTransform{w: w}
	t.dec.fn = func(r *Row) error {
		// The decoder's buffers, which fn may replace.
		raw, res, groups, ann := r.Raw, r.Residual, r.Groups, r.Annotations
		err := fn(r)
		if err == nil && t.held != nil {
			t.held.add(r, t.dec.cols)
		} else if err == nil {
			for _, c := range t.dec.cols {
				t.out = appendColumn(t.out, r, c)
			}
		}
		r.Raw, r.Residual, r.Groups, r.Annotations = raw, res, groups, ann
		if err != nil {
			return err
		}
		if len(t.out) >= rowTransformFlush {
			return t.send()
		}
		return nil
	}
	return t
}

func (t *rowTransform) write(chunk []byte) error { return t.dec.write(chunk) }

func (t *rowTransform) send() error {
	if len(t.out) == 0 {
		return nil
	}
	_, err := t.w.Write(t.out)
	t.out = t.out[:0]
	return err
}

// flush writes what is gathered, at the end of the output.
func (t *rowTransform) flush() error {
	if err := t.dec.end(); err != nil {
		return err
	}
	return t.send()
}

// heldRows are the rows of one ordered query, encoded in RowBinary, with
// their keys (internal/chunks).
type heldRows struct {
	chunks.Sorted
}

// add keeps r's key and its columns cols, in RowBinary.
func (h *heldRows) add(r *Row, cols []int) {
	buf := h.Begin(r.Time.UnixMicro(), r.AuditID, r.Stage, r.Cluster)
	for _, col := range cols {
		buf = appendColumn(buf, r, col)
	}
	h.End(buf)
}

// writeSorted writes the rows' RowBinary to w in order o, a row with the
// key of the one before it left out, gathering up to rowTransformFlush
// bytes in out, which it returns for reuse.
func (h *heldRows) writeSorted(w io.Writer, o RowOrder, out []byte) ([]byte, error) {
	h.Sort(o == Descending)
	err := h.Each(func(_ chunks.Key, row []byte) error {
		out = append(out, row...)
		if len(out) < rowTransformFlush {
			return nil
		}
		_, err := w.Write(out)
		out = out[:0]
		return err
	})
	if err == nil && len(out) > 0 {
		_, err = w.Write(out)
		out = out[:0]
	}
	return out, err
}

func (h *heldRows) reset() { h.Reset() }

// errInsertEnded stops the queries of SelectFormat when its insert ended
// before reading all they send (it failed).
var errInsertEnded = errors.New("the insert ended")

// gate passes the engine's output to w until it is shut, then discards it.
type gate struct {
	mu   sync.Mutex
	w    io.Writer
	n    int64
	shot bool
}

// copyFrom copies src through the gate until EOF. After ctx ends or w
// fails it calls stopped, goes on reading src, discarding it, and returns
// that error.
func (g *gate) copyFrom(ctx context.Context, src io.Reader, stopped func()) error {
	buf := make([]byte, 256<<10)
	var stop error
	for {
		m, err := src.Read(buf)
		if m > 0 && stop == nil {
			if stop = ctx.Err(); stop == nil {
				stop = g.write(buf[:m])
			}
			if stop != nil {
				stopped()
			}
		}
		if errors.Is(err, io.EOF) {
			return stop
		}
		if err != nil {
			if stop == nil {
				stop = fmt.Errorf("reading the engine's output: %w", err)
			}
			return stop
		}
	}
}

func (g *gate) write(p []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shot {
		return errors.New("the output was given up")
	}
	k, err := g.w.Write(p)
	g.n += int64(k)
	if err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	return nil
}

// shut makes the gate discard what comes: nothing is written to w once
// shut returns.
func (g *gate) shut() {
	g.mu.Lock()
	g.shot = true
	g.mu.Unlock()
}

func (g *gate) written() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// structure returns the columns of q's result as a file() structure:
// "`name` Type, ...".
func (e *Embedded) structure(ctx context.Context, q Query) (string, error) {
	out, err := e.db.Query(ctx, "DESCRIBE ("+q.SQL+")", "TabSeparatedRaw", q.Params)
	if err != nil {
		return "", fmt.Errorf("describing the result of %s on the embedded engine: %w", stmtHead(q.SQL), err)
	}
	var cols []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 || !isName(f[0]) {
			return "", fmt.Errorf("describing the result of %s on the embedded engine: unexpected column %q", stmtHead(q.SQL), line)
		}
		cols = append(cols, "`"+f[0]+"` "+f[1])
	}
	return strings.Join(cols, ", "), nil
}

// quoteString renders s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// isName reports whether s is made of letters, digits and underscores
// only (a format or setting name, a plain setting value), so that it can be
// written into SQL as it is.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
