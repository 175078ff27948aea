package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// pipeParam is the query parameter SelectFormat binds the pipe's path to.
const pipeParam = "auditlens_select_format_pipe"

// SelectFormat runs sql, a SELECT (which may end in a SETTINGS clause),
// and writes its whole result to w in a ClickHouse output format such as
// "Parquet", as one formatted output (one Parquet file: row groups, then
// the footer), while the engine produces it. It returns the number of
// bytes written to w.
//
// The engine's streaming query API (what Select reads) formats each block
// as an output of its own, which for Parquet is a whole file per block, so
// SelectFormat does not use it. The engine writes the result with INSERT
// INTO FUNCTION file() instead, as it would write a file of its own, into
// a named pipe in a private temporary directory, and SelectFormat copies
// from the pipe to w. Nothing holds the whole result: the engine keeps
// what its format buffers (for Parquet one row group, see
// output_format_parquet_row_group_size and _bytes) and the pipe 64 KiB.
//
// The statement cannot be interrupted once it runs (see Exec). When ctx
// ends or w fails, SelectFormat stops writing to w but goes on reading the
// pipe until the engine is done, then returns the error: closing the pipe
// under the engine would end the process with SIGPIPE. A ctx deadline
// becomes the statement's max_execution_time, as for Exec.
func (e *Embedded) SelectFormat(ctx context.Context, sql, format string, params Params, w io.Writer) (int64, error) {
	if !isFormatName(format) {
		return 0, fmt.Errorf("selecting on the embedded engine: %q is not a ClickHouse format name", format)
	}
	if _, ok := params[pipeParam]; ok {
		return 0, fmt.Errorf("selecting on the embedded engine: the parameter name %s is reserved", pipeParam)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "auditlens-select-")
	if err != nil {
		return 0, fmt.Errorf("selecting %s output on the embedded engine: %w", format, err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "out")
	rd, keeper, err := openPipe(path)
	if err != nil {
		return 0, fmt.Errorf("selecting %s output on the embedded engine: %w", format, err)
	}
	defer rd.Close()
	type copied struct {
		n   int64
		err error
	}
	done := make(chan copied, 1)
	go func() {
		n, err := copyDraining(ctx, w, rd)
		done <- copied{n, err}
	}()

	p := make(Params, len(params)+1)
	for k, v := range params {
		p[k] = v
	}
	p[pipeParam] = path
	stmt := "INSERT INTO FUNCTION file({" + pipeParam + ":String}, '" + format + "')\n" +
		"SETTINGS engine_file_truncate_on_insert = 1\n" + sql
	_, qerr := e.db.Query(ctx, stmt, "", p)
	// The engine has closed its end; closing ours is the reader's EOF
	// (also when the statement failed before the engine opened the pipe).
	keeper.Close()
	c := <-done
	switch {
	case qerr != nil:
		return c.n, fmt.Errorf("selecting %s output of %s on the embedded engine: %w", format, stmtHead(sql), qerr)
	case c.err != nil:
		return c.n, c.err
	}
	return c.n, nil
}

// copyDraining copies src to dst until src ends. When ctx ends or dst
// fails it goes on reading src, discarding it, and returns that error.
func copyDraining(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	var werr error
	for {
		m, err := src.Read(buf)
		if m > 0 && werr == nil {
			if werr = ctx.Err(); werr == nil {
				var k int
				k, werr = dst.Write(buf[:m])
				n += int64(k)
				if werr != nil {
					werr = fmt.Errorf("writing the output: %w", werr)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return n, werr
		}
		if err != nil {
			if werr == nil {
				werr = fmt.Errorf("reading the engine's output: %w", err)
			}
			return n, werr
		}
	}
}

// isFormatName reports whether s can be a ClickHouse format name (they
// are letters, digits and underscores), so that it can be quoted into SQL.
func isFormatName(s string) bool {
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
