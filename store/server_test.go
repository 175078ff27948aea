package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
)

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
	b := newInsertBatch()
	b.appendRows(srvTestRows())
	vals := b.values()
	if got := len(vals); got != len(storedColumns) {
		t.Fatalf("values() has %d columns, storedColumns %d", got, len(storedColumns))
	}
	var groups [][]string
	for i, c := range storedColumns {
		if c.name == "user_groups" {
			groups = vals[i].([][]string)[:1]
		}
	}
	b.reset()
	for i, v := range b.values() {
		if n := reflect.ValueOf(v).Len(); n != 0 {
			t.Errorf("column %s has %d values after reset", storedColumns[i].name, n)
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

// The Scan tests below check the cancellation scheme: the driver's query
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

func TestServerScanComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var got []uint64
		if err := Each(ctx, s, "SELECT number FROM numbers(3)", nil, func(n uint64) error {
			got = append(got, n)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if want := []uint64{0, 1, 2}; !reflect.DeepEqual(got, want) {
			t.Errorf("rows %v, want %v", got, want)
		}
		if fc.queryCtx.Done() != nil {
			t.Error("the driver's query context can be cancelled")
		}
		if e := fc.execLog(); len(e) != 0 {
			t.Errorf("statements after a complete query: %q", e)
		}
	})
}

func TestServerScanFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 100)
		stop := errors.New("enough")
		n := 0
		err := Each(context.Background(), s, "SELECT number FROM numbers(100)", nil, func(uint64) error {
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

func TestServerScanCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		err := Each(ctx, s, "SELECT number FROM numbers(100)", nil, func(uint64) error {
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
func TestServerScanKillRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, s := srvSelectFixture(t, 10)
		release := make(chan struct{})
		fc.rows.closeWait = release
		stop := errors.New("stop")
		done := make(chan error)
		go func() {
			done <- Each(context.Background(), s, "SELECT 1", nil, func(uint64) error { return stop })
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

func TestServerScanDeadlinePassed(t *testing.T) {
	fc, s := srvSelectFixture(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Each(ctx, s, "SELECT 1", nil, func(uint64) error { return nil }); !errors.Is(err, context.Canceled) {
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
		got := embJSONRows(t, s, ctx, "SELECT k, v FROM kv WHERE k = {k:String}", Params{"k": "it's \"q\""})
		if want := []string{`{"k":"it's \"q\"","v":-42}`}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
		// Values are read as escaped text: `\\` is one backslash, `\t` a tab.
		got = embJSONRows(t, s, ctx, "SELECT {s:String} AS s, {a:Array(String)} AS a", Params{"s": `a\\b\tc`, "a": `['x\'y', 'z']`})
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
		// The server's own JSON of the rows, as the embedded engine's.
		got := embJSONRows(t, s, ctx, "SELECT "+strings.Join(RowColumns(), ", ")+" FROM audit_events FINAL WHERE cluster = {c:String} ORDER BY ts", Params{"c": "prod-eu"})
		want, err := os.ReadFile(filepath.Join("testdata", "embedded_roundtrip.golden"))
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.Join(got, "\n") + "\n"; g != string(want) {
			t.Errorf("server result differs from testdata/embedded_roundtrip.golden:\n got:\n%s\nwant:\n%s", g, want)
		}

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

	t.Run("ScanTypes", func(t *testing.T) {
		var got []scanNatural
		err := Each(ctx, s, scanNaturalSQL, nil, func(r scanNatural) error {
			got = append(got, r)
			return nil
		})
		if want := scanNaturalWant(); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("FnErrorStopsInfiniteQuery", func(t *testing.T) {
		stop := errors.New("enough")
		errc := make(chan error, 1)
		go func() {
			n := 0
			errc <- Each(ctx, s, "SELECT number FROM system.numbers", nil, func(uint64) error {
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
			errc <- Each(qctx, s, "SELECT number FROM system.numbers", nil, func(uint64) error {
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
		if got := embJSONRows(t, s, ctx, "SELECT 1 AS one", nil); len(got) != 1 || got[0] != `{"one":1}` {
			t.Errorf("after cancel: %q", got)
		}
	})

	t.Run("DeadlineBecomesError", func(t *testing.T) {
		dctx, dcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer dcancel()
		err := Each(dctx, s, "SELECT sleepEachRow(1) FROM numbers(10) SETTINGS max_block_size = 1", nil, func(uint8) error { return nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
	})
}

// srvRenderMigration returns the statements that create audit_events as
// the migrations leave it, for one server: a server runs one statement
// per request.
func srvRenderMigration(t *testing.T) []string {
	t.Helper()
	return renderAuditEventsDDL(t)
}

// ---- benchmarks ----

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
