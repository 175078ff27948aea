package store

// The columns of audit_events that a Row holds, said once: their names and
// ClickHouse types (checked against the migrations by tests) and the Row
// field of each. Both engines' SelectRows decode into rows by this list;
// the inserts write it with received_at and request_uri in their stored
// forms (storedColumns, derived.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// rowColumn is one column of audit_events and the Row field it fills.
type rowColumn struct {
	name, typ string
	// field returns a pointer to r's field of the column: *string,
	// *[]byte, *time.Time (DateTime64(6)), *int32, *int64, *bool,
	// *[]string or *map[string]string. The encoder and the decoders
	// switch on it; the type is said by typ.
	field func(r *Row) any
}

// rowColumns are the columns of audit_events that a Row holds, in the
// table's order; received_at and request_uri are ALIAS columns over their
// stored forms (derived.go), which is how the embedded Insert encodes
// them.
var rowColumns = [...]rowColumn{
	{"cluster", "LowCardinality(String)", func(r *Row) any { return &r.Cluster }},
	{"apiserver", "LowCardinality(String)", func(r *Row) any { return &r.APIServer }},
	{"ts", "DateTime64(6, 'UTC')", func(r *Row) any { return &r.Time }},
	{"received_at", "DateTime64(6, 'UTC')", func(r *Row) any { return &r.ReceivedAt }},
	{"audit_id", "String", func(r *Row) any { return &r.AuditID }},
	{"stage", "LowCardinality(String)", func(r *Row) any { return &r.Stage }},
	{"level", "LowCardinality(String)", func(r *Row) any { return &r.Level }},
	{"verb", "LowCardinality(String)", func(r *Row) any { return &r.Verb }},
	{"request_uri", "String", func(r *Row) any { return &r.RequestURI }},
	{"user", "LowCardinality(String)", func(r *Row) any { return &r.User }},
	{"user_groups", "Array(LowCardinality(String))", func(r *Row) any { return &r.Groups }},
	{"impersonated_user", "LowCardinality(String)", func(r *Row) any { return &r.ImpersonatedUser }},
	{"user_agent", "LowCardinality(String)", func(r *Row) any { return &r.UserAgent }},
	{"source_ip", "LowCardinality(String)", func(r *Row) any { return &r.SourceIP }},
	{"resource", "LowCardinality(String)", func(r *Row) any { return &r.Resource }},
	{"subresource", "LowCardinality(String)", func(r *Row) any { return &r.Subresource }},
	{"api_group", "LowCardinality(String)", func(r *Row) any { return &r.APIGroup }},
	{"api_version", "LowCardinality(String)", func(r *Row) any { return &r.APIVersion }},
	{"namespace", "LowCardinality(String)", func(r *Row) any { return &r.Namespace }},
	{"name", "String", func(r *Row) any { return &r.Name }},
	{"object_rv", "String", func(r *Row) any { return &r.ObjectRV }},
	{"object_uid", "String", func(r *Row) any { return &r.ObjectUID }},
	{"code", "Int32", func(r *Row) any { return &r.Code }},
	{"response_rv", "String", func(r *Row) any { return &r.ResponseRV }},
	{"watch", "Bool", func(r *Row) any { return &r.Watch }},
	{"req_rv", "String", func(r *Row) any { return &r.RequestedRV }},
	{"req_rv_match", "LowCardinality(String)", func(r *Row) any { return &r.RVMatch }},
	{"timeout_seconds", "Int32", func(r *Row) any { return &r.TimeoutSeconds }},
	{"label_selector", "String", func(r *Row) any { return &r.LabelSelector }},
	{"field_selector", "String", func(r *Row) any { return &r.FieldSelector }},
	{"req_limit", "Int64", func(r *Row) any { return &r.Limit }},
	{"req_continue", "String", func(r *Row) any { return &r.Continue }},
	{"annotations", "Map(LowCardinality(String), String)", func(r *Row) any { return &r.Annotations }},
	{"raw", "String", func(r *Row) any { return &r.Raw }},
	{"residual", "String", func(r *Row) any { return &r.Residual }},
}

// RowColumns returns the names of the columns of audit_events that a Row
// holds, in the table's order: what a SELECT for SelectRows may name.
// received_at and request_uri are ALIAS columns, which SELECT * does not
// list.
func RowColumns() []string {
	names := make([]string, len(rowColumns))
	for i, c := range rowColumns {
		names[i] = c.name
	}
	return names
}

// columnIndex maps a column name to its index in rowColumns.
var columnIndex = func() map[string]int {
	m := make(map[string]int, len(rowColumns))
	for i, c := range rowColumns {
		m[c.name] = i
	}
	return m
}()

// errUnknownColumn is wrapped by the errors of a result column SelectRows
// cannot decode into a Row.
var errUnknownColumn = errors.New("not a column of audit_events that a Row holds")

// resultColumn returns the index in rowColumns of the result column name
// of type typ.
func resultColumn(name, typ string) (int, error) {
	i, ok := columnIndex[name]
	if !ok {
		return 0, fmt.Errorf("result column %q: %w", name, errUnknownColumn)
	}
	if c := rowColumns[i]; c.typ != typ {
		return 0, fmt.Errorf("result column %q is %s, want %s: %w", name, typ, c.typ, errUnknownColumn)
	}
	return i, nil
}

// appendRowBinary appends r in ClickHouse's RowBinary format, columns in
// storedColumns order: String as uvarint length and bytes
// (LowCardinality(String) too), DateTime64(6) as int64 microseconds, Int32
// and Int64 little-endian, Bool as one byte, Array as uvarint count and
// elements, Map as uvarint count and key/value pairs (sorted by key, so a
// row always encodes the same).
func appendRowBinary(b []byte, r *Row) []byte {
	for i := range rowColumns {
		switch i {
		case colReceivedAt:
			full, lag := splitReceivedAt(r)
			b = binary.LittleEndian.AppendUint64(b, uint64(full))
			b = binary.LittleEndian.AppendUint64(b, uint64(lag))
		case colRequestURI:
			b = appendRequestURI(b, r)
		default:
			b = appendColumn(b, r, i)
		}
	}
	return b
}

// appendColumn appends r's value of rowColumns[i] as appendRowBinary does.
func appendColumn(b []byte, r *Row, i int) []byte {
	switch p := rowColumns[i].field(r).(type) {
	case *string:
		b = rbString(b, *p)
	case *[]byte:
		b = binary.AppendUvarint(b, uint64(len(*p)))
		b = append(b, *p...)
	case *time.Time:
		b = rbTime(b, *p)
	case *int32:
		b = binary.LittleEndian.AppendUint32(b, uint32(*p))
	case *int64:
		b = binary.LittleEndian.AppendUint64(b, uint64(*p))
	case *bool:
		b = rbBool(b, *p)
	case *[]string:
		b = binary.AppendUvarint(b, uint64(len(*p)))
		for _, s := range *p {
			b = rbString(b, s)
		}
	case *map[string]string:
		b = rbMap(b, *p)
	}
	return b
}

// rowBinarySize is an upper bound of the size of r in RowBinary, so that a
// batch buffer is allocated once: each string's bytes and up to 10 bytes
// of length, 8 bytes for every fixed-size value.
func rowBinarySize(r *Row) int {
	n := 0
	for i := range rowColumns {
		switch p := rowColumns[i].field(r).(type) {
		case *string:
			n += 10 + len(*p)
		case *[]byte:
			n += 10 + len(*p)
		case *[]string:
			n += 10
			for _, s := range *p {
				n += 10 + len(s)
			}
		case *map[string]string:
			n += 10
			for k, v := range *p {
				n += 20 + len(k) + len(v)
			}
		default:
			n += 8
		}
	}
	// The stored forms of received_at and request_uri (storedColumns):
	// a second int64, and a template up to 4 bytes longer than the URI
	// (a placeholder is two bytes) beside an empty string.
	return n + 8 + 10 + 4
}

func rbString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// rbTime encodes a DateTime64(6); the zero time becomes the epoch.
func rbTime(b []byte, t time.Time) []byte {
	return binary.LittleEndian.AppendUint64(b, uint64(micros(t)))
}

// micros is t as a DateTime64(6): microseconds since the epoch, 0 for the
// zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
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

// rowDecoder reads the embedded engine's RowBinaryWithNamesAndTypes output
// into Rows (through an rbStream, which frames the output): the header's
// columns map to Row fields, and each row is decoded as appendRowBinary
// encodes it.
type rowDecoder struct {
	fn     func(r *Row) error
	frames rbStream
	cols   []int // per result column, its index in rowColumns
	row    Row
	// A string per value per row is most of what decoding allocates, and
	// most values repeat: last holds, per result column, the last value
	// of a String column, reused when the next row's bytes are the same;
	// lc says which columns hold LowCardinality strings (few distinct
	// values: verb, user, user agent, groups, annotation keys, …), whose
	// values are kept in an interner.
	last []string
	lc   []bool
	in   interner
}

// write decodes the rows of one chunk of output.
func (d *rowDecoder) write(chunk []byte) error {
	d.frames.rows = d
	return d.frames.write(chunk)
}

// end reports output that stopped within a row.
func (d *rowDecoder) end() error { return d.frames.end() }

// bind maps the result's columns to Row fields.
func (d *rowDecoder) bind(names, types []string) error {
	cols := make([]int, 0, len(names))
	for i := range names {
		c, err := resultColumn(names[i], types[i])
		if err != nil {
			return err
		}
		if slices.Contains(cols, c) {
			return fmt.Errorf("result column %q twice", names[i])
		}
		cols = append(cols, c)
	}
	d.cols, d.last, d.lc = cols, make([]string, len(cols)), make([]bool, len(cols))
	for k, c := range cols {
		d.lc[k] = lowCardinality(rowColumns[c].typ)
	}
	return nil
}

// lowCardinality reports whether a column of type typ holds
// LowCardinality strings, itself or as its elements or map keys.
func lowCardinality(typ string) bool {
	return strings.HasPrefix(typ, "LowCardinality(") || strings.HasPrefix(typ, "Array(LowCardinality(") ||
		strings.HasPrefix(typ, "Map(LowCardinality(")
}

// emit hands the decoded row to fn.
func (d *rowDecoder) emit() error { return d.fn(&d.row) }

// decode reads the row at the start of data into d.row and returns its
// length, or errShort.
func (d *rowDecoder) decode(data []byte) (int, error) {
	rd := rbReader{b: data}
	r := &d.row
	for k, c := range d.cols {
		switch p := rowColumns[c].field(r).(type) {
		case *string:
			v := rd.bytes()
			if string(v) != d.last[k] { // no allocation to compare
				d.last[k] = d.in.str(v, d.lc[k])
			}
			*p = d.last[k]
		case *[]byte:
			*p = append((*p)[:0], rd.bytes()...)
		case *time.Time:
			*p = time.UnixMicro(int64(rd.fixed(8))).UTC()
		case *int32:
			*p = int32(rd.fixed(4))
		case *int64:
			*p = int64(rd.fixed(8))
		case *bool:
			*p = rd.fixed(1) != 0
		case *[]string:
			n := rd.count()
			s := (*p)[:0]
			for range n {
				s = append(s, d.in.str(rd.bytes(), d.lc[k]))
			}
			*p = s
		case *map[string]string:
			n := rd.count()
			if *p == nil && n > 0 {
				*p = make(map[string]string, n)
			}
			clear(*p)
			for range n {
				key := d.in.str(rd.bytes(), d.lc[k])
				(*p)[key] = string(rd.bytes())
			}
		}
		if rd.short {
			return 0, errShort
		}
	}
	return rd.i, nil
}
