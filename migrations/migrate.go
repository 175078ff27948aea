// Package migrations holds the ClickHouse schema as ordered, embedded SQL
// files and the migrator that applies them.
//
// Files are named NNNN_name.sql and applied in order. Every statement is
// idempotent (IF NOT EXISTS), so a migrator interrupted half-way can simply
// run again. Applied versions are recorded in schema_migrations. The files
// are text/template documents so the same schema serves a single node and a
// cluster: on a cluster, tables become Replicated*MergeTree "_local" tables
// created ON CLUSTER, each fronted by a Distributed table of the plain name.
//
// golang-migrate and goose both open transactions to record versions, which
// ClickHouse (and chDB in particular) does not have; this migrator needs only
// Exec and Select.
package migrations

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/auditlens/auditlens/store"
)

//go:embed *.sql
var files embed.FS

// Execer is what the migrator needs from a store.
type Execer interface {
	Exec(ctx context.Context, sql string, params store.Params) error
	Select(ctx context.Context, sql string, params store.Params, fn func(row []byte) error) error
}

// Config selects the schema variant.
type Config struct {
	// Cluster, when set, creates replicated local tables ON CLUSTER and
	// Distributed tables in front of them.
	Cluster string
	// Database qualifies table names on a cluster (Distributed tables need
	// it). Empty means the connection's current database.
	Database string
	// RetentionDays adds a TTL that drops whole daily partitions of events
	// older than this. 0 (the default) keeps everything: imported archives
	// are often older than any sensible retention.
	RetentionDays int
}

// Migration is one embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string // template text
}

// All returns the embedded migrations in order.
func All() ([]Migration, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range entries {
		prefix, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number and an underscore", name)
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %d", ms[i].Version)
		}
	}
	return ms, nil
}

// Result says what Apply did.
type Result struct {
	Applied []Migration
	Current int
}

// Apply brings the schema up to date. It is safe to run concurrently with
// readers and on every start.
func Apply(ctx context.Context, ex Execer, cfg Config) (Result, error) {
	var res Result
	ms, err := All()
	if err != nil {
		return res, err
	}
	t := newTemplater(cfg)
	versionTable, err := t.render("schema", `CREATE TABLE IF NOT EXISTS {{.DB}}schema_migrations{{.Local}} {{.OnCluster}}
(version UInt32, name String, applied_at DateTime64(6, 'UTC') DEFAULT now64(6))
ENGINE = {{.Engine "ReplacingMergeTree"}} ORDER BY version`)
	if err != nil {
		return res, err
	}
	for _, stmt := range t.withDistributed(versionTable) {
		if err := ex.Exec(ctx, stmt, nil); err != nil {
			return res, fmt.Errorf("creating schema_migrations: %w", err)
		}
	}
	applied := map[int]bool{}
	err = ex.Select(ctx, "SELECT version FROM "+t.DB()+"schema_migrations FINAL", nil, func(row []byte) error {
		var r struct {
			Version int `json:"version"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			return err
		}
		applied[r.Version] = true
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("reading applied migrations: %w", err)
	}
	for _, m := range ms {
		res.Current = m.Version
		if applied[m.Version] {
			continue
		}
		text, err := t.render(m.Name, m.SQL)
		if err != nil {
			return res, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		for _, stmt := range Split(text) {
			for _, s := range t.withDistributed(stmt) {
				if err := ex.Exec(ctx, s, nil); err != nil {
					return res, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
				}
			}
		}
		err = ex.Exec(ctx, "INSERT INTO "+t.DB()+"schema_migrations (version, name) VALUES ({v:UInt32}, {n:String})",
			store.Params{"v": strconv.Itoa(m.Version), "n": m.Name})
		if err != nil {
			return res, fmt.Errorf("recording migration %04d_%s: %w", m.Version, m.Name, err)
		}
		res.Applied = append(res.Applied, m)
	}
	return res, nil
}

// Render returns the statements of every migration as they would run with
// cfg, for `auditlens migrate --print` and for tests.
func Render(cfg Config) ([]string, error) {
	ms, err := All()
	if err != nil {
		return nil, err
	}
	t := newTemplater(cfg)
	var out []string
	for _, m := range ms {
		text, err := t.render(m.Name, m.SQL)
		if err != nil {
			return nil, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		for _, stmt := range Split(text) {
			out = append(out, t.withDistributed(stmt)...)
		}
	}
	return out, nil
}

// Split cuts a file into statements at semicolons that end a line, and drops
// comment-only pieces.
func Split(text string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		onlyComments := true
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(l)
			if l != "" && !strings.HasPrefix(l, "--") {
				onlyComments = false
				break
			}
		}
		if !onlyComments {
			out = append(out, s)
		}
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimRight(line, " \t\r\n")
		if strings.HasSuffix(trimmed, ";") && !strings.HasPrefix(strings.TrimSpace(trimmed), "--") {
			cur.WriteString(strings.TrimSuffix(trimmed, ";"))
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

type templater struct{ cfg Config }

func newTemplater(cfg Config) *templater { return &templater{cfg: cfg} }

// DB is the database qualifier with a trailing dot, or empty.
func (t *templater) DB() string {
	if t.cfg.Database == "" {
		return ""
	}
	return quoteIdent(t.cfg.Database) + "."
}

// Local is the suffix of tables that hold data on a cluster.
func (t *templater) Local() string {
	if t.cfg.Cluster == "" {
		return ""
	}
	return "_local"
}

// OnCluster is the ON CLUSTER clause, or empty.
func (t *templater) OnCluster() string {
	if t.cfg.Cluster == "" {
		return ""
	}
	return "ON CLUSTER " + quoteIdent(t.cfg.Cluster)
}

// Engine renders a MergeTree-family engine, replicated on a cluster.
func (t *templater) Engine(name string, args ...string) string {
	a := strings.Join(args, ", ")
	if t.cfg.Cluster == "" {
		if a == "" {
			return name
		}
		return name + "(" + a + ")"
	}
	rep := "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
	if a != "" {
		rep += ", " + a
	}
	return "Replicated" + name + "(" + rep + ")"
}

// TTL renders the retention clause for a DateTime64 column.
func (t *templater) TTL(col string) string {
	if t.cfg.RetentionDays <= 0 {
		return ""
	}
	return fmt.Sprintf("TTL toDateTime(%s) + INTERVAL %d DAY", col, t.cfg.RetentionDays)
}

// TTLSettings adds the settings that make TTL drop whole parts.
func (t *templater) TTLSettings() string {
	if t.cfg.RetentionDays <= 0 {
		return ""
	}
	return ", ttl_only_drop_parts = 1"
}

func (t *templater) render(name, text string) (string, error) {
	tpl, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, t); err != nil {
		return "", err
	}
	return buf.String(), nil
}

var createLocal = regexp.MustCompile(`(?m)^CREATE TABLE IF NOT EXISTS (\S*?)(\w+)_local `)

// withDistributed returns stmt and, on a cluster, the Distributed table in
// front of each local table it creates.
func (t *templater) withDistributed(stmt string) []string {
	if t.cfg.Cluster == "" {
		return []string{stmt}
	}
	m := createLocal.FindStringSubmatch(stmt)
	if m == nil {
		return []string{stmt}
	}
	db := t.cfg.Database
	if db == "" {
		db = "currentDatabase()"
	} else {
		db = "'" + strings.ReplaceAll(db, "'", "\\'") + "'"
	}
	// Every version of one row must land on one shard so FINAL collapses it.
	shardKey := map[string]string{
		"audit_events":      "cityHash64(cluster, audit_id)",
		"findings":          "cityHash64(id)",
		"reports":           "cityHash64(id)",
		"schema_migrations": "version",
	}[m[2]]
	if shardKey == "" {
		shardKey = "rand()"
	}
	dist := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s%s %s AS %s%s_local ENGINE = Distributed(%s, %s, '%s_local', %s)",
		m[1], m[2], t.OnCluster(), m[1], m[2], quoteIdent(t.cfg.Cluster), db, m[2], shardKey)
	return []string{stmt, dist}
}

func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, "\\", "\\\\"), "`", "\\`") + "`"
}
