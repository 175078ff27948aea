package store

// The embedded engine's side of Scan: decoding RowBinary values into the
// destinations bind returns, each of its column's ValueType.

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
)

// scanDecoder decodes the rows of a RowBinaryWithNamesAndTypes result into
// the destinations of Scan (an rbRows for rbStream).
type scanDecoder struct {
	bindFn func([]Column) ([]any, error)
	row    func() error
	cols   []func(rd *rbReader)
	in     interner
}

func (d *scanDecoder) bind(names, types []string) error {
	cols := make([]Column, len(names))
	for i := range names {
		cols[i] = Column{Name: names[i], Type: types[i]}
	}
	dests, err := d.bindFn(cols)
	if err != nil {
		return err
	}
	if len(dests) != len(cols) {
		return fmt.Errorf("%d destinations for %d result columns", len(dests), len(cols))
	}
	d.cols = make([]func(rd *rbReader), len(cols))
	for i, c := range cols {
		dec, err := d.destDecoder(c, dests[i])
		if err != nil {
			return err
		}
		d.cols[i] = dec
	}
	return nil
}

func (d *scanDecoder) decode(data []byte) (int, error) {
	rd := rbReader{b: data}
	for _, dec := range d.cols {
		dec(&rd)
		if rd.short {
			return 0, errShort
		}
	}
	return rd.i, nil
}

func (d *scanDecoder) emit() error { return d.row() }

// destDecoder returns what decodes a value of column c into dest, which
// must point to c's ValueType.
func (d *scanDecoder) destDecoder(c Column, dest any) (func(rd *rbReader), error) {
	vt, err := ValueType(c.Type)
	if err != nil {
		return nil, fmt.Errorf("result column %q: %w", c.Name, err)
	}
	dv := reflect.ValueOf(dest)
	if dv.Kind() != reflect.Pointer || dv.IsNil() || dv.Type().Elem() != vt {
		return nil, fmt.Errorf("result column %q of type %s: the destination is %T, want *%s", c.Name, c.Type, dest, vt)
	}
	t := parseType(c.Type)
	// Fast paths for the common scalar columns.
	switch p := dest.(type) {
	case *string:
		if t.name == "FixedString" {
			break
		}
		lc := t.name == "LowCardinality"
		return func(rd *rbReader) {
			v := rd.bytes()
			if string(v) != *p { // strings are immutable: an equal one is kept
				*p = d.in.str(v, lc)
			}
		}, nil
	case *int64:
		return func(rd *rbReader) { *p = int64(rd.fixed(8)) }, nil
	case *uint64:
		return func(rd *rbReader) { *p = rd.fixed(8) }, nil
	case *int32:
		return func(rd *rbReader) { *p = int32(rd.fixed(4)) }, nil
	case *uint32:
		return func(rd *rbReader) { *p = uint32(rd.fixed(4)) }, nil
	case *bool:
		return func(rd *rbReader) { *p = rd.fixed(1) != 0 }, nil
	}
	dec, err := d.valueDecoder(c.Type)
	if err != nil {
		return nil, fmt.Errorf("result column %q: %w", c.Name, err)
	}
	v := dv.Elem()
	return func(rd *rbReader) { dec(rd, v) }, nil
}

// valueDecoder decodes a RowBinary value of ClickHouse type typ into a
// settable value of typ's ValueType.
type valueDecoder func(rd *rbReader, v reflect.Value)

func (d *scanDecoder) valueDecoder(typ string) (valueDecoder, error) {
	t := parseType(typ)
	switch t.name {
	case "LowCardinality":
		if len(t.args) == 1 && parseType(t.args[0]).name == "String" {
			return func(rd *rbReader, v reflect.Value) { v.SetString(d.in.str(rd.bytes(), true)) }, nil
		}
		if len(t.args) == 1 {
			return d.valueDecoder(t.args[0])
		}
	case "Nullable":
		if len(t.args) == 1 {
			elem, err := d.valueDecoder(t.args[0])
			if err != nil {
				return nil, err
			}
			vt, err := ValueType(t.args[0])
			if err != nil {
				return nil, err
			}
			return func(rd *rbReader, v reflect.Value) {
				if rd.fixed(1) != 0 {
					v.SetZero()
					return
				}
				p := reflect.New(vt)
				elem(rd, p.Elem())
				v.Set(p)
			}, nil
		}
	case "Array":
		if len(t.args) == 1 {
			elem, err := d.valueDecoder(t.args[0])
			if err != nil {
				return nil, err
			}
			return func(rd *rbReader, v reflect.Value) {
				n := rd.count()
				s := reflect.MakeSlice(v.Type(), n, n)
				for i := range n {
					elem(rd, s.Index(i))
				}
				v.Set(s)
			}, nil
		}
	case "Map":
		if len(t.args) == 2 {
			key, err := d.valueDecoder(t.args[0])
			if err != nil {
				return nil, err
			}
			val, err := d.valueDecoder(t.args[1])
			if err != nil {
				return nil, err
			}
			return func(rd *rbReader, v reflect.Value) {
				n := rd.count()
				m := reflect.MakeMapWithSize(v.Type(), n)
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				for range n {
					key(rd, k)
					val(rd, e)
					m.SetMapIndex(k, e)
				}
				v.Set(m)
			}, nil
		}
	case "String":
		return func(rd *rbReader, v reflect.Value) { v.SetString(string(rd.bytes())) }, nil
	case "FixedString":
		if len(t.args) == 1 {
			n, err := strconv.Atoi(t.args[0])
			if err != nil || n < 0 {
				break
			}
			return func(rd *rbReader, v reflect.Value) { v.SetString(string(rd.raw(n))) }, nil
		}
	case "Bool":
		return func(rd *rbReader, v reflect.Value) { v.SetBool(rd.fixed(1) != 0) }, nil
	case "Int8":
		return func(rd *rbReader, v reflect.Value) { v.SetInt(int64(int8(rd.fixed(1)))) }, nil
	case "Int16":
		return func(rd *rbReader, v reflect.Value) { v.SetInt(int64(int16(rd.fixed(2)))) }, nil
	case "Int32":
		return func(rd *rbReader, v reflect.Value) { v.SetInt(int64(int32(rd.fixed(4)))) }, nil
	case "Int64":
		return func(rd *rbReader, v reflect.Value) { v.SetInt(int64(rd.fixed(8))) }, nil
	case "UInt8":
		return func(rd *rbReader, v reflect.Value) { v.SetUint(rd.fixed(1)) }, nil
	case "UInt16":
		return func(rd *rbReader, v reflect.Value) { v.SetUint(rd.fixed(2)) }, nil
	case "UInt32":
		return func(rd *rbReader, v reflect.Value) { v.SetUint(rd.fixed(4)) }, nil
	case "UInt64":
		return func(rd *rbReader, v reflect.Value) { v.SetUint(rd.fixed(8)) }, nil
	case "Float32":
		return func(rd *rbReader, v reflect.Value) { v.SetFloat(float64(math.Float32frombits(uint32(rd.fixed(4))))) }, nil
	case "Float64":
		return func(rd *rbReader, v reflect.Value) { v.SetFloat(math.Float64frombits(rd.fixed(8))) }, nil
	case "Date":
		return func(rd *rbReader, v reflect.Value) { setTime(v, time.Unix(int64(rd.fixed(2))*86400, 0)) }, nil
	case "Date32":
		return func(rd *rbReader, v reflect.Value) { setTime(v, time.Unix(int64(int32(rd.fixed(4)))*86400, 0)) }, nil
	case "DateTime":
		return func(rd *rbReader, v reflect.Value) { setTime(v, time.Unix(int64(rd.fixed(4)), 0)) }, nil
	case "DateTime64":
		prec := 3
		if len(t.args) > 0 {
			p, err := strconv.Atoi(t.args[0])
			if err != nil || p < 0 || p > 9 {
				break
			}
			prec = p
		}
		div, scale := int64(math.Pow10(prec)), int64(math.Pow10(9-prec))
		return func(rd *rbReader, v reflect.Value) {
			ticks := int64(rd.fixed(8))
			sec, frac := ticks/div, ticks%div
			if frac < 0 {
				sec, frac = sec-1, frac+div
			}
			setTime(v, time.Unix(sec, frac*scale))
		}, nil
	}
	return nil, fmt.Errorf("type %s cannot be read", typ)
}

func setTime(v reflect.Value, t time.Time) { v.Set(reflect.ValueOf(t.UTC())) }
