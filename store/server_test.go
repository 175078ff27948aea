package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/ClickHouse/clickhouse-go/v2/resources"

	"github.com/auditlens/auditlens/store/chdb"
)

// -update rewrites the golden files; declared here only if no other test
// file in the package declares it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/*.golden")
	}
}

func srvUpdateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func TestServerRegistersOpener(t *testing.T) {
	if openServer == nil {
		t.Fatal("openServer is nil; server.go's init should set it")
	}
}

func TestServerCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		v    proto.Version
		want string // "" when supported
	}{
		{proto.Version{Major: 18, Minor: 16, Patch: 1}, "ClickHouse server 18.16.1 is older than 25.8, the oldest this version of auditlens supports; upgrade the server or use the embedded engine (chdb://…)"},
		{proto.Version{Major: 24, Minor: 12, Patch: 3}, "ClickHouse server 24.12.3 is older than 25.8, the oldest this version of auditlens supports; upgrade the server or use the embedded engine (chdb://…)"},
		{proto.Version{Major: 25, Minor: 7, Patch: 9}, "ClickHouse server 25.7.9 is older than 25.8, the oldest this version of auditlens supports; upgrade the server or use the embedded engine (chdb://…)"},
		{proto.Version{}, "ClickHouse server 0.0.0 is older than 25.8, the oldest this version of auditlens supports; upgrade the server or use the embedded engine (chdb://…)"},
		{proto.Version{Major: 25, Minor: 8, Patch: 0}, ""},
		{proto.Version{Major: 25, Minor: 8, Patch: 2}, ""},
		{proto.Version{Major: 25, Minor: 10, Patch: 1}, ""},
		{proto.Version{Major: 26, Minor: 1, Patch: 0}, ""},
		{proto.Version{Major: 26, Minor: 7, Patch: 2}, ""},
	} {
		t.Run(tc.v.String(), func(t *testing.T) {
			err := checkServerVersion(tc.v)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkServerVersion(%s) = %v, want nil", tc.v, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkServerVersion(%s) = nil, want an error", tc.v)
			}
			if !errors.Is(err, ErrUnsupportedServer) {
				t.Errorf("error %v does not wrap ErrUnsupportedServer", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error text\n got %q\nwant %q", err, tc.want)
			}
		})
	}
}

// A driver upgrade that raises the driver's own floor must raise ours.
func TestServerMinVersionCoversDriver(t *testing.T) {
	if !proto.CheckMinVersion(resources.MinSupportedVersion, minServerVersion) {
		t.Fatalf("minServerVersion %s is below the driver's MinSupportedVersion %s", minServerVersion, resources.MinSupportedVersion)
	}
}

func TestServerOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := openClickHouse(ctx, "clickhouse://", Options{}); err == nil || !strings.Contains(err.Error(), "parsing ClickHouse server URL") {
		t.Errorf("empty host: got %v", err)
	}
	// Port 1 on loopback: refused at once, no server needed.
	_, err := openClickHouse(ctx, "clickhouse://u:secret@127.0.0.1:1/db?dial_timeout=500ms", Options{})
	if err == nil || !strings.Contains(err.Error(), "connecting to ClickHouse at 127.0.0.1:1") {
		t.Errorf("unreachable server: got %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("error reveals the password: %v", err)
	}
}

func TestServerParseType(t *testing.T) {
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
	for _, tc := range []struct{ in, name, typ string }{
		{"a String", "a", "String"},
		{"`b c` Array(Int64)", "b c", "Array(Int64)"},
		{"LowCardinality(String)", "", "LowCardinality(String)"},
		{"DateTime64(6, 'UTC')", "", "DateTime64(6, 'UTC')"},
		{"String", "", "String"},
	} {
		if name, typ := tupleElement(tc.in); name != tc.name || typ != tc.typ {
			t.Errorf("tupleElement(%q) = %q, %q; want %q, %q", tc.in, name, typ, tc.name, tc.typ)
		}
	}
}

func TestServerAppendJSONString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`q"b\s/`, `"q\"b\\s\/"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1a\x1f\x7f", `"\u0000\u0001\u001A\u001F` + "\x7f" + `"`},
		{"é✓", `"é✓"`},
		{"a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"bad\xff\xe2\x80", "\"bad\xff\xe2\x80\""}, // invalid UTF-8 passes through, as in ClickHouse
	} {
		if got := string(appendJSONString(nil, tc.in)); got != tc.want {
			t.Errorf("appendJSONString(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestServerEncodeValue(t *testing.T) {
	utc := time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		typ  string
		v    any
		want string
	}{
		{"String", "a\"b", `"a\"b"`},
		{"LowCardinality(String)", "get", `"get"`},
		{"FixedString(3)", "ab\x00", `"ab\u0000"`},
		{"Enum8('a' = 1)", "a", `"a"`},
		{"Int64", int64(math.MinInt64), "-9223372036854775808"},
		{"UInt64", uint64(math.MaxUint64), "18446744073709551615"},
		{"Int32", int32(-7), "-7"},
		{"UInt8", uint8(255), "255"},
		{"Bool", true, "true"},
		{"Bool", false, "false"},
		{"Float64", 0.1, "0.1"},
		{"Float64", 100.0, "100"},
		{"Float64", 1e21, "1e21"},
		{"Float64", 1e20, "100000000000000000000"},
		{"Float64", 1.5e-7, "1.5e-7"},
		{"Float64", -2.5e-300, "-2.5e-300"},
		{"Float64", 5e-324, "5e-324"},
		{"Float64", 1e-6, "0.000001"},
		{"Float64", math.Copysign(0, -1), "-0"},
		{"Float32", float32(3.4e38), "3.4e38"},
		{"Float32", float32(1e-7), "1e-7"},
		{"Float64", math.NaN(), "null"},
		{"Float64", math.Inf(-1), "null"},
		{"Float32", float32(0.1), "0.1"},
		{"Int128", big.NewInt(-12345678901234), "-12345678901234"},
		{"DateTime64(6, 'UTC')", utc, `"2024-01-02 03:04:05.123456"`},
		{"DateTime64(3)", utc, `"2024-01-02 03:04:05.123"`},
		{"DateTime64(9, 'UTC')", utc, `"2024-01-02 03:04:05.123456789"`},
		{"DateTime64(6, 'UTC')", time.Date(2024, 1, 2, 3, 4, 5, 7000, time.UTC), `"2024-01-02 03:04:05.000007"`},
		{"DateTime64(0, 'UTC')", utc, `"2024-01-02 03:04:05"`},
		{"DateTime64(6, 'Europe/Paris')", utc.In(paris), `"2024-01-02 04:04:05.123456"`},
		{"DateTime", utc, `"2024-01-02 03:04:05"`},
		{"Date", time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC), `"2024-01-02"`},
		{"Date32", time.Date(1960, 1, 2, 0, 0, 0, 0, time.UTC), `"1960-01-02"`},
		{"Nullable(String)", (*string)(nil), "null"},
		{"Nullable(String)", str("x"), `"x"`},
		{"Nullable(Int64)", i64(5), "5"},
		{"Nullable(DateTime64(6, 'UTC'))", &utc, `"2024-01-02 03:04:05.123456"`},
		{"Array(LowCardinality(String))", []string(nil), "[]"},
		{"Array(LowCardinality(String))", []string{"a", "b/c"}, `["a","b\/c"]`},
		{"Array(Nullable(Int64))", []*int64{i64(1), nil}, "[1,null]"},
		{"Array(Array(UInt8))", [][]uint8{{1, 2}, {}}, "[[1,2],[]]"},
		{"Map(LowCardinality(String), String)", map[string]string(nil), "{}"},
		{"Map(LowCardinality(String), String)", map[string]string{"b": "2", "a": "1", "c/d": ""}, `{"a":"1","b":"2","c\/d":""}`},
		{"Map(UInt8, Array(String))", map[uint8][]string{2: {"x"}, 1: nil}, `{"1":[],"2":["x"]}`},
		{"Tuple(String, Int64)", []any{"a", int64(1)}, `["a",1]`},
		{"Tuple(a String, b Nullable(Int64))", map[string]any{"b": nil, "a": "x"}, `{"a":"x","b":null}`},
		{"IPv4", net.ParseIP("10.1.2.3").To4(), `"10.1.2.3"`},
		{"IPv6", net.ParseIP("2001:db8::1"), `"2001:db8::1"`},
		{"IPv6", net.ParseIP("10.1.2.3"), `"::ffff:10.1.2.3"`},
		{"IPv6", net.ParseIP("::1.2.3.4"), `"::1.2.3.4"`},
		{"IPv6", net.ParseIP("::ffff:0.0.0.0"), `"::ffff:0.0.0.0"`},
		{"IPv6", net.ParseIP("::"), `"::"`},
		{"IPv6", net.ParseIP("::1"), `"::1"`},
		{"Nothing", (*any)(nil), "null"},
		{"SimpleAggregateFunction(sum, UInt64)", uint64(3), "3"},
		{"SomeFutureType", struct{ A int }{A: 1}, `{"A":1}`},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			got := string(compileEncoder(parseType(tc.typ))(nil, reflect.ValueOf(tc.v)))
			if got != tc.want {
				t.Errorf("encode %s %#v = %s, want %s", tc.typ, tc.v, got, tc.want)
			}
		})
	}
}

// TestServerEncodeDriverColumns runs values through the driver's own
// columns: appended as an insert would, encoded to the native format and
// decoded, scanned into a destination made from the column's ScanType as
// Select does, then encoded as JSON.
func TestServerEncodeDriverColumns(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		in   []any // appended with AppendRow
		want []string
	}{
		{"String", []any{"a", "b\nc"}, []string{`"a"`, `"b\nc"`}},
		{"LowCardinality(String)", []any{"get", "list", "get"}, []string{`"get"`, `"list"`, `"get"`}},
		{"LowCardinality(Nullable(String))", []any{"x", nil}, []string{`"x"`, "null"}},
		{"Nullable(Int64)", []any{int64(-1), nil}, []string{"-1", "null"}},
		{"Int64", []any{int64(math.MaxInt64)}, []string{"9223372036854775807"}},
		{"UInt64", []any{uint64(math.MaxUint64)}, []string{"18446744073709551615"}},
		{"Int32", []any{int32(200)}, []string{"200"}},
		{"Bool", []any{true, false}, []string{"true", "false"}},
		{"Float32", []any{float32(0.1)}, []string{"0.1"}},
		{"DateTime64(6, 'UTC')", []any{time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC), time.Time{}},
			[]string{`"2025-03-04 05:06:07.123456"`, `"1970-01-01 00:00:00.000000"`}},
		{"DateTime('UTC')", []any{time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)}, []string{`"2025-03-04 05:06:07"`}},
		{"Date", []any{time.Date(2025, 3, 4, 0, 0, 0, 0, time.UTC)}, []string{`"2025-03-04"`}},
		{"Array(LowCardinality(String))", []any{[]string{"a", "b"}, []string{}}, []string{`["a","b"]`, "[]"}},
		{"Map(LowCardinality(String), String)", []any{map[string]string{"k2": "v2", "k1": "v1"}, map[string]string{}},
			[]string{`{"k1":"v1","k2":"v2"}`, "{}"}},
		{"Tuple(String, Int64)", []any{[]any{"a", int64(1)}}, []string{`["a",1]`}},
		{"Tuple(s String, n Int64)", []any{map[string]any{"s": "a", "n": int64(1)}}, []string{`{"s":"a","n":1}`}},
		{"Decimal(10, 2)", []any{"1.50", "-2.25", "3"}, []string{"1.5", "-2.25", "3"}},
		{"Int128", []any{big.NewInt(-5)}, []string{"-5"}},
		{"UInt256", []any{new(big.Int).Lsh(big.NewInt(1), 200)}, []string{new(big.Int).Lsh(big.NewInt(1), 200).String()}},
		{"UUID", []any{"6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, []string{`"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`}},
		{"IPv4", []any{"192.168.1.2"}, []string{`"192.168.1.2"`}},
		{"IPv6", []any{"2001:db8::1", "::ffff:1.2.3.4"}, []string{`"2001:db8::1"`, `"::ffff:1.2.3.4"`}},
		{"Enum8('a' = 1, 'b' = 2)", []any{"b"}, []string{`"b"`}},
		{"Array(Nullable(String))", []any{[]*string{nil}}, []string{"[null]"}},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			col, err := column.Type(tc.typ).Column("c", &column.ServerContext{Timezone: time.UTC})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.in {
				if err := col.AppendRow(v); err != nil {
					t.Fatalf("AppendRow(%#v): %v", v, err)
				}
			}
			b := proto.NewBlock()
			b.Columns = []column.Interface{col}
			col = srvWireRoundTrip(t, b).Columns[0] // as a server's block arrives
			enc := newRowEncoder([]driver.ColumnType{srvColumnTypeOf(col)})
			for i, want := range tc.want {
				if err := col.ScanRow(enc.dests[0], i); err != nil {
					t.Fatalf("ScanRow %d: %v", i, err)
				}
				got := string(enc.encode(nil))
				if want := `{"c":` + want + `}`; got != want {
					t.Errorf("row %d: got %s, want %s", i, got, want)
				}
			}
		})
	}
}

// TestServerEncodeMatchesEngine holds the encoder to ClickHouse itself,
// through the embedded engine when libchdb is at hand: each query's result
// is read in the Native format (the blocks a server sends), decoded and
// scanned by the driver and encoded here, and must equal the engine's own
// JSONEachRow byte for byte. (Map keys are written sorted here, in stored
// order by ClickHouse; the maps below are stored sorted. The Native
// format names a DateTime column's type without its time zone, unlike
// the native protocol, so DateTime columns here are in the session's.)
func TestServerEncodeMatchesEngine(t *testing.T) {
	db, err := chdb.Open("", t.TempDir(), "--output_format_json_quote_64bit_integers=0", "--session_timezone=UTC")
	if errors.Is(err, chdb.ErrLibraryNotFound) {
		t.Skipf("no libchdb to compare with (make chdb fetches it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`SELECT toInt64(-1) AS i64, toUInt64(18446744073709551615) AS u64, toInt32(7) AS i32, toUInt8(255) AS u8, toInt8(-128) AS i8,
			toInt128('-170141183460469231731687303715884105728') AS i128, toUInt256(12345) AS u256, true AS b, false AS f`,
		`SELECT toFloat64(0.1) AS f64, toFloat32(0.1) AS f32, 1e21 AS big, 1e20 AS big2, 1.5e-7 AS small, 1e-6 AS edge, -0. AS negz,
			nan AS fnan, -inf AS finf, toFloat32(3.4e38) AS f32big, 5e-324 AS tiny, 12345678.9 AS mid`,
		`SELECT toDecimal64(1.5, 2) AS dec, toDecimal32(0, 2) AS dz, toDecimal128('12345678901234567890.123456789', 9) AS dbig, toDecimal64(-0.5, 3) AS dneg`,
		`SELECT concat('a"b/c\\d\te', char(0xE2, 0x80, 0xA8), char(0xE2, 0x80, 0xA9), 'é', char(1), char(31), char(127)) AS s,
			toFixedString('ab', 4) AS fs, toLowCardinality('lc') AS lc, '' AS empty, CAST('b', 'Enum8(\'a\' = 1, \'b\' = 2)') AS e`,
		`SELECT toDateTime64('2024-01-02 03:04:05.123456', 6, 'UTC') AS dt64, toDateTime64('2024-01-02 03:04:05.123', 3, 'Asia/Kolkata') AS dt64k,
			toDateTime64('2024-01-02 03:04:05.123456789', 9, 'UTC') AS dt64n, toDateTime64('2024-01-02 03:04:05', 0, 'UTC') AS dt640,
			toDateTime64('1969-12-31 23:59:59.999999', 6, 'UTC') AS pre1970, toDateTime('2024-01-02 03:04:05', 'UTC') AS dt,
			toDate('2024-01-02') AS d, toDate32('1950-01-02') AS d32`,
		`SELECT NULL::Nullable(String) AS n, 'x'::Nullable(String) AS nn, NULL::Nullable(Int64) AS ni, 5::Nullable(Int64) AS ni5,
			NULL::Nullable(DateTime64(6, 'UTC')) AS nt, toLowCardinality(toNullable('y')) AS lcn, NULL AS nothing`,
		`SELECT [1, 2, 3]::Array(Int64) AS arr, []::Array(String) AS arre, [NULL, 'a']::Array(Nullable(String)) AS arrn,
			[[1], []]::Array(Array(UInt8)) AS arr2, ['x', 'y']::Array(LowCardinality(String)) AS arrlc,
			[toDateTime64('2024-01-02 03:04:05.5', 1, 'UTC')] AS arrt`,
		`SELECT map('a', 'y', 'b', 'x') AS m, map(1, 'one', 2, 'two')::Map(UInt8, String) AS mk, map()::Map(String, String) AS me,
			map('k', [1, 2])::Map(LowCardinality(String), Array(Int64)) AS ma, [map('a', 1)]::Array(Map(String, Int32)) AS am`,
		`SELECT tuple(1, 'a') AS tu, CAST((1, 'a'), 'Tuple(x Int32, y String)') AS nt, CAST((1, NULL), 'Tuple(x Int32, y Nullable(String))') AS ntn,
			[(1, 'a')]::Array(Tuple(Int64, String)) AS at`,
		`SELECT toUUID('6ba7b810-9dad-11d1-80b4-00c04fd430c8') AS uuid, toIPv4('1.2.3.4') AS ip4, toIPv6('::ffff:1.2.3.4') AS ip6m,
			toIPv6('2001:db8::1') AS ip6, toIPv6('::') AS ip6z, toIPv6('::1') AS ip6l, toIPv6('::1.2.3.4') AS ip6c`,
		`SELECT number AS n, toString(number) AS s FROM numbers(3)`,
	} {
		native, err := db.Query(context.Background(), q, "Native", nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want, err := db.Query(context.Background(), q, "JSONEachRow", nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var got bytes.Buffer
		r := chproto.NewReader(bytes.NewReader(native))
		for {
			block := proto.NewBlock()
			block.ServerContext.Timezone = time.UTC
			if err := block.Decode(r, 0); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: decoding the Native output: %v", q, err)
			}
			rows := &srvFakeRows{block: block}
			enc := newRowEncoder(rows.ColumnTypes())
			for rows.Next() {
				if err := rows.Scan(enc.dests...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				got.Write(enc.encode(nil))
				got.WriteByte('\n')
			}
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s\n ours:       %s engine's:   %s", strings.Join(strings.Fields(q), " "), got.Bytes(), want)
		}
	}
}

// TestServerEncodeRowReuse checks that a nullable destination reused for
// the next row does not keep the previous value.
func TestServerEncodeRowReuse(t *testing.T) {
	col, err := column.Type("Nullable(String)").Column("n", &column.ServerContext{Timezone: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{"x", nil, "y"} {
		if err := col.AppendRow(v); err != nil {
			t.Fatal(err)
		}
	}
	enc := newRowEncoder([]driver.ColumnType{srvColumnTypeOf(col)})
	var buf []byte
	var got []string
	for i := range 3 {
		if err := col.ScanRow(enc.dests[0], i); err != nil {
			t.Fatal(err)
		}
		buf = enc.encode(buf[:0])
		got = append(got, string(buf))
	}
	if want := []string{`{"n":"x"}`, `{"n":null}`, `{"n":"y"}`}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestServerDedupToken(t *testing.T) {
	a := []Row{{Cluster: "c", AuditID: "1", Stage: "ResponseComplete", Verb: "get"}, {Cluster: "c", AuditID: "2", Stage: "ResponseComplete"}}
	same := []Row{{Cluster: "c", AuditID: "1", Stage: "ResponseComplete", Verb: "list", Raw: []byte("{}")}, {Cluster: "c", AuditID: "2", Stage: "ResponseComplete"}}
	if dedupToken(a) != dedupToken(same) {
		t.Error("token depends on fields outside the key")
	}
	if dedupToken(a) != dedupToken(srvCopyRows(a)) {
		t.Error("token is not deterministic")
	}
	for name, other := range map[string][]Row{
		"order":    {a[1], a[0]},
		"subset":   a[:1],
		"stage":    {{Cluster: "c", AuditID: "1", Stage: "RequestReceived"}, a[1]},
		"boundary": {{Cluster: "c", AuditID: "1R", Stage: "esponseComplete"}, a[1]},
	} {
		if dedupToken(a) == dedupToken(other) {
			t.Errorf("%s: tokens equal", name)
		}
	}
}

func srvCopyRows(r []Row) []Row { return append([]Row(nil), r...) }

// TestServerInsertColumnsMatchMigration keeps insertColumns in step with
// the table: same columns, same order.
func TestServerInsertColumnsMatchMigration(t *testing.T) {
	cols := srvMigrationColumns(t)
	var names []string
	for _, c := range cols {
		if !c.alias {
			names = append(names, c.name)
		}
	}
	if !reflect.DeepEqual(names, insertColumns[:]) {
		t.Errorf("migration columns\n%q\ninsertColumns\n%q", names, insertColumns)
	}
}

// srvMigrationColumns reads the column names and types of audit_events
// from the migrations.
func srvMigrationColumns(t *testing.T) []tableColumn {
	t.Helper()
	return auditEventsColumns(t)
}

func srvTestRows() []Row {
	return []Row{
		{
			Cluster: "prod-eu", APIServer: "apiserver-2", AuditID: "4d2e4b1c-3a5f-4b8e-9c1d-0e2f3a4b5c6d", Stage: "ResponseComplete",
			Level: "Metadata", Verb: "watch",
			RequestURI:       "/api/v1/namespaces/kube-system/pods?allowWatchBookmarks=true&resourceVersion=123&timeoutSeconds=300&watch=true",
			Time:             time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC),
			ReceivedAt:       time.Date(2025, 3, 4, 5, 6, 7, 100001000, time.UTC),
			User:             "system:serviceaccount:kube-system:coredns",
			Groups:           []string{"system:serviceaccounts", "system:authenticated"},
			ImpersonatedUser: "", UserAgent: "coredns/v1.11.1 (linux/amd64) kubernetes/$Format",
			SourceIP: "10.0.0.12", Resource: "pods", Subresource: "", APIGroup: "", APIVersion: "v1",
			Namespace: "kube-system", Name: "", ObjectRV: "", ObjectUID: "", Code: 200, ResponseRV: "",
			Watch: true, RequestedRV: "123", RVMatch: "", TimeoutSeconds: 300,
			LabelSelector: "k8s-app=kube-dns", FieldSelector: "", Limit: 500, Continue: "",
			Annotations: map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": `RBAC: allowed by ClusterRoleBinding "system:coredns"`},
			Raw:         []byte(`{"kind":"Event","auditID":"4d2e4b1c","requestURI":"/api/v1/pods"}`),
		},
		{
			Cluster: "prod-eu", AuditID: "x\ty\n\u2028é", Stage: "RequestReceived", Verb: "create",
			Time: time.Date(2025, 3, 4, 5, 6, 8, 1000, time.UTC), Code: -1, TimeoutSeconds: math.MaxInt32,
			Limit: math.MaxInt64, Raw: nil,
		},
		{
			// As the writer stores an event now: no raw, a residual of
			// binary lengths and JSON text (bytes not UTF-8 included).
			Cluster: "prod-eu", AuditID: "5e3f", Stage: "ResponseComplete", Verb: "get",
			Time:     time.Date(2025, 3, 4, 5, 6, 9, 0, time.UTC),
			Residual: []byte("po\x04user\x0cs\x03uid\x05\"u-1\"s\x01x\x04\"\xff\u2028\"d\x04kind"),
		},
	}
}

// TestServerInsertSelectRoundTrip follows rows through Insert, the native
// wire format (encoded and decoded by the driver), and Select, against the
// golden JSON lines; the integration test holds a real server to the same
// file.
func TestServerInsertSelectRoundTrip(t *testing.T) {
	fc := srvNewFakeConn(t)
	s := &server{conn: fc, log: srvDiscard()}
	if err := s.Insert(context.Background(), srvTestRows()); err != nil {
		t.Fatal(err)
	}
	if len(fc.batches) != 1 || !fc.batches[0].sent {
		t.Fatalf("batches %+v, want one sent", fc.batches)
	}
	if fc.batches[0].query != insertSQL {
		t.Errorf("batch query %q, want %q", fc.batches[0].query, insertSQL)
	}
	fc.rows = &srvFakeRows{block: srvWireRoundTrip(t, fc.batches[0].block)}
	var got bytes.Buffer
	err := s.Select(context.Background(), "SELECT * FROM audit_events", nil, func(row []byte) error {
		if !json.Valid(row) {
			t.Errorf("invalid JSON: %s", row)
		}
		got.Write(row)
		got.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	srvCompareGolden(t, "server_roundtrip.golden", got.Bytes())

	// 64-bit integers unquoted, decodable as numbers.
	var second map[string]any
	dec := json.NewDecoder(bytes.NewReader(bytes.SplitN(got.Bytes(), []byte("\n"), 3)[1]))
	dec.UseNumber()
	if err := dec.Decode(&second); err != nil {
		t.Fatal(err)
	}
	if n, ok := second["req_limit"].(json.Number); !ok || n.String() != "9223372036854775807" {
		t.Errorf("req_limit = %#v, want the number 9223372036854775807", second["req_limit"])
	}
}

// TestServerGoldenMatchesEmbedded: both engines must hand callers the same
// bytes for the same rows. It is the link of a chain: TestEmbeddedRoundTrip
// holds libchdb's live output to embedded_roundtrip.golden,
// TestServerInsertSelectRoundTrip the server path's (through the native
// wire format) to server_roundtrip.golden, and this test the two files to
// each other, so that rewriting one golden (-update) cannot hide a
// difference between the engines.
func TestServerGoldenMatchesEmbedded(t *testing.T) {
	emb, err := os.ReadFile(filepath.Join("testdata", "embedded_roundtrip.golden"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := os.ReadFile(filepath.Join("testdata", "server_roundtrip.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(srv, emb) {
		t.Errorf("the engines' round-trip outputs differ:\n server:\n%s\n embedded:\n%s", srv, emb)
	}
}

func srvCompareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if srvUpdateGolden() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// srvWireRoundTrip encodes a block as the driver sends it and decodes it as
// the driver reads a server's block.
func srvWireRoundTrip(t *testing.T, b *proto.Block) *proto.Block {
	t.Helper()
	var buf chproto.Buffer
	if err := b.Encode(&buf, clickhouse.ClientTCPProtocolVersion); err != nil {
		t.Fatal(err)
	}
	out := proto.NewBlock()
	out.ServerContext.Timezone = time.UTC
	if err := out.Decode(buf.Reader(), clickhouse.ClientTCPProtocolVersion); err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Columns {
		if c.Name() == "received_lag" {
			// Through the wire again, as the server sends it.
			return srvWireRoundTrip(t, srvAsRead(t, out))
		}
	}
	return out
}

// srvAsRead turns an inserted block of audit_events rows into what a
// SELECT of RowColumns returns: the ALIAS columns received_at and
// request_uri computed from their stored forms (inverseTemplate), as the
// server does.
func srvAsRead(t *testing.T, in *proto.Block) *proto.Block {
	t.Helper()
	out := proto.NewBlock()
	out.ServerContext.Timezone = time.UTC
	for _, c := range rowColumns {
		if err := out.AddColumn(c.name, column.Type(c.typ)); err != nil {
			t.Fatal(err)
		}
	}
	idx := map[string]int{}
	for i, c := range in.Columns {
		idx[c.Name()] = i
	}
	for r := range in.Rows() {
		val := func(name string) any { return in.Columns[idx[name]].Row(r, false) }
		vals := make([]any, len(rowColumns))
		for i, c := range rowColumns {
			switch c.name {
			case "received_at":
				if lag := val("received_lag").(int64); lag == noLag {
					vals[i] = val("received_at_full")
				} else {
					vals[i] = time.UnixMicro(val("ts").(time.Time).UnixMicro() - lag).UTC()
				}
			case "request_uri":
				row := Row{Name: val("name").(string), Namespace: val("namespace").(string),
					RequestedRV: val("req_rv").(string), TimeoutSeconds: val("timeout_seconds").(int32)}
				vals[i] = inverseTemplate(val("request_uri_full").(string), val("request_uri_tmpl").(string), &row)
			default:
				vals[i] = val(c.name)
			}
		}
		if err := out.Append(vals...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestServerInsertEmpty(t *testing.T) {
	fc := srvNewFakeConn(t)
	s := &server{conn: fc, log: srvDiscard()}
	if err := s.Insert(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(fc.batches) != 0 {
		t.Errorf("prepared %d batches for no rows", len(fc.batches))
	}
}

// TestServerInsertRetryRebuildsBatch: a failed Send spends the batch; the
// caller's retry gets a new batch with the same content.
func TestServerInsertRetryRebuildsBatch(t *testing.T) {
	fc := srvNewFakeConn(t)
	boom := errors.New("connection reset")
	fc.sendErrs = []error{boom}
	s := &server{conn: fc, log: srvDiscard()}
	rows := srvTestRows()
	err := s.Insert(context.Background(), rows)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "inserting 3 rows into audit_events") {
		t.Fatalf("first Insert: %v", err)
	}
	if err := s.Insert(context.Background(), rows); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if len(fc.batches) != 2 {
		t.Fatalf("%d batches, want 2", len(fc.batches))
	}
	for i, b := range fc.batches {
		if !b.closed {
			t.Errorf("batch %d not closed", i)
		}
	}
	// Map columns iterate in random order, so compare everything else.
	if !bytes.Equal(srvStripAnnotations(t, fc.batches[0].block), srvStripAnnotations(t, fc.batches[1].block)) {
		t.Error("the retried batch differs from the first")
	}
}

// srvStripAnnotations encodes a block without its annotations column (Go map
// order is random).
func srvStripAnnotations(t *testing.T, b *proto.Block) []byte {
	t.Helper()
	var buf chproto.Buffer
	for i, c := range b.Columns {
		if c.Name() == "annotations" {
			continue
		}
		if err := b.EncodeColumn(&buf, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Buf
}

func TestServerInsertPoolReset(t *testing.T) {
	b := new(insertBatch)
	b.appendRows(srvTestRows())
	if got := len(b.values()); got != len(insertColumns) {
		t.Fatalf("values() has %d columns, insertColumns %d", got, len(insertColumns))
	}
	groups := b.groups[:1]
	b.reset()
	for i, v := range b.values() {
		if n := reflect.ValueOf(v).Len(); n != 0 {
			t.Errorf("column %s has %d values after reset", insertColumns[i], n)
		}
	}
	if groups[0] != nil {
		t.Error("reset kept a reference to the rows' groups")
	}
}

func TestServerExec(t *testing.T) {
	fc := srvNewFakeConn(t)
	s := &server{conn: fc, log: srvDiscard()}
	if err := s.Exec(context.Background(), "ALTER TABLE t DELETE WHERE c = {c:String}", Params{"c": "x"}); err != nil {
		t.Fatal(err)
	}
	fc.execErr = errors.New("Code: 62. Syntax error")
	err := s.Exec(context.Background(), "CREATE TABLE\n    oops", nil)
	if !errors.Is(err, fc.execErr) || !strings.Contains(err.Error(), `"CREATE TABLE oops"`) {
		t.Errorf("got %v", err)
	}
	if got := sqlHead(strings.Repeat("x", 100)); len(got) != 62 || !strings.HasSuffix(got, `..."`) {
		t.Errorf("sqlHead of a long statement = %s", got)
	}
}

// The Select tests below check the cancellation scheme: the driver's query
// context is never cancelled; a cancelled ctx or a failing fn stops the
// query with KILL QUERY and drains the rows.

func srvSelectFixture(t *testing.T, n int) (*srvFakeConn, *server) {
	t.Helper()
	col, err := column.Type("UInt64").Column("number", &column.ServerContext{Timezone: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := col.AppendRow(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	b := proto.NewBlock()
	b.Columns = []column.Interface{col}
	fc := srvNewFakeConn(t)
	fc.rows = &srvFakeRows{block: b}
	newQueryID = func() string { return "q1" }
	t.Cleanup(func() { newQueryID = srvDefaultQueryID })
	return fc, &server{conn: fc, log: srvDiscard()}
}

var srvDefaultQueryID = newQueryID

const srvKillQ1 = "KILL QUERY WHERE query_id = 'q1' ASYNC"

func TestServerSelectComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var got []string
		if err := s.Select(ctx, "SELECT number FROM numbers(3)", nil, func(row []byte) error {
			got = append(got, string(row))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if want := []string{`{"number":0}`, `{"number":1}`, `{"number":2}`}; !reflect.DeepEqual(got, want) {
			t.Errorf("rows %q, want %q", got, want)
		}
		if fc.queryCtx.Done() != nil {
			t.Error("the driver's query context can be cancelled")
		}
		if e := fc.execLog(); len(e) != 0 {
			t.Errorf("statements after a complete query: %q", e)
		}
	})
}

func TestServerSelectFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 100)
		stop := errors.New("enough")
		n := 0
		err := s.Select(context.Background(), "SELECT number FROM numbers(100)", nil, func([]byte) error {
			if n++; n == 2 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		synctest.Wait()
		if e := fc.execLog(); len(e) != 1 || e[0] != srvKillQ1 {
			t.Errorf("statements %q, want one %q", e, srvKillQ1)
		}
		if !fc.rows.closed {
			t.Error("rows not closed (drained)")
		}
	})
}

func TestServerSelectCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		err := s.Select(ctx, "SELECT number FROM numbers(100)", nil, func([]byte) error {
			if n++; n == 2 {
				cancel()
				synctest.Wait() // the AfterFunc's KILL runs while fn still holds the row
				if fc.queryCtx.Err() != nil {
					t.Error("the driver's query context was cancelled while a row was being handled")
				}
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if n != 2 {
			t.Errorf("fn called %d times, want 2 (none after the cancel)", n)
		}
		synctest.Wait()
		if e := fc.execLog(); len(e) == 0 || e[0] != srvKillQ1 {
			t.Errorf("statements %q, want %q", e, srvKillQ1)
		}
		if !fc.rows.closed {
			t.Error("rows not closed (drained)")
		}
	})
}

// When the drain does not end (the KILL missed), KILL QUERY is repeated
// every killInterval until the query ends, at most killAttempts times.
func TestServerSelectKillRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 10)
		release := make(chan struct{})
		fc.rows.closeWait = release
		stop := errors.New("stop")
		done := make(chan error)
		go func() {
			done <- s.Select(context.Background(), "SELECT 1", nil, func([]byte) error { return stop })
		}()
		time.Sleep(2*killInterval + killInterval/2)
		synctest.Wait()
		if got := len(fc.execLog()); got != 3 {
			t.Errorf("%d KILL statements after 2.5 intervals, want 3", got)
		}
		close(release)
		if err := <-done; err != stop {
			t.Errorf("err = %v", err)
		}
		time.Sleep(10 * killInterval)
		synctest.Wait()
		if got := len(fc.execLog()); got != 3 {
			t.Errorf("%d KILL statements after the query ended, want still 3", got)
		}
	})
}

func TestServerSelectDeadlinePassed(t *testing.T) {
	fc, s := srvSelectFixture(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Select(ctx, "SELECT 1", nil, func([]byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if fc.queryCtx != nil {
		t.Error("query sent with a cancelled context")
	}
}

func srvDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ---- fakes ----

// srvFakeConn stands in for clickhouse-go's connection. Its batches append
// into driver blocks with the table's column types, read from the
// migration; Query returns fc.rows.
type srvFakeConn struct {
	driver.Conn
	t        *testing.T
	mu       sync.Mutex
	execs    []string
	execErr  error
	queryCtx context.Context
	rows     *srvFakeRows
	batches  []*srvFakeBatch
	sendErrs []error // returned by the first Sends, in turn
}

func srvNewFakeConn(t *testing.T) *srvFakeConn { return &srvFakeConn{t: t} }

func (c *srvFakeConn) Exec(ctx context.Context, query string, args ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.execs = append(c.execs, query)
	return c.execErr
}

func (c *srvFakeConn) execLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.execs...)
}

func (c *srvFakeConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	c.queryCtx = ctx
	return c.rows, nil
}

func (c *srvFakeConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	b := proto.NewBlock()
	b.ServerContext.Timezone = time.UTC
	for _, col := range srvMigrationColumns(c.t) {
		if col.alias {
			continue
		}
		if err := b.AddColumn(col.name, column.Type(col.typ)); err != nil {
			c.t.Fatalf("column %s %s: %v", col.name, col.typ, err)
		}
	}
	// Order the block's columns as the INSERT names them, as the driver does.
	_, list, _ := strings.Cut(query, "(")
	var names []string
	for _, n := range strings.Split(strings.TrimSuffix(list, ")"), ",") {
		names = append(names, strings.TrimSpace(n))
	}
	if err := b.SortColumns(names); err != nil {
		return nil, err
	}
	fb := &srvFakeBatch{query: query, block: b}
	if len(c.sendErrs) > 0 {
		fb.sendErr, c.sendErrs = c.sendErrs[0], c.sendErrs[1:]
	}
	c.batches = append(c.batches, fb)
	return fb, nil
}

type srvFakeBatch struct {
	driver.Batch
	query   string
	block   *proto.Block
	sendErr error
	sent    bool
	closed  bool
}

func (b *srvFakeBatch) Column(i int) driver.BatchColumn {
	return srvFakeBatchColumn{b.block.Columns[i]}
}

func (b *srvFakeBatch) Send() error {
	if b.sent {
		return errors.New("batch already sent")
	}
	b.sent = true
	return b.sendErr
}

func (b *srvFakeBatch) Close() error { b.closed = true; return nil }

type srvFakeBatchColumn struct{ c column.Interface }

func (c srvFakeBatchColumn) Append(v any) error {
	_, err := c.c.Append(v)
	return err
}

func (c srvFakeBatchColumn) AppendRow(v any) error { return c.c.AppendRow(v) }

// srvFakeRows reads a driver block as clickhouse-go's rows do.
type srvFakeRows struct {
	driver.Rows
	block     *proto.Block
	row       int
	closed    bool
	closeWait chan struct{} // if set, Close blocks until it is closed
}

func (r *srvFakeRows) Next() bool {
	if r.row >= r.block.Rows() {
		r.Close()
		return false
	}
	r.row++
	return true
}

func (r *srvFakeRows) Scan(dest ...any) error {
	if len(dest) != len(r.block.Columns) {
		return fmt.Errorf("%d destinations for %d columns", len(dest), len(r.block.Columns))
	}
	for i, c := range r.block.Columns {
		if err := c.ScanRow(dest[i], r.row-1); err != nil {
			return err
		}
	}
	return nil
}

func (r *srvFakeRows) ColumnTypes() []driver.ColumnType {
	var ts []driver.ColumnType
	for _, c := range r.block.Columns {
		ts = append(ts, srvColumnTypeOf(c))
	}
	return ts
}

func (r *srvFakeRows) Close() error {
	if r.closeWait != nil {
		<-r.closeWait
	}
	r.closed = true
	return nil
}

func (r *srvFakeRows) Err() error { return nil }

// srvColumnTypeOf describes a driver column as rows.ColumnTypes does.
func srvColumnTypeOf(c column.Interface) driver.ColumnType {
	_, nullable := c.(*column.Nullable)
	return srvFakeColumnType{name: c.Name(), chType: string(c.Type()), nullable: nullable, scanType: c.ScanType()}
}

type srvFakeColumnType struct {
	name, chType string
	nullable     bool
	scanType     reflect.Type
}

func (c srvFakeColumnType) Name() string             { return c.name }
func (c srvFakeColumnType) Nullable() bool           { return c.nullable }
func (c srvFakeColumnType) ScanType() reflect.Type   { return c.scanType }
func (c srvFakeColumnType) DatabaseTypeName() string { return c.chType }

// ---- integration, against a real server ----

// TestServerIntegration runs against the server in CLICKHOUSE_URL, e.g.
// clickhouse://default:@localhost:9000/default. It creates and drops a
// database of its own.
func TestServerIntegration(t *testing.T) {
	dsn := os.Getenv("CLICKHOUSE_URL")
	if dsn == "" {
		t.Skip("set CLICKHOUSE_URL (clickhouse://user:pass@host:9000/db) to run against a ClickHouse server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := openClickHouse(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if admin.Kind() != "clickhouse" {
		t.Errorf("Kind() = %q", admin.Kind())
	}
	db := "auditlens_test_" + newQueryID()[:12]
	if err := admin.Exec(ctx, "CREATE DATABASE "+db, nil); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" SYNC", nil)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	s, err := openClickHouse(ctx, u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	t.Run("ExecParams", func(t *testing.T) {
		if err := s.Exec(ctx, "CREATE TABLE kv (k String, v Int64) ENGINE = MergeTree ORDER BY k", nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Exec(ctx, "INSERT INTO kv SELECT {k:String}, {v:Int64}", Params{"k": "it's \"q\"", "v": "-42"}); err != nil {
			t.Fatal(err)
		}
		got := srvSelectAll(t, s, ctx, "SELECT k, v FROM kv WHERE k = {k:String}", Params{"k": "it's \"q\""})
		if want := []string{`{"k":"it's \"q\"","v":-42}`}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
		// Values are read as escaped text: `\\` is one backslash, `\t` a tab.
		got = srvSelectAll(t, s, ctx, "SELECT {s:String} AS s, {a:Array(String)} AS a", Params{"s": `a\\b\tc`, "a": `['x\'y', 'z']`})
		if want := []string{`{"s":"a\\b\tc","a":["x'y","z"]}`}; !reflect.DeepEqual(got, want) {
			t.Errorf("escaped parameters: got %q, want %q", got, want)
		}
	})

	t.Run("InsertSelect", func(t *testing.T) {
		for _, stmt := range srvRenderMigration(t) {
			if err := s.Exec(ctx, stmt, nil); err != nil {
				t.Fatal(err)
			}
		}
		rows := srvTestRows()
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		got := srvSelectAll(t, s, ctx, "SELECT * FROM audit_events FINAL WHERE cluster = {c:String} ORDER BY ts", Params{"c": "prod-eu"})
		want, err := os.ReadFile(filepath.Join("testdata", "server_roundtrip.golden"))
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.Join(got, "\n") + "\n"; g != string(want) {
			t.Errorf("server result differs from testdata/server_roundtrip.golden:\n got:\n%s\nwant:\n%s", g, want)
		}
		srvCompareWithServerJSON(t, s, ctx, "SELECT * FROM audit_events FINAL ORDER BY ts")

		// The typed read: every column back as inserted.
		more := rowsTestRows()
		if err := s.Insert(ctx, more); err != nil {
			t.Fatal(err)
		}
		sortRowsByID(more)
		var typed []Row
		if err := s.SelectRows(ctx, "SELECT "+strings.Join(RowColumns(), ", ")+" FROM audit_events FINAL ORDER BY audit_id", nil,
			func(r *Row) error { typed = append(typed, cloneRow(r)); return nil }); err != nil {
			t.Fatal(err)
		}
		compareRows(t, typed, more)
	})

	t.Run("TypesMatchJSONEachRow", func(t *testing.T) {
		srvCompareWithServerJSON(t, s, ctx, `SELECT
			toInt64(-1) AS i64, toUInt64(18446744073709551615) AS u64, toInt32(7) AS i32, toUInt8(255) AS u8,
			toInt128('-170141183460469231731687303715884105728') AS i128, toUInt256(12345) AS u256,
			true AS b, toFloat64(0.1) AS f64, toFloat32(0.1) AS f32, 1e21 AS big, 1.5e-7 AS small, nan AS fnan, -inf AS finf,
			toDecimal64(1.5, 2) AS dec, concat('a"b/c\\d\te', char(0xE2, 0x80, 0xA8), 'é') AS s, toFixedString('ab', 4) AS fs,
			toDateTime64('2024-01-02 03:04:05.123456', 6, 'UTC') AS dt64, toDateTime64('2024-01-02 03:04:05.123', 3, 'Asia/Kolkata') AS dt64k,
			toDateTime('2024-01-02 03:04:05', 'UTC') AS dt, toDate('2024-01-02') AS d, toDate32('1950-01-02') AS d32,
			NULL::Nullable(String) AS n, 'x'::Nullable(String) AS nn, toLowCardinality('lc') AS lc,
			[1, 2, 3]::Array(Int64) AS arr, [NULL, 'a']::Array(Nullable(String)) AS arrn, [[1], []]::Array(Array(UInt8)) AS arr2,
			map('b', 'x', 'a', 'y') AS m, map(1, 'one')::Map(UInt8, String) AS mk,
			tuple(1, 'a') AS tu, CAST((1, 'a'), 'Tuple(x Int32, y String)') AS nt,
			toUUID('6ba7b810-9dad-11d1-80b4-00c04fd430c8') AS uuid, toIPv4('1.2.3.4') AS ip4, toIPv6('::ffff:1.2.3.4') AS ip6m, toIPv6('2001:db8::1') AS ip6,
			CAST('b', 'Enum8(\'a\' = 1, \'b\' = 2)') AS e`)
	})

	t.Run("FnErrorStopsInfiniteQuery", func(t *testing.T) {
		stop := errors.New("enough")
		errc := make(chan error, 1)
		go func() {
			n := 0
			errc <- s.Select(ctx, "SELECT number FROM system.numbers", nil, func([]byte) error {
				if n++; n == 1000 {
					return stop
				}
				return nil
			})
		}()
		select {
		case err := <-errc:
			if err != stop {
				t.Fatalf("err = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Select did not return within 30s of fn's error: KILL QUERY did not stop the query")
		}
	})

	t.Run("CancelStopsInfiniteQuery", func(t *testing.T) {
		qctx, qcancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			n := 0
			errc <- s.Select(qctx, "SELECT number FROM system.numbers", nil, func([]byte) error {
				if n++; n == 1000 {
					qcancel()
					time.Sleep(100 * time.Millisecond) // hold the row while the cancellation lands
				}
				return nil
			})
		}()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Select did not return within 30s of the cancellation")
		}
		// The store still works.
		if got := srvSelectAll(t, s, ctx, "SELECT 1 AS one", nil); len(got) != 1 || got[0] != `{"one":1}` {
			t.Errorf("after cancel: %q", got)
		}
	})

	t.Run("DeadlineBecomesError", func(t *testing.T) {
		dctx, dcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer dcancel()
		err := s.Select(dctx, "SELECT sleepEachRow(1) FROM numbers(10) SETTINGS max_block_size = 1", nil, func([]byte) error { return nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
	})
}

func srvSelectAll(t *testing.T, s Store, ctx context.Context, sql string, params Params) []string {
	t.Helper()
	var got []string
	if err := s.Select(ctx, sql, params, func(row []byte) error {
		got = append(got, string(row))
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return got
}

// srvCompareWithServerJSON holds our encoding of each row of sql to the
// server's own JSONEachRow (formatRowNoNewline), compared after decoding;
// byte differences are logged.
func srvCompareWithServerJSON(t *testing.T, s Store, ctx context.Context, sql string) {
	t.Helper()
	ours := srvSelectAll(t, s, ctx, sql, nil)
	var theirs []string
	if err := s.Select(ctx, "SELECT formatRowNoNewline('JSONEachRow', *) AS j FROM ("+sql+") SETTINGS output_format_json_quote_64bit_integers = 0", nil,
		func(row []byte) error {
			var r struct{ J string }
			if err := json.Unmarshal(row, &r); err != nil {
				return err
			}
			theirs = append(theirs, r.J)
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	if len(ours) != len(theirs) {
		t.Fatalf("%d rows, server formatted %d", len(ours), len(theirs))
	}
	for i := range ours {
		if ours[i] != theirs[i] {
			t.Logf("row %d bytes differ:\n ours:   %s\n server: %s", i, ours[i], theirs[i])
		}
		a, b := srvDecodeJSON(t, ours[i]), srvDecodeJSON(t, theirs[i])
		if !reflect.DeepEqual(a, b) {
			t.Errorf("row %d decodes differently:\n ours:   %s\n server: %s", i, ours[i], theirs[i])
		}
	}
}

func srvDecodeJSON(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return srvNormalizeNumbers(v)
}

// srvNormalizeNumbers makes 1e21 and 1e+21, 0.1 and 0.10 compare equal.
func srvNormalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(v.String()); ok {
			return r.RatString()
		}
		return v.String()
	case []any:
		for i := range v {
			v[i] = srvNormalizeNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = srvNormalizeNumbers(v[k])
		}
	}
	return v
}

// srvRenderMigration returns the statements that create audit_events as
// the migrations leave it, for one server: a server runs one statement
// per request.
func srvRenderMigration(t *testing.T) []string {
	t.Helper()
	return renderAuditEventsDDL(t)
}

// ---- benchmarks ----

func BenchmarkServerEncodeRow(b *testing.B) {
	fc := &srvFakeConn{t: &testing.T{}}
	s := &server{conn: fc, log: srvDiscard()}
	rows := srvTestRows()
	if err := s.Insert(context.Background(), rows); err != nil {
		b.Fatal(err)
	}
	var buf chproto.Buffer
	if err := fc.batches[0].block.Encode(&buf, clickhouse.ClientTCPProtocolVersion); err != nil {
		b.Fatal(err)
	}
	block := proto.NewBlock()
	block.ServerContext.Timezone = time.UTC
	if err := block.Decode(buf.Reader(), clickhouse.ClientTCPProtocolVersion); err != nil {
		b.Fatal(err)
	}
	r := &srvFakeRows{block: block}
	enc := newRowEncoder(r.ColumnTypes())
	var out []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.row = i%block.Rows() + 1
		if err := r.Scan(enc.dests...); err != nil {
			b.Fatal(err)
		}
		out = enc.encode(out[:0])
	}
	b.SetBytes(int64(len(out)))
}

func BenchmarkServerInsertColumns(b *testing.B) {
	rows := make([]Row, 0, 1000)
	for range 500 {
		rows = append(rows, srvTestRows()...)
	}
	b.ReportAllocs()
	for b.Loop() {
		c := getInsertColumns()
		c.appendRows(rows)
		_ = dedupToken(rows)
		putInsertColumns(c)
	}
}
