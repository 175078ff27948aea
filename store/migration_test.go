package store

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
)

// The tests of both engines create audit_events from the migrations
// themselves (package migrations imports store, so they read the files):
// every migration that touches audit_events, in order, rendered for one
// node without database prefix, cluster, TTL or replication.

// auditEventsMigrations returns the names and text of the migration files
// that mention audit_events, in order.
func auditEventsMigrations(t testing.TB) (names, texts []string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("audit_events")) {
			names = append(names, filepath.Base(p))
			texts = append(texts, string(b))
		}
	}
	if len(names) == 0 {
		t.Fatal("no migration creates audit_events")
	}
	return names, texts
}

// renderAuditEventsDDL returns the statements that create audit_events as
// the migrations leave it, for one node.
func renderAuditEventsDDL(t testing.TB) []string {
	t.Helper()
	names, texts := auditEventsMigrations(t)
	var stmts []string
	for i, text := range texts {
		tmpl, err := template.New(names[i]).Option("missingkey=error").Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := tmpl.Execute(&out, testMigrationData{}); err != nil {
			t.Fatalf("rendering %s (template changed?): %v", names[i], err)
		}
		for s := range strings.SplitSeq(out.String(), ";\n") {
			if s = strings.TrimSpace(s); s != "" && !onlyComments(s) {
				stmts = append(stmts, s)
			}
		}
	}
	return stmts
}

func onlyComments(s string) bool {
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			return false
		}
	}
	return true
}

// testMigrationData fills the migrations' templates for one node.
type testMigrationData struct{ DB, Local, OnCluster, TTLSettings string }

func (testMigrationData) Engine(name string, _ ...string) string { return name }
func (testMigrationData) TTL(string) string                      { return "" }
func (testMigrationData) PartSettings() string                   { return "old_parts_lifetime = 0" }

// tableColumn is a column of audit_events: name and type without codec.
type tableColumn struct{ name, typ string }

var addColumn = regexp.MustCompile(`ADD COLUMN (?:IF NOT EXISTS )?(\w+) (.+?)(?: CODEC\(.*\))?(?: (AFTER (\w+)|FIRST))?;?$`)

// auditEventsColumns reads the columns of audit_events, in table order,
// from the migration text: the column list of the CREATE TABLE, then each
// later ADD COLUMN where its AFTER or FIRST puts it. It reads the text
// rather than a live table so that the tests without an engine check it.
func auditEventsColumns(t testing.TB) []tableColumn {
	t.Helper()
	names, texts := auditEventsMigrations(t)
	var cols []tableColumn
	created := false
	for i, text := range texts {
		in := false
		for sc := bufio.NewScanner(strings.NewReader(text)); sc.Scan(); {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "--") {
				continue
			}
			if m := addColumn.FindStringSubmatch(line); m != nil {
				c := tableColumn{m[1], m[2]}
				switch {
				case m[3] == "FIRST":
					cols = slices.Insert(cols, 0, c)
				case m[4] != "":
					at := slices.IndexFunc(cols, func(c tableColumn) bool { return c.name == m[4] })
					if at < 0 {
						t.Fatalf("%s: ADD COLUMN %s AFTER %s: no such column", names[i], c.name, m[4])
					}
					cols = slices.Insert(cols, at+1, c)
				default:
					cols = append(cols, c)
				}
				continue
			}
			if created {
				continue
			}
			switch {
			case line == "(":
				in = true
				continue
			case !in:
				continue
			case line == ")" || strings.HasPrefix(line, "INDEX "):
				in, created = false, true
				continue
			}
			name, typ, _ := strings.Cut(line, " ")
			typ = strings.TrimSuffix(strings.TrimSpace(typ), ",")
			if i := strings.Index(typ, " CODEC("); i >= 0 {
				typ = typ[:i]
			}
			cols = append(cols, tableColumn{name, typ})
		}
	}
	if !created {
		t.Fatal("no column list of audit_events in the migrations")
	}
	return cols
}

// TestAuditEventsColumnsParse: the parser above reads what the engine
// reads (TestEmbeddedColumnsMatchMigration compares the live table with
// the RowBinary encoding; this keeps the engine-free tests honest).
func TestAuditEventsColumnsParse(t *testing.T) {
	cols := auditEventsColumns(t)
	var names []string
	for _, c := range cols {
		names = append(names, c.name)
	}
	if len(names) < 2 || names[0] != "cluster" || names[1] != "apiserver" || names[len(names)-1] != "residual" {
		t.Errorf("columns %q: want cluster, apiserver first and residual last", names)
	}
	var want []string
	for _, c := range rowColumns {
		want = append(want, c.name+" "+c.typ)
	}
	var got []string
	for _, c := range cols {
		got = append(got, c.name+" "+c.typ)
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit_events columns (migrations) vs rowColumns (rows.go):\n got:  %q\n want: %q", got, want)
	}
}
