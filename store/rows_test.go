package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rowsTestRows are rows of every column's edge values: empty, unicode and
// non-UTF-8 strings, arrays and maps of no, one and several items, the
// zero time (stored as the epoch), integer extremes.
func rowsTestRows() []Row {
	rows := embTestRows()
	rows = append(rows,
		Row{
			Cluster: "c\x00\xff", APIServer: "日本", AuditID: "z-zero-time", Stage: "Panic",
			Level: "\xc3\x28", Verb: "", RequestURI: strings.Repeat("ü", 300),
			User: "u", Groups: []string{"", "\xff\xfe", "é"}, ImpersonatedUser: "imp", UserAgent: "ua\n",
			SourceIP: "::1", Resource: "r", Subresource: "s", APIGroup: "g", APIVersion: "v",
			Namespace: "n", Name: "name\"'\\", ObjectRV: "1", ObjectUID: "uid", Code: math.MinInt32,
			ResponseRV: "2", RequestedRV: "3", RVMatch: "NotOlderThan", TimeoutSeconds: -1,
			LabelSelector: "a=b", FieldSelector: "c=d", Limit: math.MinInt64, Continue: "tok",
			Annotations: map[string]string{"only": "\xff"},
			Raw:         []byte("\x00\xff{\"x\":1}\n"), Residual: bytes.Repeat([]byte{0, 1, 0xff}, 5000),
		},
		Row{Cluster: "prod-eu", AuditID: "z-many-annotations", Stage: "ResponseComplete",
			// Late, but before 2262: clickhouse-go carries DateTime64
			// through int64 nanoseconds (2299, the type's end, overflows).
			Time:        time.Date(2261, 12, 31, 23, 59, 59, 999999000, time.UTC),
			Annotations: map[string]string{"a": "1", "b": "", "": "empty key", "d": "日本", "e": "5", "f": "6", "g": "7", "h": "8", "i": "9"}},
	)
	return rows
}

// normalizeRow is r as it reads back: the zero time is the epoch, empty
// slices and maps nil, every time in UTC.
func normalizeRow(r Row) Row {
	for _, t := range []*time.Time{&r.Time, &r.ReceivedAt} {
		if t.IsZero() {
			*t = time.UnixMicro(0)
		}
		*t = t.UTC()
	}
	if len(r.Groups) == 0 {
		r.Groups = nil
	}
	if len(r.Annotations) == 0 {
		r.Annotations = nil
	}
	if len(r.Raw) == 0 {
		r.Raw = nil
	}
	if len(r.Residual) == 0 {
		r.Residual = nil
	}
	return r
}

// cloneRow copies what SelectRows reuses.
func cloneRow(r *Row) Row {
	c := *r
	c.Raw = bytes.Clone(r.Raw)
	c.Residual = bytes.Clone(r.Residual)
	c.Groups = append([]string(nil), r.Groups...)
	c.Annotations = nil
	if len(r.Annotations) > 0 {
		c.Annotations = make(map[string]string, len(r.Annotations))
		for k, v := range r.Annotations {
			c.Annotations[k] = v
		}
	}
	return normalizeRow(c)
}

func compareRows(t *testing.T, got, want []Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		w := normalizeRow(want[i])
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], w)
		}
	}
}

func allColumnsSQL() string {
	return "SELECT " + strings.Join(RowColumns(), ", ") + " FROM audit_events ORDER BY audit_id"
}

// TestEmbeddedSelectRowsRoundTrip: every column of every row comes back
// from the engine's RowBinary as it was inserted; with one row per block,
// each chunk is an output with its header; a subset of the columns in
// another order fills only those fields.
func TestEmbeddedSelectRowsRoundTrip(t *testing.T) {
	ctx := context.Background()
	e := openTestTable(t)
	want := rowsTestRows()
	if err := e.Insert(ctx, want); err != nil {
		t.Fatal(err)
	}
	sortRowsByID(want)
	for _, sql := range []string{allColumnsSQL(), allColumnsSQL() + " SETTINGS max_block_size = 1"} {
		var got []Row
		if err := e.SelectRows(ctx, sql, nil, func(r *Row) error {
			got = append(got, cloneRow(r))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		compareRows(t, got, want)
	}

	var got []Row
	err := e.SelectRows(ctx, "SELECT annotations, residual, code, audit_id FROM audit_events WHERE audit_id = {id:String}",
		Params{"id": "z-zero-time"}, func(r *Row) error {
			got = append(got, cloneRow(r))
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	w := rowsTestRows()[3]
	compareRows(t, got, []Row{{AuditID: w.AuditID, Code: w.Code, Annotations: w.Annotations, Residual: w.Residual}})

	// No rows: fn is not called.
	if err := e.SelectRows(ctx, allColumnsSQL()+" LIMIT 0", nil, func(*Row) error {
		t.Error("fn called for no rows")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func sortRowsByID(rows []Row) {
	for i := range rows {
		for j := i + 1; j < len(rows); j++ {
			if rows[j].AuditID < rows[i].AuditID {
				rows[i], rows[j] = rows[j], rows[i]
			}
		}
	}
}

// TestEmbeddedSelectRowsStraddling feeds the engine's own output to the
// decoder cut at every byte (and in pieces of several sizes): a row or
// the header split across chunks reads the same.
func TestEmbeddedSelectRowsStraddling(t *testing.T) {
	ctx := context.Background()
	e := openTestTable(t)
	want := rowsTestRows()
	if err := e.Insert(ctx, want); err != nil {
		t.Fatal(err)
	}
	sortRowsByID(want)
	out, err := e.db.Query(ctx, allColumnsSQL(), "RowBinaryWithNamesAndTypes", nil)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(chunks ...[]byte) ([]Row, error) {
		var got []Row
		d := &rowDecoder{fn: func(r *Row) error {
			got = append(got, cloneRow(r))
			return nil
		}}
		for _, c := range chunks {
			if err := d.write(bytes.Clone(c)); err != nil {
				return nil, err
			}
		}
		return got, d.end()
	}
	for cut := 1; cut < len(out); cut++ {
		got, err := decode(out[:cut], out[cut:])
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if !reflect.DeepEqual(got, func() []Row {
			n := make([]Row, len(want))
			for i := range want {
				n[i] = normalizeRow(want[i])
			}
			return n
		}()) {
			t.Fatalf("cut at %d: rows differ", cut)
		}
	}
	for _, size := range []int{1, 3, 64, 5000} {
		var chunks [][]byte
		for b := out; len(b) > 0; b = b[min(size, len(b)):] {
			chunks = append(chunks, b[:min(size, len(b))])
		}
		got, err := decode(chunks...)
		if err != nil {
			t.Fatalf("pieces of %d: %v", size, err)
		}
		compareRows(t, got, want)
	}
	// Output that stops within a row is an error.
	if _, err := decode(out[:len(out)-1]); err == nil {
		t.Error("a truncated output decoded without an error")
	}
}

// TestEmbeddedSelectRowsErrors: result columns that are not Row columns,
// or not of their type, fail before any row; fn's error comes back as it
// was.
func TestEmbeddedSelectRowsErrors(t *testing.T) {
	ctx := context.Background()
	e := openTestTable(t)
	if err := e.Insert(ctx, rowsTestRows()); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT cluster, 1 AS x FROM audit_events",
		"SELECT toString(code) AS code FROM audit_events",
		"SELECT cluster, cluster FROM audit_events",
	} {
		err := e.SelectRows(ctx, sql, nil, func(*Row) error {
			t.Errorf("%s: fn called", sql)
			return nil
		})
		if err == nil {
			t.Errorf("%s: no error", sql)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := e.SelectRows(ctx, allColumnsSQL(), nil, func(*Row) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("fn's error: got %v after %d rows, want it as it was after 1", err, n)
	}
}

// TestRowBinaryEncodeDecode: the decoder reads what the encoder writes,
// for every column, without the engine.
func TestRowBinaryEncodeDecode(t *testing.T) {
	rows := rowsTestRows()
	data := rowBinaryHeader(RowColumns())
	for i := range rows {
		data = appendReadRow(data, &rows[i])
	}
	var got []Row
	d := &rowDecoder{fn: func(r *Row) error { got = append(got, cloneRow(r)); return nil }}
	if err := d.write(data); err != nil {
		t.Fatal(err)
	}
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	compareRows(t, got, rows)
}

// appendReadRow appends r as the engine returns a SELECT of RowColumns:
// received_at and request_uri as values, not as their stored forms.
func appendReadRow(b []byte, r *Row) []byte {
	for i := range rowColumns {
		b = appendColumn(b, r, i)
	}
	return b
}

// rowBinaryHeader is the RowBinaryWithNamesAndTypes header of the named
// Row columns.
func rowBinaryHeader(names []string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(names)))
	for _, n := range names {
		b = rbString(b, n)
	}
	for _, n := range names {
		b = rbString(b, rowColumns[columnIndex[n]].typ)
	}
	return b
}

// FuzzRowDecoder: no input makes the decoder panic or allocate beyond
// its input (lengths are bounded by the bytes left). The engine's output
// is trusted; this guards the decoder's own bounds.
func FuzzRowDecoder(f *testing.F) {
	rows := rowsTestRows()
	full := rowBinaryHeader(RowColumns())
	for i := range rows {
		full = appendReadRow(full, &rows[i])
	}
	f.Add(full, 7)
	f.Add(rowBinaryHeader([]string{"code", "user_groups", "annotations"}), 0)
	f.Add([]byte{1, 4, 'c', 'o', 'd', 'e', 5, 'I', 'n', 't', '3', '2', 1, 2, 3}, 2)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		d := &rowDecoder{fn: func(r *Row) error { return nil }}
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		if d.write(data[:cut]) == nil && d.write(data[cut:]) == nil {
			_ = d.end()
		}
	})
}

// TestServerSelectRows follows rows through the server engine's Insert,
// the native wire format (encoded and decoded by clickhouse-go) and
// SelectRows, which scans the driver's columns into Rows; the integration
// test does the same against a real server.
func TestServerSelectRows(t *testing.T) {
	fc := srvNewFakeConn(t)
	s := &server{conn: fc, log: srvDiscard()}
	want := rowsTestRows()
	if err := s.Insert(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	fc.rows = &srvFakeRows{block: srvWireRoundTrip(t, fc.batches[0].block)}
	var got []Row
	if err := s.SelectRows(context.Background(), "SELECT * FROM audit_events", nil, func(r *Row) error {
		got = append(got, cloneRow(r))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	compareRows(t, got, want)

	// A column that is not a Row's fails before any row.
	fc.rows = &srvFakeRows{block: srvWireRoundTrip(t, fc.batches[0].block)}
	fc.rows.block.Columns[3], fc.rows.block.Columns[4] = fc.rows.block.Columns[4], fc.rows.block.Columns[3]
	fc.rows.block.Columns[0] = fc.rows.block.Columns[1]
	err := s.SelectRows(context.Background(), "SELECT apiserver, apiserver FROM audit_events", nil, func(r *Row) error {
		t.Error("fn called")
		return nil
	})
	if err == nil {
		t.Error("a column twice: no error")
	}
}
