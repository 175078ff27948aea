package store

// Tests of the embedded engine run on the real libchdb. When it cannot be
// found they fail with the error that says how to provide it (`make test`
// fetches it first). The engine runs on one data path per process, so these
// tests do not run in parallel: each opens its own engine and closes it.
//
// The helpers are prefixed emb: the package's server tests have their own.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store/chdb"
)

// -update rewrites the golden files; declared here only if no other test
// file in the package declares it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/*.golden")
	}
}

func embCompareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("result differs from %s (-update rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// embRenderMigration returns the statements that create audit_events as
// the migrations leave it (renderAuditEventsDDL), as one text: the
// embedded engine runs several statements separated by semicolons.
func embRenderMigration(t testing.TB) string {
	t.Helper()
	return strings.Join(renderAuditEventsDDL(t), ";\n")
}

// embTestRows are two events: a typical one and one of edge values.
func embTestRows() []Row {
	return []Row{
		{
			Cluster: "prod-eu", APIServer: "apiserver-2", AuditID: "4d2e4b1c-3a5f-4b8e-9c1d-0e2f3a4b5c6d", Stage: "ResponseComplete",
			Level: "Metadata", Verb: "watch",
			RequestURI: "/api/v1/namespaces/kube-system/pods?allowWatchBookmarks=true&resourceVersion=123&timeoutSeconds=300&watch=true",
			Time:       time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC),
			ReceivedAt: time.Date(2025, 3, 4, 5, 6, 7, 100001000, time.UTC),
			User:       "system:serviceaccount:kube-system:coredns",
			Groups:     []string{"system:serviceaccounts", "system:authenticated"},
			UserAgent:  "coredns/v1.11.1 (linux/amd64) kubernetes/$Format",
			SourceIP:   "10.0.0.12", Resource: "pods", APIVersion: "v1", Namespace: "kube-system", Code: 200,
			Watch: true, RequestedRV: "123", TimeoutSeconds: 300, LabelSelector: "k8s-app=kube-dns", Limit: 500,
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

// embJSONRows returns the rows of sql as the engine's own JSONEachRow
// text, one object a row (64-bit integers unquoted): storetest.JSONRows
// for this package's tests, which cannot import storetest (it imports
// store).
func embJSONRows(t testing.TB, s Scanner, ctx context.Context, sql string, params Params) []string {
	t.Helper()
	var got []string
	err := Each(ctx, s, "SELECT formatRowNoNewline('JSONEachRow', *) FROM ("+sql+") SETTINGS output_format_json_quote_64bit_integers = 0",
		params, func(row string) error {
			got = append(got, row)
			return nil
		})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return got
}

// openTestTable is openTestEmbedded with audit_events created.
func openTestTable(t testing.TB) *Embedded {
	t.Helper()
	e := openTestEmbedded(t)
	if err := e.Exec(context.Background(), embRenderMigration(t), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// openTestEmbedded opens the engine on a fresh directory, closed when the
// test ends.
func openTestEmbedded(t testing.TB) *Embedded {
	t.Helper()
	e, err := OpenEmbedded(context.Background(), t.TempDir(), EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func TestEmbeddedRoundTrip(t *testing.T) {
	ctx := context.Background()
	e := openTestEmbedded(t)
	if e.Kind() != "chdb" {
		t.Errorf("Kind() = %q", e.Kind())
	}
	if err := e.Exec(ctx, embRenderMigration(t), nil); err != nil {
		t.Fatal(err)
	}
	rows := embTestRows()
	// Twice: a retried batch collapses into the same rows under FINAL.
	for range 2 {
		if err := e.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	got := embJSONRows(t, e, ctx, "SELECT "+strings.Join(RowColumns(), ", ")+" FROM audit_events FINAL WHERE cluster = {c:String} ORDER BY ts", Params{"c": "prod-eu"})
	embCompareGolden(t, "embedded_roundtrip.golden", []byte(strings.Join(got, "\n")+"\n"))
	if n := embJSONRows(t, e, ctx, "SELECT count() AS n FROM audit_events", nil); n[0] != `{"n":6}` {
		t.Errorf("without FINAL: %s, want 6 rows before merging", n[0])
	}
}

// The RowBinary encoding must match the table the migration creates:
// every column, each with the type its encoding is for.
func TestEmbeddedColumnsMatchMigration(t *testing.T) {
	ctx := context.Background()
	e := openTestTable(t)
	var cols []tableColumn
	err := Each(ctx, e, "SELECT name, type, default_kind FROM system.columns WHERE database = currentDatabase() AND table = 'audit_events' ORDER BY position", nil,
		func(c struct {
			Name, Type  string
			DefaultKind string `ch:"default_kind"`
		}) error {
			cols = append(cols, tableColumn{name: c.Name, typ: c.Type, alias: c.DefaultKind == "ALIAS"})
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	checkColumns(t, "the engine", cols)
}

func TestEmbeddedAppendRowBinary(t *testing.T) {
	r := Row{
		Cluster: "c", Time: time.UnixMicro(0x0102030405).UTC(), Groups: []string{"g1", "g2"},
		Code: -2, Watch: true, TimeoutSeconds: 300, Limit: -1,
		Annotations: map[string]string{"b": "2", "a": "1", "c": ""}, Raw: []byte("{}"),
	}
	var want []byte
	want = append(want, 1, 'c')                                                    // cluster
	want = append(want, 0)                                                         // apiserver
	want = binary.LittleEndian.AppendUint64(want, 0x0102030405)                    // ts
	want = binary.LittleEndian.AppendUint64(want, 0)                               // received_at_full
	want = binary.LittleEndian.AppendUint64(want, 0x0102030405)                    // received_lag: zero → epoch
	want = append(want, 0, 0, 0, 0, 0, 0)                                          // audit_id … request_uri_tmpl
	want = append(want, 0)                                                         // user
	want = append(want, 2, 2, 'g', '1', 2, 'g', '2')                               // user_groups
	want = append(want, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)                           // impersonated_user … object_uid
	want = binary.LittleEndian.AppendUint32(want, 0xfffffffe)                      // code
	want = append(want, 0, 1, 0, 0)                                                // response_rv, watch, req_rv, req_rv_match
	want = binary.LittleEndian.AppendUint32(want, 300)                             // timeout_seconds
	want = append(want, 0, 0)                                                      // selectors
	want = binary.LittleEndian.AppendUint64(want, 0xffffffffffffffff)              // req_limit
	want = append(want, 0)                                                         // req_continue
	want = append(want, 3, 1, 'a', 1, '1', 1, 'b', 1, '2', 1, 'c', 0, 2, '{', '}') // annotations (sorted), raw
	want = append(want, 0)                                                         // residual
	if got := appendRowBinary(nil, &r); !bytes.Equal(got, want) {
		t.Errorf("appendRowBinary:\n got % x\nwant % x", got, want)
	}
	if allocs := testing.AllocsPerRun(100, func() { appendRowBinary(make([]byte, 0, 256), &r) }); allocs > 1 {
		t.Errorf("appendRowBinary allocates %v times per row, want at most the buffer", allocs)
	}
}

func TestEmbeddedScan(t *testing.T) {
	ctx := context.Background()
	e := openTestEmbedded(t)

	t.Run("many rows, split across chunks", func(t *testing.T) {
		const n = 200_000
		i := 0
		err := Each(ctx, e, "SELECT number AS n, repeat('x', number % 50) AS s FROM numbers({n:UInt64})", Params{"n": strconv.Itoa(n)},
			func(r struct {
				N int
				S string
			}) error {
				if r.N != i || len(r.S) != i%50 {
					return fmt.Errorf("row %d: got %+v", i, r)
				}
				i++
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if i != n {
			t.Errorf("got %d rows, want %d", i, n)
		}
	})
	t.Run("params as escaped text", func(t *testing.T) {
		// The same contract as the server engine (see TestServerIntegration).
		type row struct {
			S, Q string
			A    []string
		}
		var got []row
		err := Each(ctx, e, "SELECT {s:String} AS s, {a:Array(String)} AS a, {q:String} AS q",
			Params{"s": `a\\b\tc`, "a": `['x\'y', 'z']`, "q": `'; DROP TABLE x; --`}, func(r row) error {
				got = append(got, r)
				return nil
			})
		if want := []row{{S: "a\\b\tc", A: []string{"x'y", "z"}, Q: "'; DROP TABLE x; --"}}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	})
	t.Run("no rows", func(t *testing.T) {
		if got := embJSONRows(t, e, ctx, "SELECT 1 WHERE 0", nil); len(got) != 0 {
			t.Errorf("got %q", got)
		}
	})
	t.Run("fn error stops the query", func(t *testing.T) {
		stop := errors.New("enough")
		n := 0
		err := Each(ctx, e, "SELECT number FROM system.numbers", nil, func(uint64) error {
			if n++; n == 1000 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Errorf("got %v, want the fn's error itself", err)
		}
	})
	t.Run("cancel stops the query", func(t *testing.T) {
		qctx, cancel := context.WithCancel(ctx)
		defer cancel()
		n := 0
		err := Each(qctx, e, "SELECT number FROM system.numbers", nil, func(uint64) error {
			if n++; n == 1000 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
	t.Run("error names the statement", func(t *testing.T) {
		err := Each(ctx, e, "SELECT * FROM no_such_table", nil, func(uint64) error { return nil })
		if err == nil || !strings.Contains(err.Error(), `"SELECT * FROM no_such_table"`) || !strings.Contains(err.Error(), "no_such_table") {
			t.Errorf("got %v", err)
		}
	})
	if got := embJSONRows(t, e, ctx, "SELECT 1 AS one", nil); len(got) != 1 || got[0] != `{"one":1}` {
		t.Errorf("after errors and cancels: %q", got)
	}
}

func TestEmbeddedExec(t *testing.T) {
	ctx := context.Background()
	e := openTestEmbedded(t)
	if err := e.Exec(ctx, "CREATE TABLE kv (k String, v Int64) ENGINE = MergeTree ORDER BY k", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Exec(ctx, "INSERT INTO kv SELECT {k:String}, {v:Int64}", Params{"k": `it's "q"`, "v": "-42"}); err != nil {
		t.Fatal(err)
	}
	// A statement that returns rows: they are discarded.
	if err := e.Exec(ctx, "SELECT * FROM kv", nil); err != nil {
		t.Fatal(err)
	}
	got := embJSONRows(t, e, ctx, "SELECT k, v FROM kv WHERE k = {k:String}", Params{"k": `it's "q"`})
	if want := []string{`{"k":"it's \"q\"","v":-42}`}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	err := e.Exec(ctx, "CREATE TABLE kv (k String) ENGINE = MergeTree ORDER BY k", nil)
	if err == nil || !strings.Contains(err.Error(), `running "CREATE TABLE kv`) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("duplicate table: got %v", err)
	}
	if err := e.Insert(ctx, nil); err != nil {
		t.Errorf("empty Insert: %v", err)
	}
	err = e.Insert(ctx, embTestRows())
	if err == nil || !strings.Contains(err.Error(), "inserting 3 rows into audit_events") {
		t.Errorf("Insert without the table: got %v", err)
	}
}

func TestEmbeddedOpenErrors(t *testing.T) {
	ctx := context.Background()
	_, err := OpenEmbedded(ctx, t.TempDir(), EmbeddedOptions{ChdbLib: filepath.Join(t.TempDir(), "libchdb.so")})
	if !errors.Is(err, chdb.ErrLibraryNotFound) || !strings.Contains(err.Error(), "make chdb") {
		t.Errorf("missing library: got %v", err)
	}
	openTestEmbedded(t)
	_, err = OpenEmbedded(ctx, t.TempDir(), EmbeddedOptions{})
	if !errors.Is(err, chdb.ErrDataPathInUse) {
		t.Errorf("second data path: got %v, want chdb.ErrDataPathInUse", err)
	}
}

// TestChdbURL: a path with the characters a URL gives meaning to comes
// back from its URL as it was.
func TestChdbURL(t *testing.T) {
	for _, dir := range []string{"/var/lib/auditlens", "/tmp/x#y/engine", "/tmp/a?b=c/d", "/tmp/100%/e", "/tmp/my data", "/tmp/ü/ß"} {
		got, err := chdbDataPath(ChdbURL(dir))
		if err != nil || got != dir {
			t.Errorf("ChdbURL(%q) = %q, read back as %q, %v", dir, ChdbURL(dir), got, err)
		}
	}
}

func TestOpenURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url, want, wantErr string
	}{
		{url: "chdb:///var/lib/auditlens", want: "/var/lib/auditlens"},
		{url: "chdb:///var/lib/auditlens/", want: "/var/lib/auditlens"},
		{url: "CHDB:///data", want: "/data"},
		{url: "chdb:///my%20data", want: "/my data"},
		{url: "chdb://./data", want: filepath.Join(wd, "data")},
		{url: "chdb://./data/sub/", want: filepath.Join(wd, "data", "sub")},
		{url: "chdb://.", want: wd},
		{url: "chdb://../data", want: filepath.Join(filepath.Dir(wd), "data")},
		{url: "chdb://", wantErr: "no data path"},
		{url: "chdb:///", wantErr: "no data path"},
		{url: "chdb://data/x", wantErr: `"data/x" is not a path (a relative path starts with ./)`},
		{url: "chdb://host:9000/x", wantErr: "holds only a path"},
		{url: "chdb:///x?mode=ro", wantErr: "holds only a path"},
		{url: "chdb://user@/x", wantErr: "holds only a path"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := chdbDataPath(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("chdbDataPath(%q) = %q, %v; want error containing %q", tt.url, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("chdbDataPath(%q) = %q, %v; want %q", tt.url, got, err, tt.want)
			}
		})
	}

	openErrs := []struct{ url, wantErr string }{
		{"", "want chdb:///abs/path"},
		{"/var/lib/auditlens", "want chdb:///abs/path"},
		{"mysql://u:secret@h/db", `scheme "mysql"`},
		{"chdb://", "no data path"},
	}
	for _, tt := range openErrs {
		t.Run("Open "+tt.url, func(t *testing.T) {
			s, err := Open(context.Background(), tt.url, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Open(%q) = %v, %v; want error containing %q", tt.url, s, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error reveals the password: %v", err)
			}
		})
	}
}

func TestOpenDispatch(t *testing.T) {
	ctx := context.Background()
	saved := openServer
	t.Cleanup(func() { openServer = saved })

	openServer = nil
	if _, err := Open(ctx, "clickhouse://localhost:9000/default", Options{}); err == nil || !strings.Contains(err.Error(), "no ClickHouse server engine") {
		t.Errorf("without a server engine: got %v", err)
	}
	var gotURL string
	var gotOpts Options
	openServer = func(_ context.Context, url string, opts Options) (Store, error) {
		gotURL, gotOpts = url, opts
		return nil, errors.New("stub")
	}
	const u = "clickhouse://u:p@localhost:9000/default?dial_timeout=1s"
	if _, err := Open(ctx, u, Options{ChdbLib: "/x"}); err == nil || err.Error() != "stub" || gotURL != u || gotOpts.ChdbLib != "/x" {
		t.Errorf("server dispatch: err %v, url %q, opts %+v", err, gotURL, gotOpts)
	}

	// chdb://./rel creates the directory under the working directory.
	t.Chdir(t.TempDir())
	s, err := Open(ctx, "chdb://./state/db", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind() != "chdb" {
		t.Errorf("Kind() = %q", s.Kind())
	}
	if fi, err := os.Stat(filepath.Join("state", "db")); err != nil || !fi.IsDir() {
		t.Errorf("data directory: %v", err)
	}
}

func TestEmbeddedRowBinarySize(t *testing.T) {
	rows := append(embTestRows(), embBenchRows(50)...)
	rows = append(rows, Row{Raw: bytes.Repeat([]byte("x"), 1<<22), Groups: []string{strings.Repeat("g", 1<<15)}})
	for i := range rows {
		if got, max := len(appendRowBinary(nil, &rows[i])), rowBinarySize(&rows[i]); got > max {
			t.Errorf("row %d: encoded %d bytes, rowBinarySize says at most %d", i, got, max)
		}
	}
}

func TestEmbeddedScanDeadline(t *testing.T) {
	e := openTestEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Nothing to stream until the whole count is done.
	err := Each(ctx, e, "SELECT count() FROM numbers(1000000000000) WHERE NOT ignore(sipHash64(number))", nil,
		func(uint64) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if got := embJSONRows(t, e, context.Background(), "SELECT 1 AS one", nil); len(got) != 1 {
		t.Errorf("after the deadline: %q", got)
	}
}
