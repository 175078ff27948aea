package chdb

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run on the real library. When it cannot be found they fail
// with the error that says how to provide it (`make test` fetches it first).
var (
	testLib  string // resolved libchdb.so
	testDir  string // data path of testDB
	testDB   *DB    // shared: the engine runs on one data path per process
	testArgs = []string{"--output_format_json_quote_64bit_integers=0"}
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	snapshotSignals()
	var err error
	if testLib, err = LibraryPath(""); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: store/chdb tests need libchdb.so:", err)
		return 1
	}
	if testDir, err = os.MkdirTemp("", "chdb-test-"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(testDir)
	if testDB, err = Open(testLib, testDir, testArgs...); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: opening the engine:", err)
		return 1
	}
	code := m.Run()
	if err := testDB.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: closing the engine:", err)
		return 1
	}
	return code
}

func query(t testing.TB, db *DB, sql string, params map[string]string) string {
	t.Helper()
	out, err := db.Query(context.Background(), sql, "TabSeparated", params)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

func TestLibraryPath(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libchdb.so")
	if err := os.WriteFile(lib, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.so")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cacheHome := t.TempDir()
	cached := filepath.Join(cacheHome, "auditlens", "chdb", LibVersion, "libchdb.so")
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, sysErr := os.Stat(SystemLibPath)
	systemInstalled := sysErr == nil

	tests := []struct {
		name     string
		flag     string
		env      string
		cache    string // XDG_CACHE_HOME
		want     string
		wantErr  []string // substrings of the error; ErrLibraryNotFound implied
		noSystem bool     // only meaningful without /usr/local/lib/libchdb.so
	}{
		{name: "flag", flag: lib, env: empty, cache: cacheHome, want: lib},
		{name: "flag wins over env", flag: lib, env: "/nonexistent/env.so", want: lib},
		{name: "missing flag does not fall through", flag: filepath.Join(dir, "nope.so"), env: lib, cache: cacheHome,
			wantErr: []string{"--chdb-lib " + filepath.Join(dir, "nope.so")}},
		{name: "empty flag file", flag: empty, wantErr: []string{"empty file"}},
		{name: "directory", flag: dir, wantErr: []string{"not a regular file"}},
		{name: "env", env: lib, cache: cacheHome, want: lib},
		{name: "missing env does not fall through", env: filepath.Join(dir, "nope.so"), cache: cacheHome,
			wantErr: []string{EnvLibPath + " " + filepath.Join(dir, "nope.so")}},
		{name: "cache", cache: cacheHome, want: cached},
		{name: "nothing", cache: t.TempDir(), noSystem: true,
			wantErr: []string{"--chdb-lib", EnvLibPath, "make chdb", "scripts/chdb-lib.sh", SystemLibPath, LibVersion, "tried: cache "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.noSystem && systemInstalled {
				t.Skipf("%s is installed on this machine", SystemLibPath)
			}
			t.Setenv(EnvLibPath, tt.env)
			t.Setenv("XDG_CACHE_HOME", tt.cache)
			got, err := LibraryPath(tt.flag)
			if tt.wantErr != nil {
				if !errors.Is(err, ErrLibraryNotFound) {
					t.Fatalf("LibraryPath(%q) = %q, %v; want ErrLibraryNotFound", tt.flag, got, err)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("LibraryPath(%q) = %q, %v; want %q", tt.flag, got, err, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	if v := testDB.Version(); !strings.HasPrefix(v, "26.") {
		t.Errorf("Version() = %q, want 26.x", v)
	}
	if v := query(t, testDB, "SELECT version()", nil); !strings.HasPrefix(v, "26.") {
		t.Errorf("SELECT version() = %q, want 26.x", v)
	}
}

func TestQuery(t *testing.T) {
	ctx := context.Background()
	// Parameter values are in ClickHouse's escaped text format (as in the
	// HTTP interface's param_ arguments): backslash sequences are decoded,
	// everything else (quotes, NUL, SQL) is data.
	t.Run("params are data, binary-safe", func(t *testing.T) {
		raw := "it's a \"value\" with\x00NUL and '); DROP TABLE x; --"
		got := query(t, testDB, "SELECT hex({s:String}), hex({esc:String}), {n:Int64} + 1, length({e:String})",
			map[string]string{"s": raw, "esc": `tab\there\\`, "n": "41", "e": ""})
		want := strings.ToUpper(hex.EncodeToString([]byte(raw))) + "\t" +
			strings.ToUpper(hex.EncodeToString([]byte("tab\there\\"))) + "\t42\t0"
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("binary-safe SQL", func(t *testing.T) {
		got := query(t, testDB, "SELECT length('a\x00b')", nil)
		if got != "3" {
			t.Errorf("got %q, want 3", got)
		}
	})
	t.Run("format and 64-bit integers", func(t *testing.T) {
		out, err := testDB.Query(ctx, "SELECT toUInt64(18446744073709551615) AS u, toInt64(-5) AS i", "JSONEachRow", nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"u":18446744073709551615,"i":-5}` + "\n"; string(out) != want {
			t.Errorf("got %q, want %q", out, want)
		}
	})
	t.Run("DDL returns nothing", func(t *testing.T) {
		out, err := testDB.Query(ctx, "CREATE TABLE IF NOT EXISTS q_ddl (a UInt8) ENGINE = Memory", "", nil)
		if err != nil || len(out) != 0 {
			t.Errorf("got %q, %v; want no output", out, err)
		}
	})

	errTests := []struct {
		name, sql string
		params    map[string]string
		want      string
	}{
		{"syntax", "SELEC 1", nil, "chdb query: "},
		{"syntax with params", "SELEC {a:String}", map[string]string{"a": "x"}, "Syntax error"},
		{"unknown table", "SELECT * FROM no_such_table", nil, "no_such_table"},
		{"missing param", "SELECT {a:String}", map[string]string{"b": "x"}, "chdb query: "},
		{"bad param value", "SELECT {a:UInt8}", map[string]string{"a": "300x"}, "chdb query: "},
		{"raw newline in param", "SELECT {a:String}", map[string]string{"a": "x\ny"}, "chdb query: "},
		{"empty", "", nil, "empty statement"},
	}
	for _, tt := range errTests {
		t.Run("error/"+tt.name, func(t *testing.T) {
			_, err := testDB.Query(ctx, tt.sql, "TabSeparated", tt.params)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Query(%q) error = %v, want it to contain %q", tt.sql, err, tt.want)
			}
		})
	}
	// The connections survive errors.
	if got := query(t, testDB, "SELECT 1", nil); got != "1" {
		t.Errorf("after errors: got %q", got)
	}
}

func TestQueryStream(t *testing.T) {
	ctx := context.Background()
	const n = 300_000

	t.Run("all rows", func(t *testing.T) {
		var buf bytes.Buffer
		chunks := 0
		err := testDB.QueryStream(ctx, "SELECT number FROM numbers({n:UInt64})", "TabSeparated",
			map[string]string{"n": strconv.Itoa(n)}, func(chunk []byte) error {
				chunks++
				buf.Write(chunk)
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != n || lines[0] != "0" || lines[n-1] != strconv.Itoa(n-1) {
			t.Fatalf("got %d lines (%q … %q), want %d", len(lines), lines[0], lines[len(lines)-1], n)
		}
		if chunks < 2 {
			t.Errorf("got %d chunk(s); want the result to arrive in several", chunks)
		}
	})
	t.Run("fn error cancels", func(t *testing.T) {
		errStop := errors.New("stop")
		calls := 0
		err := testDB.QueryStream(ctx, "SELECT number FROM numbers(100000000)", "TabSeparated", nil,
			func([]byte) error { calls++; return errStop })
		if !errors.Is(err, errStop) || calls != 1 {
			t.Errorf("got %v after %d calls, want errStop after 1", err, calls)
		}
	})
	t.Run("ctx cancels", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := testDB.QueryStream(ctx, "SELECT number FROM numbers(100000000)", "TabSeparated", nil,
			func([]byte) error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
	t.Run("error", func(t *testing.T) {
		err := testDB.QueryStream(ctx, "SELECT * FROM no_such_table", "TabSeparated", nil,
			func([]byte) error { return nil })
		if err == nil || !strings.HasPrefix(err.Error(), "chdb stream query: ") {
			t.Errorf("got %v, want a chdb stream query error", err)
		}
	})
	t.Run("empty result", func(t *testing.T) {
		calls := 0
		err := testDB.QueryStream(ctx, "SELECT 1 WHERE 0", "JSONEachRow", nil,
			func([]byte) error { calls++; return nil })
		if err != nil || calls != 0 {
			t.Errorf("got %v after %d calls, want no calls", err, calls)
		}
	})
	if got := query(t, testDB, "SELECT 2", nil); got != "2" {
		t.Errorf("after cancelled streams: got %q", got)
	}
}

// rowBinary encodes (id UInt64, s String) rows.
func rowBinary(first, n int, payload string) []byte {
	var b []byte
	for i := first; i < first+n; i++ {
		b = binary.LittleEndian.AppendUint64(b, uint64(i))
		s := payload + strconv.Itoa(i)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func TestInsert(t *testing.T) {
	ctx := context.Background()
	query(t, testDB, "CREATE TABLE ins (id UInt64, s String) ENGINE = MergeTree ORDER BY id", nil)
	t.Cleanup(func() { query(t, testDB, "DROP TABLE ins SYNC", nil) })

	// More than one append chunk.
	data := rowBinary(0, 10_000, strings.Repeat("x", 200))
	if len(data) <= insertChunk {
		t.Fatalf("test data %d bytes, want more than one chunk", len(data))
	}
	if err := testDB.Insert(ctx, "INSERT INTO ins (id, s)", "RowBinary", data); err != nil {
		t.Fatal(err)
	}
	jsonRows := `{"id":10000,"s":"a"}` + "\n" + `{"id":10001,"s":"b\u0000"}` + "\n"
	if err := testDB.Insert(ctx, "INSERT INTO ins", "JSONEachRow", []byte(jsonRows)); err != nil {
		t.Fatal(err)
	}
	if got := query(t, testDB, "SELECT count(), sum(id), max(length(s)) FROM ins", nil); got != "10002\t50015001\t204" {
		t.Errorf("got %q", got)
	}

	errTests := []struct {
		name, sql, format string
		data              []byte
	}{
		{"truncated", "INSERT INTO ins", "RowBinary", data[:len(data)-3]},
		{"bad json", "INSERT INTO ins", "JSONEachRow", []byte("{nope\n")},
		{"unknown table", "INSERT INTO no_such_table", "RowBinary", data[:100]},
		{"unknown format", "INSERT INTO ins", "NoSuchFormat", data[:100]},
	}
	for _, tt := range errTests {
		t.Run("error/"+tt.name, func(t *testing.T) {
			err := testDB.Insert(ctx, tt.sql, tt.format, tt.data)
			if err == nil || !strings.HasPrefix(err.Error(), "chdb insert: ") {
				t.Errorf("got %v, want a chdb insert error", err)
			}
		})
	}
	if got := query(t, testDB, "SELECT count() FROM ins", nil); got != "10002" {
		t.Errorf("after failed inserts: count %q, want 10002", got)
	}

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := testDB.Insert(ctx, "INSERT INTO ins", "RowBinary", data); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	query(t, testDB, "CREATE TABLE conc (g UInt32, id UInt64, s String) ENGINE = MergeTree ORDER BY (g, id)", nil)
	t.Cleanup(func() { query(t, testDB, "DROP TABLE conc SYNC", nil) })

	const workers, rounds = 2 * PoolSize, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*3)
	for g := range workers {
		wg.Go(func() {
			for r := range rounds {
				var b []byte
				for i := range 100 {
					b = binary.LittleEndian.AppendUint32(b, uint32(g))
					b = binary.LittleEndian.AppendUint64(b, uint64(r*100+i))
					b = binary.AppendUvarint(b, 1)
					b = append(b, 'x')
				}
				if err := testDB.Insert(ctx, "INSERT INTO conc", "RowBinary", b); err != nil {
					errs <- err
				}
				out, err := testDB.Query(ctx, "SELECT count() FROM conc WHERE g = {g:UInt32}", "TabSeparated",
					map[string]string{"g": strconv.Itoa(g)})
				if err != nil {
					errs <- err
				} else if got := strings.TrimSpace(string(out)); got != strconv.Itoa((r+1)*100) {
					errs <- fmt.Errorf("worker %d round %d: count %s", g, r, got)
				}
				err = testDB.QueryStream(ctx, "SELECT number FROM numbers(20000)", "TabSeparated", nil,
					func([]byte) error { return nil })
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOneDataPathPerProcess(t *testing.T) {
	ctx := context.Background()
	_, err := Open(testLib, t.TempDir())
	if !errors.Is(err, ErrDataPathInUse) || !strings.Contains(err.Error(), testDir) {
		t.Fatalf("Open on a second path: %v, want ErrDataPathInUse naming %s", err, testDir)
	}

	other, err := Open(testLib, testDir, testArgs...)
	if err != nil {
		t.Fatalf("second Open on the same path: %v", err)
	}
	query(t, other, "CREATE TABLE shared (a UInt8) ENGINE = MergeTree ORDER BY a", nil)
	query(t, other, "INSERT INTO shared VALUES (7)", nil)
	if got := query(t, testDB, "SELECT a FROM shared", nil); got != "7" {
		t.Errorf("first DB sees %q, want 7", got)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := other.Query(ctx, "SELECT 1", "", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Query after Close: %v, want ErrClosed", err)
	}
	if err := other.Insert(ctx, "INSERT INTO shared", "RowBinary", []byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Insert after Close: %v, want ErrClosed", err)
	}
	if got := query(t, testDB, "SELECT a FROM shared", nil); got != "7" {
		t.Errorf("first DB after the second closed: %q, want 7", got)
	}
	query(t, testDB, "DROP TABLE shared SYNC", nil)

	if db, err := Open(testLib, testDir, "--max_threads=abc"); err == nil || !strings.Contains(err.Error(), "--max_threads=abc") {
		t.Errorf("Open with an invalid setting: %v, want an error naming it", err)
		if db != nil {
			db.Close()
		}
	}
	if got := query(t, testDB, "SELECT 3", nil); got != "3" {
		t.Errorf("after a failed connect: %q", got)
	}
	if _, err := Open(testLib+".other", testDir); err == nil || !strings.Contains(err.Error(), "already loaded") {
		t.Errorf("Open with another library: %v, want an already-loaded error", err)
	}
}

// TestReopen closes the shared engine, runs it on another path, and comes
// back: data on disk survives, and the path can change once every DB is
// closed.
func TestReopen(t *testing.T) {
	query(t, testDB, "CREATE TABLE persist (a UInt8) ENGINE = MergeTree ORDER BY a", nil)
	query(t, testDB, "INSERT INTO persist VALUES (42)", nil)
	if err := testDB.Close(); err != nil {
		t.Fatal(err)
	}

	db2, err := Open(testLib, t.TempDir())
	if err != nil {
		t.Fatalf("Open on another path after Close: %v", err)
	}
	if got := query(t, db2, "EXISTS TABLE persist", nil); got != "0" {
		t.Errorf("new path sees the old table: EXISTS = %q", got)
	}
	if err := db2.Close(); err != nil {
		t.Fatal(err)
	}

	if testDB, err = Open(testLib, testDir, testArgs...); err != nil {
		t.Fatalf("reopening %s: %v", testDir, err)
	}
	if got := query(t, testDB, "SELECT a FROM persist", nil); got != "42" {
		t.Errorf("after reopen: %q, want 42", got)
	}
	query(t, testDB, "DROP TABLE persist SYNC", nil)
}

func TestDeadline(t *testing.T) {
	// A statement that takes far longer than the deadline, and produces
	// nothing to stream until it is done.
	const slow = "SELECT count() FROM numbers(1000000000000) WHERE NOT ignore(sipHash64(number))"
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			var err error
			if stream {
				err = testDB.QueryStream(ctx, slow, "", nil, func([]byte) error { return nil })
			} else {
				_, err = testDB.Query(ctx, slow, "", nil)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want context.DeadlineExceeded", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to honour a 300ms deadline", d)
			}
		})
	}
	// The limit does not stay on the connections.
	for range PoolSize {
		if got := query(t, testDB, "SELECT getSetting('max_execution_time')", nil); got != "0" {
			t.Errorf("max_execution_time after the deadline: %q, want 0", got)
		}
	}
}
