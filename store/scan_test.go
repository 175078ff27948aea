package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

// TestValueTypeMatchesDriver holds ValueType to the types clickhouse-go
// scans each column type into, so that a destination bound for one engine
// fits the other.
func TestValueTypeMatchesDriver(t *testing.T) {
	for _, typ := range []string{
		"String", "FixedString(4)", "LowCardinality(String)", "LowCardinality(Nullable(String))",
		"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64", "Bool",
		"Date", "Date32", "DateTime", "DateTime('UTC')", "DateTime64(6, 'UTC')", "DateTime64(3)",
		"Nullable(String)", "Nullable(Int64)", "Nullable(DateTime64(6, 'UTC'))",
		"Array(String)", "Array(LowCardinality(String))", "Array(Nullable(String))", "Array(Array(UInt8))",
		"Map(String, String)", "Map(LowCardinality(String), String)", "Map(String, UInt64)", "Map(String, Array(Int64))",
	} {
		col, err := column.Type(typ).Column("c", &column.ServerContext{Timezone: time.UTC})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		got, err := ValueType(typ)
		if err != nil {
			t.Errorf("ValueType(%s): %v", typ, err)
			continue
		}
		if want := col.ScanType(); got != want {
			t.Errorf("ValueType(%s) = %s, the driver scans into %s", typ, got, want)
		}
	}
	for _, typ := range []string{
		"UUID", "IPv4", "IPv6", "Decimal(10, 2)", "Int128", "UInt256", "Enum8('a' = 1)", "Tuple(String, Int64)",
		"Nothing", "Nullable(Nothing)", "JSON", "Map(Array(String), String)", "Array(UUID)",
	} {
		if vt, err := ValueType(typ); err == nil {
			t.Errorf("ValueType(%s) = %s, want it refused", typ, vt)
		}
	}
}

// scanAll reads sql into Ts through Each.
func scanAll[T any](t *testing.T, s Scanner, sql string, params Params) ([]T, error) {
	t.Helper()
	var got []T
	err := Each(context.Background(), s, sql, params, func(v T) error {
		got = append(got, v)
		return nil
	})
	return got, err
}

// nativeServer returns a server whose connection answers every query with
// the embedded engine's Native output of sql: the blocks a ClickHouse
// server sends, decoded and scanned by the driver as over the wire.
func nativeServer(t *testing.T, e *Embedded, sql string) *server {
	t.Helper()
	native, err := e.db.Query(context.Background(), sql, "Native", nil)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	r := chproto.NewReader(bytes.NewReader(native))
	var all *proto.Block
	for {
		b := proto.NewBlock()
		b.ServerContext.Timezone = time.UTC
		if err := b.Decode(r, 0); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: decoding the Native output: %v", sql, err)
		}
		if all == nil {
			all = b
			continue
		}
		if b.Rows() > 0 {
			t.Fatalf("%s: more than one block; keep test results small", sql)
		}
	}
	fc := srvNewFakeConn(t)
	fc.rows = &srvFakeRows{block: all}
	return &server{conn: fc, log: srvDiscard()}
}

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want chType
	}{
		{"String", chType{name: "String"}},
		{"DateTime64(6, 'UTC')", chType{name: "DateTime64", args: []string{"6", "'UTC'"}}},
		{"Map(LowCardinality(String), Array(Nullable(DateTime64(3, 'Europe/Paris'))))",
			chType{name: "Map", args: []string{"LowCardinality(String)", "Array(Nullable(DateTime64(3, 'Europe/Paris')))"}}},
		{"Enum8('a,b' = 1, 'c)' = 2)", chType{name: "Enum8", args: []string{"'a,b' = 1", "'c)' = 2"}}},
		{"Tuple(a String, `b c` Array(Int64))", chType{name: "Tuple", args: []string{"a String", "`b c` Array(Int64)"}}},
	} {
		if got := parseType(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseType(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

// TestScanEngines reads the same results through both engines' Scan (the
// server's from the Native blocks a server sends) into the same structs:
// each type in its own Go type and converted, and both must give the
// values expected.
func TestScanEngines(t *testing.T) {
	e := openTestEmbedded(t)

	type converted struct {
		Count int      `ch:"n"`   // UInt64
		Code  int64    `ch:"c"`   // Int32
		Small uint8    `ch:"s"`   // Int64 that fits
		Ratio float64  `ch:"r"`   // Float32
		IntF  float64  `ch:"i"`   // Int64 into float
		Raw   []byte   `ch:"raw"` // String
		Named severity `ch:"sev"`
		Null  string   `ch:"ns"`  // Nullable(String), NULL
		Opt   *int64   `ch:"oi"`  // Int32 into a pointer
		NOpt  *int64   `ch:"nio"` // Nullable(Int32), NULL, into a pointer
		SOpt  *int64   `ch:"sio"` // Nullable(Int32) into a pointer
		Arr   []int    `ch:"arr"`
		Map   map[string]int64
		Times []time.Time `ch:"times"`
		Pair  [2]int64    `ch:"pair"`
		Skip  string      `ch:"-"`
		Plain string      // matched by name without case
	}
	const convertedSQL = `SELECT count() AS n, toInt32(-3) AS c, toInt64(200) AS s, toFloat32(0.25) AS r, toInt64(-4) AS i,
		'bytes' AS raw, 'high' AS sev, NULL::Nullable(Int32) AS nio, 7::Nullable(Int32) AS sio, NULL::Nullable(String) AS ns, toInt32(9) AS oi, [toUInt8(1), 2]::Array(UInt8) AS arr,
		map('a', toUInt32(1)) AS map, [toDateTime64('2024-01-02 08:34:05.123456', 6, 'Asia/Kolkata')] AS times,
		[toInt32(1), -2] AS pair, 'p' AS PLAIN FROM numbers(7)`
	nine, seven := int64(9), int64(7)
	wantConverted := converted{
		Count: 7, Code: -3, Small: 200, Ratio: 0.25, IntF: -4, Raw: []byte("bytes"), Named: "high",
		Opt: &nine, SOpt: &seven, Arr: []int{1, 2}, Map: map[string]int64{"a": 1}, Times: []time.Time{time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		Pair: [2]int64{1, -2}, Plain: "p",
	}

	engines := func(t *testing.T, sql string) map[string]Scanner {
		return map[string]Scanner{"embedded": e, "server": nativeServer(t, e, sql)}
	}
	wantNatural := scanNaturalWant()
	for name, s := range engines(t, scanNaturalSQL) {
		got, err := scanAll[scanNatural](t, s, scanNaturalSQL, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], wantNatural) {
			t.Errorf("%s, each type as its own Go type:\n got %+v\nwant %+v", name, got, wantNatural)
		}
	}
	for name, s := range engines(t, convertedSQL) {
		got, err := scanAll[converted](t, s, convertedSQL, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], wantConverted) {
			t.Errorf("%s, converted:\n got %+v\nwant %+v", name, got, wantConverted)
		}
	}

	// Rows are new values: what fn keeps is not overwritten by the next.
	const manySQL = `SELECT number AS n, toString(number) AS s, [toString(number)] AS a, map('k', toString(number)) AS m FROM numbers(3)`
	type many struct {
		N uint64
		S string
		A []string
		M map[string]string
	}
	for name, s := range engines(t, manySQL) {
		got, err := scanAll[many](t, s, manySQL, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := []many{
			{0, "0", []string{"0"}, map[string]string{"k": "0"}},
			{1, "1", []string{"1"}, map[string]string{"k": "1"}},
			{2, "2", []string{"2"}, map[string]string{"k": "2"}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: kept rows %+v, want %+v", name, got, want)
		}
		// A value that is not a struct takes a one-column result.
		const oneSQL = `SELECT toString(number) FROM numbers(3)`
		vals, err := scanAll[string](t, engines(t, oneSQL)[name], oneSQL, nil)
		if err != nil || !reflect.DeepEqual(vals, []string{"0", "1", "2"}) {
			t.Errorf("%s: one column into strings: %q, %v", name, vals, err)
		}
	}

	// A json tag names the column when there is no ch tag, and an
	// embedded struct's fields are promoted.
	const jsonSQL = `SELECT 'x' AS k, toUInt8(1) AS v, 'top' AS Shadow`
	for name, s := range engines(t, jsonSQL) {
		got, err := scanAll[outer](t, s, jsonSQL, nil)
		want := []outer{{Inner: Inner{K: "x"}, V: 1, Shadow: "top"}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s, json tags and an embedded struct: %+v, %v; want %+v", name, got, err, want)
		}
	}

	// Refusals, before any row is read, and a value that does not fit.
	for _, tc := range []struct {
		name, sql, want string
		scan            func(s Scanner, sql string) error
	}{
		{"column without a field", `SELECT 1 AS n, 2 AS other`, `result column "other" has no field`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N uint8 }](t, s, sql, nil)
			return err
		}},
		{"two columns, one field", `SELECT 1 AS n, 2 AS N`, `both go to field N`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N uint8 }](t, s, sql, nil)
			return err
		}},
		{"lossy conversion", `SELECT 1.5 AS n`, `float64 does not convert to int`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N int }](t, s, sql, nil)
			return err
		}},
		{"unreadable type", `SELECT toUUID('6ba7b810-9dad-11d1-80b4-00c04fd430c8') AS n`, `type UUID cannot be read`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N string }](t, s, sql, nil)
			return err
		}},
		{"does not fit", `SELECT toInt64(300) AS n`, `300 does not fit in uint8`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N uint8 }](t, s, sql, nil)
			return err
		}},
		{"negative into unsigned", `SELECT toInt64(-1) AS n`, `-1 does not fit in uint64`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N uint64 }](t, s, sql, nil)
			return err
		}},
		{"array of another length", `SELECT [1, 2, 3] AS n`, `an array of 3 for a [2]int64`, func(s Scanner, sql string) error {
			_, err := scanAll[struct{ N [2]int64 }](t, s, sql, nil)
			return err
		}},
		{"two columns into a value", `SELECT 1 AS a, 2 AS b`, `2 result columns for one int`, func(s Scanner, sql string) error {
			_, err := scanAll[int](t, s, sql, nil)
			return err
		}},
	} {
		for name, s := range engines(t, tc.sql) {
			err := tc.scan(s, tc.sql)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, %s: got %v, want an error with %q", tc.name, name, err, tc.want)
			}
		}
	}
}

// scanNatural takes each type as its own Go type (ValueType).
type scanNatural struct {
	S    string            `ch:"s"`
	FS   string            `ch:"fs"`
	LC   string            `ch:"lc"`
	I8   int8              `ch:"i8"`
	I16  int16             `ch:"i16"`
	I32  int32             `ch:"i32"`
	I64  int64             `ch:"i64"`
	U8   uint8             `ch:"u8"`
	U16  uint16            `ch:"u16"`
	U32  uint32            `ch:"u32"`
	U64  uint64            `ch:"u64"`
	F32  float32           `ch:"f32"`
	F64  float64           `ch:"f64"`
	B    bool              `ch:"b"`
	D    time.Time         `ch:"d"`
	DT   time.Time         `ch:"dt"`
	DT64 time.Time         `ch:"dt64"`
	Pre  time.Time         `ch:"pre1970"`
	Kol  time.Time         `ch:"kolkata"`
	NS   *string           `ch:"ns"`
	NN   *string           `ch:"nn"`
	NI   *int64            `ch:"ni"`
	LCN  *string           `ch:"lcn"`
	Arr  []int64           `ch:"arr"`
	ArrE []string          `ch:"arre"`
	ArrN []*string         `ch:"arrn"`
	Arr2 [][]uint8         `ch:"arr2"`
	ArrL []string          `ch:"arrlc"`
	M    map[string]string `ch:"m"`
	MA   map[string][]int64
}

// scanNaturalSQL selects a value of every type ValueType reads.
const scanNaturalSQL = `SELECT 'a"b\\c' AS s, toFixedString('ab', 3) AS fs, toLowCardinality('lc') AS lc,
	toInt8(-128) AS i8, toInt16(-300) AS i16, toInt32(-7) AS i32, toInt64(-9223372036854775808) AS i64,
	toUInt8(255) AS u8, toUInt16(65535) AS u16, toUInt32(4294967295) AS u32, toUInt64(18446744073709551615) AS u64,
	toFloat32(0.5) AS f32, toFloat64(-1e300) AS f64, true AS b,
	toDate('2024-01-02') AS d, toDateTime('2024-01-02 03:04:05', 'UTC') AS dt,
	toDateTime64('2024-01-02 03:04:05.123456', 6, 'UTC') AS dt64,
	toDateTime64('1969-12-31 23:59:59.999999', 6, 'UTC') AS pre1970,
	toDateTime64('2024-01-02 08:34:05.123', 3, 'Asia/Kolkata') AS kolkata,
	NULL::Nullable(String) AS ns, 'x'::Nullable(String) AS nn, 5::Nullable(Int64) AS ni, toLowCardinality(toNullable('y')) AS lcn,
	[1, 2, 3]::Array(Int64) AS arr, []::Array(String) AS arre, [NULL, 'a']::Array(Nullable(String)) AS arrn,
	[[1], []]::Array(Array(UInt8)) AS arr2, ['x', 'y']::Array(LowCardinality(String)) AS arrlc,
	map('k1', 'v1', 'k2', '')::Map(LowCardinality(String), String) AS m, map('k', [1, 2])::Map(String, Array(Int64)) AS ma`

// scanNaturalWant is what scanNaturalSQL reads into a scanNatural.
func scanNaturalWant() scanNatural {
	ts := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)
	x, y := "x", "y"
	a := "a"
	five := int64(5)
	return scanNatural{
		S: `a"b\c`, FS: "ab\x00", LC: "lc", I8: math.MinInt8, I16: -300, I32: -7, I64: math.MinInt64,
		U8: math.MaxUint8, U16: math.MaxUint16, U32: math.MaxUint32, U64: math.MaxUint64, F32: 0.5, F64: -1e300, B: true,
		D: time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC), DT: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), DT64: ts,
		Pre: time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC), Kol: time.Date(2024, 1, 2, 3, 4, 5, 123000000, time.UTC),
		NN: &x, NI: &five, LCN: &y, Arr: []int64{1, 2, 3}, ArrE: []string{}, ArrN: []*string{nil, &a},
		Arr2: [][]uint8{{1}, {}}, ArrL: []string{"x", "y"}, M: map[string]string{"k1": "v1", "k2": ""},
		MA: map[string][]int64{"k": {1, 2}},
	}
}

type severity string

type Inner struct {
	K      string `json:"k"`
	Shadow string
}

type outer struct {
	Inner
	V      int64 `json:"v,omitempty"`
	Shadow string
}

// TestArrayParams reads array parameters back through the engine: times
// clamped and rounded as TimeParam does, floats of each width exact, and
// strings escaped.
func TestArrayParams(t *testing.T) {
	e := openTestEmbedded(t)
	type row struct {
		T   []time.Time
		F32 []float32
		F64 []float64
		S   []string
		Tu  []string
	}
	times := []time.Time{time.Date(2026, 12, 7, 1, 2, 3, 456789001, time.UTC), time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC), {}}
	p := Params{
		"t":   TimeArrayParam(times),
		"f32": FloatArrayParam([]float64{0.1, float64(float32(0.7)), -3}, 32),
		"f64": FloatArrayParam([]float64{0.1, 1e300, -2.5e-7}, 64),
		"s":   StringArrayParam([]string{`a'b\c`, "tab\there", ""}),
		"tu":  StringTupleArrayParam([][]string{{`a'b\c`, "tab\there"}, {"", "("}}),
	}
	var got []row
	err := Each(context.Background(), e, "SELECT {t:Array(DateTime64(6, 'UTC'))} AS t, {f32:Array(Float32)} AS f32, {f64:Array(Float64)} AS f64, {s:Array(String)} AS s, "+
		"arrayMap(x -> concat(x.1, '|', x.2), {tu:Array(Tuple(String, String))}) AS tu",
		p, func(r row) error { got = append(got, r); return nil })
	want := row{
		T:   []time.Time{time.Date(2026, 12, 7, 1, 2, 3, 456790000, time.UTC), MinTime, MinTime},
		F32: []float32{0.1, 0.7, -3},
		F64: []float64{0.1, 1e300, -2.5e-7},
		S:   []string{`a'b\c`, "tab\there", ""},
		Tu:  []string{"a'b\\c|tab\there", "|("},
	}
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
}
