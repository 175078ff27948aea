package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/chdb"
)

// exportFixture imports a generated log twice, as clusters a and b, into
// a store of its own and returns the store URL. The log's events span
// about a second from 2026-01-01T00:00:00Z.
func exportFixture(t *testing.T, storeURL string, events int) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "audit.log")
	if _, stderr, code := runCLI(t, "gen", "--events", strconv.Itoa(events), "--out", log); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	for _, c := range []string{"a", "b"} {
		if stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", c, "--no-detect", "--progress", "never", log); code != 0 {
			t.Fatalf("import --cluster %s: exit %d\n%s\n%s", c, code, stdout, stderr)
		}
	}
}

// exportFilters are the filters the export tests run: everything, one
// cluster, a time range, both.
var exportFilters = []struct {
	name string
	args []string
}{
	{"all", nil},
	{"cluster", []string{"--cluster", "b"}},
	{"time", []string{"--since", "2026-01-01T00:00:00.2Z", "--until", "2026-01-01T00:00:00.5Z"}},
	{"cluster+time+verb", []string{"--cluster", "a", "--since", "2026-01-01T00:00:00.1Z", "--until", "2026-01-01T00:00:00.6Z", "--verb", "get,list"}},
}

// TestExportNDJSONMatchesQueryAll: export --format ndjson writes, event for
// event and byte for byte, what query --all prints for the same filters,
// to standard output and to an -o file.
func TestExportNDJSONMatchesQueryAll(t *testing.T) {
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "db")
	const n = 3000
	exportFixture(t, storeURL, n)
	for _, tc := range exportFilters {
		t.Run(tc.name, func(t *testing.T) {
			want, stderr, code := runCLI(t, append([]string{"query", "--store", storeURL, "--all"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("query --all: exit %d: %s", code, stderr)
			}
			lines := strings.Count(want, "\n")
			switch {
			case tc.name == "all" && lines != 2*n:
				t.Fatalf("query --all printed %d events, want %d", lines, 2*n)
			case tc.name != "all" && (lines == 0 || lines >= 2*n):
				t.Fatalf("the filter selects %d of %d events: the test needs a proper subset", lines, 2*n)
			}
			got, stderr, code := runCLI(t, append([]string{"export", "--store", storeURL}, tc.args...)...)
			if code != 0 {
				t.Fatalf("export: exit %d: %s", code, stderr)
			}
			compareLines(t, "export to stdout", got, want)
			out := filepath.Join(dir, tc.name+".ndjson")
			if _, stderr, code := runCLI(t, append([]string{"export", "--store", storeURL, "-o", out, "--progress", "always"}, tc.args...)...); code != 0 {
				t.Fatalf("export -o: exit %d: %s", code, stderr)
			} else if !strings.Contains(stderr, strconv.Itoa(lines)+" events") || !strings.Contains(stderr, "done") {
				t.Errorf("export --progress always: stderr %q, want the final count %d events and done", stderr, lines)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			compareLines(t, "export -o", string(b), want)
		})
	}
}

func compareLines(t *testing.T, what, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			t.Fatalf("%s: line %d differs from query --all:\n got %.200s\nwant %.200s", what, i+1, g[i], w[i])
		}
	}
	t.Fatalf("%s: %d lines, query --all %d", what, len(g)-1, len(w)-1)
}

// openEngine opens the embedded engine in this process on a store's data
// path, once no child process holds it, to read exported files back with
// the engine itself.
func openEngine(t *testing.T, storeURL string) *chdb.DB {
	t.Helper()
	lib, err := chdb.LibraryPath("")
	if err != nil {
		t.Skip(err)
	}
	db, err := chdb.Open(lib, strings.TrimPrefix(storeURL, "chdb://"), "--output_format_json_quote_64bit_integers=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func engineRows(t *testing.T, db *chdb.DB, sql string, params map[string]string) []map[string]any {
	t.Helper()
	out, err := db.Query(context.Background(), sql, "JSONEachRow", params)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var rows []map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// TestExportParquet: export -o x.parquet (the format from the extension)
// writes one Parquet file that the engine reads back: the columns of
// audit_events, one row per event query --all prints for the same filter,
// in the same order, with the same raw JSON and typed values that agree
// with it.
func TestExportParquet(t *testing.T) {
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "db")
	const n = 3000
	exportFixture(t, storeURL, n)

	// Every export first: the engine is opened in this process after, on
	// the store's path, which one process holds at a time.
	want := map[string][]string{}
	for _, tc := range exportFilters {
		stdout, stderr, code := runCLI(t, append([]string{"query", "--store", storeURL, "--all"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%s: query --all: exit %d: %s", tc.name, code, stderr)
		}
		want[tc.name] = strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		out := filepath.Join(dir, tc.name+".parquet")
		if _, stderr, code := runCLI(t, append([]string{"export", "--store", storeURL, "-o", out, "--progress", "always"}, tc.args...)...); code != 0 {
			t.Fatalf("%s: export -o %s: exit %d: %s", tc.name, out, code, stderr)
		} else if !strings.Contains(stderr, " of Parquet") || !strings.Contains(stderr, strconv.Itoa(len(want[tc.name]))+" events") || !strings.Contains(stderr, "done") {
			t.Errorf("%s: export --progress always: stderr %q, want a Parquet progress line with the events, ending in done", tc.name, stderr)
		}
	}
	// --format parquet to a pipe (not a terminal) writes the same file.
	piped, stderr, code := runCLI(t, "export", "--store", storeURL, "--format", "parquet")
	if code != 0 {
		t.Fatalf("export --format parquet to stdout: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "all.parquet")); err != nil || string(b) != piped {
		t.Errorf("Parquet on stdout (%d bytes) differs from -o all.parquet (%d bytes, %v)", len(piped), len(b), err)
	}
	db := openEngine(t, storeURL)

	for _, tc := range exportFilters {
		t.Run(tc.name, func(t *testing.T) {
			wantRaw := want[tc.name]
			p := map[string]string{"f": filepath.Join(dir, tc.name+".parquet")}
			rows := engineRows(t, db, "SELECT count() AS n, uniqExact(cluster, audit_id, stage) AS keys, min(ts) AS lo, max(ts) AS hi, "+
				"groupUniqArray(cluster) AS clusters FROM file({f:String}, Parquet)", p)
			if len(rows) != 1 || rows[0]["n"].(json.Number).String() != strconv.Itoa(len(wantRaw)) || rows[0]["keys"] != rows[0]["n"] {
				t.Fatalf("the file holds %v; want %d rows, one per event", rows, len(wantRaw))
			}
			if wantCluster := map[string]string{"cluster": "b", "cluster+time+verb": "a"}[tc.name]; wantCluster != "" {
				if cl := rows[0]["clusters"].([]any); len(cl) != 1 || cl[0] != wantCluster {
					t.Errorf("clusters in the file: %v, want only %s", cl, wantCluster)
				}
			}
			if tc.name == "time" {
				lo, hi := rows[0]["lo"].(string), rows[0]["hi"].(string)
				if lo < "2026-01-01 00:00:00.200000" || hi >= "2026-01-01 00:00:00.500000" {
					t.Errorf("times in the file span %s to %s, outside the filter", lo, hi)
				}
			}

			// Row by row: raw is the line query --all prints, and the
			// typed columns say what the event says.
			got := engineRows(t, db, "SELECT raw, audit_id, stage, verb, user, code, ts, toTypeName(ts) AS ts_type "+
				"FROM file({f:String}, Parquet)", p)
			if len(got) != len(wantRaw) {
				t.Fatalf("%d rows, want %d", len(got), len(wantRaw))
			}
			for i, r := range got {
				if r["raw"] != wantRaw[i] {
					t.Fatalf("row %d: raw differs from query --all's line:\n got %.200s\nwant %.200s", i, r["raw"], wantRaw[i])
				}
				if i%97 != 0 {
					continue
				}
				var ev struct {
					AuditID, Stage, Verb string
					User                 struct{ Username string }
					ResponseStatus       struct{ Code int }
					StageTimestamp       time.Time
				}
				if err := json.Unmarshal([]byte(wantRaw[i]), &ev); err != nil {
					t.Fatal(err)
				}
				wantTS := ev.StageTimestamp.UTC().Format("2006-01-02 15:04:05.000000")
				if r["audit_id"] != ev.AuditID || r["stage"] != ev.Stage || r["verb"] != ev.Verb || r["user"] != ev.User.Username ||
					r["code"].(json.Number).String() != strconv.Itoa(ev.ResponseStatus.Code) || r["ts"] != wantTS {
					t.Errorf("row %d: typed columns %v disagree with the event %+v", i, r, ev)
				}
				if r["ts_type"] != "DateTime64(6, 'UTC')" {
					t.Errorf("ts reads back as %v, want DateTime64(6, 'UTC')", r["ts_type"])
				}
			}
		})
	}

	// The file has audit_events's typed columns in the table's order (the
	// migrations say the schema once), then raw, the whole event, where
	// the table has the residual; received_at and request_uri as their
	// ALIAS columns give them, not in their stored forms (migration 0009).
	t.Run("columns", func(t *testing.T) {
		p := map[string]string{"f": filepath.Join(dir, "all.parquet")}
		var got, want []string
		for _, r := range engineRows(t, db, "DESCRIBE file({f:String}, Parquet)", p) {
			got = append(got, r["name"].(string))
		}
		for _, r := range engineRows(t, db, "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'audit_events'"+
			" AND name NOT IN ('received_at_full', 'received_lag', 'request_uri_full', 'request_uri_tmpl') ORDER BY position", nil) {
			if r["name"] != "raw" && r["name"] != "residual" {
				want = append(want, r["name"].(string))
			}
		}
		want = append(want, "raw")
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("Parquet columns %v\nwant audit_events's %v", got, want)
		}
		meta := engineRows(t, db, "SELECT num_rows, num_row_groups FROM file({f:String}, ParquetMetadata)", p)
		if len(meta) != 1 || meta[0]["num_rows"].(json.Number).String() != strconv.Itoa(2*n) {
			t.Errorf("Parquet metadata %v, want %d rows", meta, 2*n)
		}
	})
}

// TestExportErrors: bad input is refused with a message saying what to
// fix, and a failed export leaves no file behind.
func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "db")
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"unknown format", []string{"--format", "csv", "-o", filepath.Join(dir, "x.csv")}, 2, `unknown export format "csv": use ndjson or parquet`},
		{"bad filter", []string{"--since", "yesterday"}, 2, "since"},
		{"bad progress", []string{"--progress", "sometimes"}, 2, "--progress"},
		{"argument", []string{"extra"}, 2, "unexpected argument"},
		{"unwritable path", []string{"-o", filepath.Join(dir, "no", "such", "dir", "x.ndjson")}, 1, "creating the export file"},
		{"directory", []string{"-o", dir}, 2, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, append([]string{"export", "--store", storeURL}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.contains) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.contains)
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "partial") || strings.HasSuffix(e.Name(), ".csv") {
			t.Errorf("a failed export left %s", e.Name())
		}
	}
	// An unwritable directory (not root's: root writes anywhere).
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, stderr, code := runCLI(t, "export", "--store", storeURL, "-o", filepath.Join(ro, "x.parquet")); code != 1 || !strings.Contains(stderr, "creating the export file") {
			t.Errorf("read-only directory: exit %d, stderr %q", code, stderr)
		}
	}
}

// TestExportPipedStdin: a piped standard input is not taken by the
// embedded engine as the data of an INSERT (which would fail the schema
// migration of a new store).
func TestExportPipedStdin(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "export", "--store", "chdb://"+filepath.Join(dir, "db"), "-o", filepath.Join(dir, "x.parquet"))
	cmd.Env = append(os.Environ(), "AUDITLENS_TEST_MAIN=1")
	cmd.Stdin = strings.NewReader(`{"kind":"Event"}` + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("export with a piped stdin: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.parquet")); err != nil {
		t.Error(err)
	}
}

// TestExportServer runs export against the ClickHouse server in
// CLICKHOUSE_URL (as store's TestServerIntegration does), in a database of
// its own: NDJSON and the raw column of Parquet equal query --all.
func TestExportServer(t *testing.T) {
	dsn := os.Getenv("CLICKHOUSE_URL")
	if dsn == "" {
		t.Skip("set CLICKHOUSE_URL (clickhouse://user:pass@host:9000/db) to run against a ClickHouse server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var b [6]byte
	rand.Read(b[:])
	db := "auditlens_export_" + hex.EncodeToString(b[:])
	if err := admin.Exec(ctx, "CREATE DATABASE "+db, nil); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" SYNC", nil)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	storeURL := u.String()
	exportFixture(t, storeURL, 1000)
	for _, tc := range exportFilters {
		t.Run(tc.name, func(t *testing.T) {
			want, stderr, code := runCLI(t, append([]string{"query", "--store", storeURL, "--all"}, tc.args...)...)
			if code != 0 || want == "" {
				t.Fatalf("query --all: exit %d, %d bytes: %s", code, len(want), stderr)
			}
			got, stderr, code := runCLI(t, append([]string{"export", "--store", storeURL}, tc.args...)...)
			if code != 0 {
				t.Fatalf("export: exit %d: %s", code, stderr)
			}
			compareLines(t, "export from the server", got, want)
		})
	}
	// Parquet: its raw column, read back by the embedded engine, is what
	// query --all prints, in the same order.
	want, stderr, code := runCLI(t, "query", "--store", storeURL, "--all")
	if code != 0 {
		t.Fatalf("query --all: exit %d: %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "x.parquet")
	if _, stderr, code := runCLI(t, "export", "--store", storeURL, "-o", out); code != 0 {
		t.Fatalf("parquet from a server: exit %d: %s", code, stderr)
	}
	var got strings.Builder
	for _, r := range engineRows(t, openEngine(t, "chdb://"+t.TempDir()), "SELECT raw FROM file({f:String}, Parquet) "+
		"SETTINGS input_format_parquet_preserve_order = 1, max_threads = 1", map[string]string{"f": out}) {
		got.WriteString(r["raw"].(string) + "\n")
	}
	compareLines(t, "the Parquet export's raw column from the server", got.String(), want)
}
