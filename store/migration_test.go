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

// tableColumn is a column of audit_events: name and type without codec
// or default, and whether it is an ALIAS (computed, not stored).
type tableColumn struct {
	name, typ string
	alias     bool
}

var (
	addColumn    = regexp.MustCompile(`ADD COLUMN (?:IF NOT EXISTS )?(\w+) (.+?)(?: CODEC\(.*\))?(?: (AFTER (\w+)|FIRST))?[,;]?$`)
	renameColumn = regexp.MustCompile(`RENAME COLUMN (?:IF EXISTS )?(\w+) TO (\w+);?$`)
	columnExpr   = regexp.MustCompile(` (ALIAS|DEFAULT) `)
)

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
			if m := renameColumn.FindStringSubmatch(line); m != nil {
				at := slices.IndexFunc(cols, func(c tableColumn) bool { return c.name == m[1] })
				if at < 0 {
					t.Fatalf("%s: RENAME COLUMN %s: no such column", names[i], m[1])
				}
				cols[at].name = m[2]
				continue
			}
			if m := addColumn.FindStringSubmatch(line); m != nil {
				c := tableColumn{name: m[1], typ: m[2]}
				if e := columnExpr.FindStringSubmatchIndex(c.typ); e != nil {
					c.alias = c.typ[e[2]:e[3]] == "ALIAS"
					c.typ = c.typ[:e[0]]
				}
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
			cols = append(cols, tableColumn{name: name, typ: typ})
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
	checkColumns(t, "the migrations", cols)
}

// checkColumns holds audit_events' columns as source (the engine, the
// migrations) has them to what the inserters write (storedColumns) and
// what the readers select (rowColumns).
func checkColumns(t *testing.T, source string, cols []tableColumn) {
	t.Helper()
	stored, all := storedAndAll(cols)
	if want := storedWant(); !slices.Equal(stored, want) {
		t.Errorf("audit_events stored columns (%s) vs storedColumns (derived.go):\n got:  %q\n want: %q", source, stored, want)
	}
	for _, c := range rowColumns {
		if !slices.Contains(all, c.name+" "+c.typ) {
			t.Errorf("rowColumns' %s %s is not a column of audit_events (%s): %q", c.name, c.typ, source, all)
		}
	}
}

// storedAndAll returns the stored columns of cols and all of them, each as
// "name type".
func storedAndAll(cols []tableColumn) (stored, all []string) {
	for _, c := range cols {
		if !c.alias {
			stored = append(stored, c.name+" "+c.typ)
		}
		all = append(all, c.name+" "+c.typ)
	}
	return stored, all
}

// storedWant returns storedColumns as "name type".
func storedWant() []string {
	var want []string
	for _, c := range storedColumns {
		want = append(want, c.name+" "+c.typ)
	}
	return want
}
