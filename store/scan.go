package store

// The typed read seam: Each decodes a query's rows into Go values of the
// caller's type, on both engines, without JSON in between. An engine's
// Scan fills one destination per result column, each of the Go type that
// ValueType gives for the column's ClickHouse type (the type clickhouse-go
// scans it into); Each moves the values into T's fields, converting where
// the field's type differs.

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Column is a result column: its name and ClickHouse type, as the engine
// names it (for example "DateTime64(6, 'UTC')").
type Column struct {
	Name, Type string
}

// Scanner runs a query and decodes its rows in their engine's typed
// output. Both engines implement it.
type Scanner interface {
	// Scan runs sql. Before the first row it calls bind with the result's
	// columns; bind returns one destination per column, a pointer to a
	// value of the Go type ValueType gives for the column's type, or an
	// error that fails the query. Scan then fills the destinations with
	// each row in turn and calls row. A destination's previous string,
	// slice or map is replaced, never written into. The query is stopped
	// when row fails (Scan returns that error) or ctx ends.
	Scan(ctx context.Context, sql string, params Params, bind func([]Column) ([]any, error), row func() error) error
}

// Each runs sql on s and calls fn with each result row decoded into a new
// T, which fn may keep. T is a struct whose fields take the columns of the
// same name, given by a `ch:"name"` tag (`ch:"-"` skips a field), else by
// the name of a json tag (a row is often also a payload), else by the
// field's name compared without case; the fields of an embedded struct
// are promoted. Fields without a column are left zero, and a column
// without a field fails the query before any row is read. A T that is not
// a struct takes the one column of a one-column result.
//
// A field takes a column of its own Go type (ValueType) or of a type it
// converts from without loss: any integer into any integer type that holds
// the value (a value that does not fit fails the row), integers and floats
// into floats, strings into []byte and named string types, Nullable into
// the value type (NULL is the zero value) or a pointer, arrays and maps
// element by element, and an array into a Go array of its length. Times
// are in UTC.
func Each[T any](ctx context.Context, s Scanner, sql string, params Params, fn func(T) error) error {
	var (
		cur  T
		plan *scanPlan
	)
	bind := func(cols []Column) ([]any, error) {
		p, err := planScan(reflect.ValueOf(&cur).Elem(), cols)
		if err != nil { // the engine names the query
			return nil, fmt.Errorf("reading the result into %s: %w", typeName(reflect.TypeOf(&cur).Elem()), err)
		}
		plan = p
		return p.dests, nil
	}
	return s.Scan(ctx, sql, params, bind, func() error {
		if err := plan.convert(); err != nil {
			return fmt.Errorf("reading a row of %s into %s: %w", sqlHead(sql), typeName(reflect.TypeOf(&cur).Elem()), err)
		}
		return fn(cur)
	})
}

// typeName names t for an error: its name, or its kind when it has none
// (an anonymous struct's full type is too long to read).
func typeName(t reflect.Type) string {
	if t.Name() != "" {
		return t.String()
	}
	return "an unnamed " + t.Kind().String()
}

// ValueType returns the Go type an engine's Scan decodes a column of
// ClickHouse type typ into, the type clickhouse-go scans it into: string
// for String, FixedString and LowCardinality(String); int8…int64 and
// uint8…uint64 for the integers of 8 to 64 bits; float32 and float64;
// bool; time.Time for Date, Date32, DateTime and DateTime64; *V for
// Nullable; []V for Array; map[K]V for Map. Other types (Enum, Decimal,
// UUID, IP addresses, Tuple, wider integers, …) are refused, so that both
// engines read exactly the same set: a query converts them (toString, …).
func ValueType(typ string) (reflect.Type, error) {
	t := parseType(typ)
	switch t.name {
	case "LowCardinality":
		if len(t.args) == 1 {
			return ValueType(t.args[0])
		}
	case "Nullable", "Array":
		if len(t.args) == 1 {
			v, err := ValueType(t.args[0])
			if err != nil {
				return nil, err
			}
			if t.name == "Nullable" {
				return reflect.PointerTo(v), nil
			}
			return reflect.SliceOf(v), nil
		}
	case "Map":
		if len(t.args) == 2 {
			k, err := ValueType(t.args[0])
			if err != nil {
				return nil, err
			}
			if k.Kind() == reflect.Slice || k.Kind() == reflect.Map || k.Kind() == reflect.Pointer {
				return nil, fmt.Errorf("type %s: a map key of type %s cannot be read", typ, t.args[0])
			}
			v, err := ValueType(t.args[1])
			if err != nil {
				return nil, err
			}
			return reflect.MapOf(k, v), nil
		}
	case "String", "FixedString":
		return reflect.TypeFor[string](), nil
	case "Bool":
		return reflect.TypeFor[bool](), nil
	case "Int8":
		return reflect.TypeFor[int8](), nil
	case "Int16":
		return reflect.TypeFor[int16](), nil
	case "Int32":
		return reflect.TypeFor[int32](), nil
	case "Int64":
		return reflect.TypeFor[int64](), nil
	case "UInt8":
		return reflect.TypeFor[uint8](), nil
	case "UInt16":
		return reflect.TypeFor[uint16](), nil
	case "UInt32":
		return reflect.TypeFor[uint32](), nil
	case "UInt64":
		return reflect.TypeFor[uint64](), nil
	case "Float32":
		return reflect.TypeFor[float32](), nil
	case "Float64":
		return reflect.TypeFor[float64](), nil
	case "Date", "Date32", "DateTime", "DateTime64":
		return timeType, nil
	}
	return nil, fmt.Errorf("type %s cannot be read (convert it in the query, for example with toString)", typ)
}

var timeType = reflect.TypeFor[time.Time]()

// scanPlan binds a query's columns to the fields of a value: dests are
// what Scan fills, each either the field itself or a cell converted into
// the field after each row.
type scanPlan struct {
	dests []any
	convs []fieldConv
}

// fieldConv moves a cell into its field.
type fieldConv struct {
	cell, field reflect.Value
	conv        convFunc
}

// convFunc stores src, a value of a column's Go type, in dst.
type convFunc func(dst, src reflect.Value) error

// planScan binds cols to the fields of v (a struct, or a value that takes
// a one-column result).
func planScan(v reflect.Value, cols []Column) (*scanPlan, error) {
	fields := make([]reflect.Value, len(cols))
	if v.Kind() == reflect.Struct {
		byName := structFields(v.Type())
		seen := make(map[string]string, len(cols)) // field path → column
		for i, c := range cols {
			idx, ok := byName[c.Name]
			if !ok {
				idx, ok = byName[strings.ToLower(c.Name)]
			}
			if !ok {
				return nil, fmt.Errorf("result column %q has no field", c.Name)
			}
			key := fmt.Sprint(idx)
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("result columns %q and %q both go to field %s", prev, c.Name, v.Type().FieldByIndex(idx).Name)
			}
			seen[key] = c.Name
			fields[i] = v.FieldByIndex(idx)
		}
	} else {
		if len(cols) != 1 {
			return nil, fmt.Errorf("%d result columns for one %s", len(cols), v.Type())
		}
		fields[0] = v
	}
	p := &scanPlan{dests: make([]any, len(cols))}
	for i, c := range cols {
		vt, err := ValueType(c.Type)
		if err != nil {
			return nil, fmt.Errorf("result column %q: %w", c.Name, err)
		}
		f := fields[i]
		if vt == f.Type() && !hasTime(vt) {
			p.dests[i] = f.Addr().Interface()
			continue
		}
		conv, err := converter(vt, f.Type())
		if err != nil {
			return nil, fmt.Errorf("result column %q of type %s into field of type %s: %w", c.Name, c.Type, f.Type(), err)
		}
		cell := reflect.New(vt)
		p.dests[i] = cell.Interface()
		p.convs = append(p.convs, fieldConv{cell: cell.Elem(), field: f, conv: conv})
	}
	return p, nil
}

// convert moves the converted cells into their fields.
func (p *scanPlan) convert() error {
	for _, c := range p.convs {
		if err := c.conv(c.field, c.cell); err != nil {
			return err
		}
	}
	return nil
}

// structFieldCache holds, per struct type, the index paths of its fields
// by column name (fieldNames).
var structFieldCache sync.Map // reflect.Type → map[string][]int

// structFields returns the fields of struct type t by the names of the
// columns they take: the ch tag, else the json tag's name, else the
// field's name, lower-cased too. The fields of an embedded struct without
// a tag are promoted, as encoding/json promotes them.
func structFields(t reflect.Type) map[string][]int {
	if m, ok := structFieldCache.Load(t); ok {
		return m.(map[string][]int)
	}
	m := make(map[string][]int, t.NumField())
	var byName []string // names given by the field's name, added last
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag == "" {
			continue
		}
		if shadowed(t, f) {
			continue
		}
		name, tagged := f.Tag.Lookup("ch")
		if !tagged {
			if j, ok := f.Tag.Lookup("json"); ok {
				name, _, _ = strings.Cut(j, ",")
				tagged = name != ""
			}
		}
		switch {
		case name == "-":
			continue
		case tagged:
			m[name] = f.Index
		default:
			m[f.Name] = f.Index
			byName = append(byName, f.Name)
		}
	}
	for _, n := range byName {
		if _, taken := m[strings.ToLower(n)]; !taken {
			m[strings.ToLower(n)] = m[n]
		}
	}
	structFieldCache.Store(t, m)
	return m
}

// shadowed reports whether f, promoted from an embedded struct, is hidden
// by a field of the same name nearer the top (VisibleFields lists both).
func shadowed(t reflect.Type, f reflect.StructField) bool {
	g, ok := t.FieldByName(f.Name)
	return !ok || len(g.Index) != len(f.Index)
}

// hasTime reports whether values of t hold a time.Time, which converters
// move to UTC (the server's driver gives a column's time zone).
func hasTime(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return hasTime(t.Elem())
	case reflect.Map:
		return hasTime(t.Key()) || hasTime(t.Elem())
	}
	return t == timeType
}

// converter returns how to store a value of a column's Go type from in a
// field of type to, or an error if it cannot without loss.
func converter(from, to reflect.Type) (convFunc, error) {
	switch {
	case from == timeType && to == timeType:
		return func(dst, src reflect.Value) error {
			dst.Set(reflect.ValueOf(src.Interface().(time.Time).UTC()))
			return nil
		}, nil
	case to.Kind() == reflect.Pointer: // NULL stays nil; a value is pointed to
		elem, err := converter(from, to.Elem())
		if err != nil {
			return nil, err
		}
		return func(dst, src reflect.Value) error {
			if src.Kind() == reflect.Pointer && src.IsNil() {
				dst.SetZero()
				return nil
			}
			p := reflect.New(to.Elem())
			if err := elem(p.Elem(), src); err != nil {
				return err
			}
			dst.Set(p)
			return nil
		}, nil
	case from.Kind() == reflect.Pointer: // Nullable into a value: NULL is zero
		elem, err := converter(from.Elem(), to)
		if err != nil {
			return nil, err
		}
		return func(dst, src reflect.Value) error {
			if src.IsNil() {
				dst.SetZero()
				return nil
			}
			return elem(dst, src.Elem())
		}, nil
	case from.Kind() == reflect.Slice && (to.Kind() == reflect.Slice || to.Kind() == reflect.Array):
		elem, err := converter(from.Elem(), to.Elem())
		if err != nil {
			return nil, err
		}
		return func(dst, src reflect.Value) error {
			switch {
			case to.Kind() == reflect.Array && src.Len() != to.Len():
				return fmt.Errorf("an array of %d for a %s", src.Len(), to)
			case to.Kind() == reflect.Slice && src.IsNil():
				dst.SetZero()
				return nil
			case to.Kind() == reflect.Slice:
				dst.Set(reflect.MakeSlice(to, src.Len(), src.Len()))
			}
			for i := range src.Len() {
				if err := elem(dst.Index(i), src.Index(i)); err != nil {
					return err
				}
			}
			return nil
		}, nil
	case from.Kind() == reflect.Map && to.Kind() == reflect.Map:
		key, err := converter(from.Key(), to.Key())
		if err != nil {
			return nil, err
		}
		val, err := converter(from.Elem(), to.Elem())
		if err != nil {
			return nil, err
		}
		return func(dst, src reflect.Value) error {
			if src.IsNil() {
				dst.SetZero()
				return nil
			}
			m := reflect.MakeMapWithSize(to, src.Len())
			k, v := reflect.New(to.Key()).Elem(), reflect.New(to.Elem()).Elem()
			for it := src.MapRange(); it.Next(); {
				if err := key(k, it.Key()); err != nil {
					return err
				}
				if err := val(v, it.Value()); err != nil {
					return err
				}
				m.SetMapIndex(k, v)
			}
			dst.Set(m)
			return nil
		}, nil
	case from.Kind() == reflect.String && to.Kind() == reflect.String,
		from.Kind() == reflect.Bool && to.Kind() == reflect.Bool:
		return func(dst, src reflect.Value) error { dst.Set(src.Convert(to)); return nil }, nil
	case from.Kind() == reflect.String && to.Kind() == reflect.Slice && to.Elem().Kind() == reflect.Uint8:
		return func(dst, src reflect.Value) error { dst.SetBytes([]byte(src.String())); return nil }, nil
	case isInt(from) && isInt(to):
		return func(dst, src reflect.Value) error { return setInt(dst, src) }, nil
	case (isInt(from) || isFloat(from)) && isFloat(to):
		return func(dst, src reflect.Value) error {
			switch {
			case isFloat(src.Type()):
				dst.SetFloat(src.Float())
			case src.CanInt():
				dst.SetFloat(float64(src.Int()))
			default:
				dst.SetFloat(float64(src.Uint()))
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("%s does not convert to %s", from, to)
}

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func isFloat(t reflect.Type) bool {
	return t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
}

// setInt stores the integer src in the integer dst, or fails if it does
// not fit.
func setInt(dst, src reflect.Value) error {
	if src.CanInt() {
		v := src.Int()
		if dst.CanInt() {
			if dst.OverflowInt(v) {
				return fmt.Errorf("%d does not fit in %s", v, dst.Type())
			}
			dst.SetInt(v)
			return nil
		}
		if v < 0 || dst.OverflowUint(uint64(v)) {
			return fmt.Errorf("%d does not fit in %s", v, dst.Type())
		}
		dst.SetUint(uint64(v))
		return nil
	}
	v := src.Uint()
	if dst.CanInt() {
		if v > math.MaxInt64 || dst.OverflowInt(int64(v)) {
			return fmt.Errorf("%d does not fit in %s", v, dst.Type())
		}
		dst.SetInt(int64(v))
		return nil
	}
	if dst.OverflowUint(v) {
		return fmt.Errorf("%d does not fit in %s", v, dst.Type())
	}
	dst.SetUint(v)
	return nil
}

// chType is a parsed ClickHouse type name: "Map(String, Array(UInt8))" is
// name "Map" with args "String" and "Array(UInt8)".
type chType struct {
	name string
	args []string
}

func parseType(s string) chType {
	s = strings.TrimSpace(s)
	i := strings.IndexByte(s, '(')
	if i < 0 || !strings.HasSuffix(s, ")") {
		return chType{name: s}
	}
	return chType{name: strings.TrimSpace(s[:i]), args: splitArgs(s[i+1 : len(s)-1])}
}

// splitArgs splits at the commas outside parentheses and quotes.
func splitArgs(s string) []string {
	var (
		args  []string
		depth int
		quote byte // ' or ` while inside a quoted literal or identifier
		start int
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" || len(args) > 0 {
		args = append(args, rest)
	}
	return args
}
