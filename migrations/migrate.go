// Package migrations holds the ClickHouse schema as ordered, embedded SQL
// files and the migrator that applies them.
//
// Files are named NNNN_name.sql and applied in order. Every statement is
// idempotent (IF NOT EXISTS; an ALTER whose one clause is RENAME COLUMN IF
// EXISTS a TO b is skipped when the table has a column b), so a migrator
// interrupted half-way can simply run again. Applied versions are recorded in schema_migrations. The files
// are text/template documents so the same schema serves a single node and a
// cluster: on a cluster, tables become Replicated*MergeTree "_local" tables
// created ON CLUSTER, each fronted by a Distributed table of the plain name.
//
// # Cluster mode
//
// With Config.Cluster set (clickhouse://…?cluster=NAME) every statement
// runs ON CLUSTER, the tables that hold data are
// Replicated*MergeTree('/clickhouse/tables/{shard}/{database}/{table}',
// '{replica}') tables named with a _local suffix, and a Distributed table
// of the plain name sits in front of each. Readers and writers use only the
// plain names, so the same SQL serves both modes; writes go through the
// Distributed tables, which place each row on a shard by the sharding keys
// in shardKeys (the reasoning is there).
//
// golang-migrate and goose both open transactions to record versions, which
// ClickHouse (and chDB in particular) does not have; this migrator needs only
// Exec and typed reads (store.Scanner).
package migrations

import (
	"bytes"
	"context"
	"embed"
	"errors"
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
	store.Scanner
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
	if cfg.Cluster != "" && cfg.Database == "" {
		// Distributed tables name their local tables' database, and
		// currentDatabase() in a statement run ON CLUSTER is evaluated
		// by each host: name the database of this connection instead.
		db, err := currentDatabase(ctx, ex)
		if err != nil {
			return res, err
		}
		cfg.Database = db
	}
	t := newTemplater(cfg)
	versionTable, err := t.render("schema", `CREATE TABLE IF NOT EXISTS {{.DB}}schema_migrations{{.Local}} {{.OnCluster}}
(version UInt32, name String, applied_at DateTime64(6, 'UTC') DEFAULT now64(6))
ENGINE = {{.Engine "ReplacingMergeTree"}} ORDER BY version`)
	if err != nil {
		return res, err
	}
	stmts, err := t.withDistributed(versionTable)
	if err != nil {
		return res, err
	}
	for _, stmt := range stmts {
		if err := ex.Exec(ctx, stmt, nil); err != nil {
			return res, fmt.Errorf("creating schema_migrations: %w", err)
		}
	}
	applied := map[int]bool{}
	err = store.Each(ctx, ex, "SELECT version FROM "+t.DB()+"schema_migrations FINAL", nil, func(r struct {
		Version int `json:"version"`
	}) error {
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
			stmts, err := t.withDistributed(stmt)
			if err != nil {
				return res, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			for _, s := range stmts {
				done, err := t.renamed(ctx, ex, s)
				if err != nil {
					return res, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
				}
				if done {
					continue
				}
				if err := ex.Exec(ctx, s, nil); err != nil {
					return res, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
				}
			}
		}
		// On a cluster the version is written in the foreground, so that
		// the next process to start sees it on whichever node it asks.
		settings := ""
		if cfg.Cluster != "" {
			settings = " SETTINGS distributed_foreground_insert = 1"
		}
		err = ex.Exec(ctx, "INSERT INTO "+t.DB()+"schema_migrations (version, name)"+settings+" VALUES ({v:UInt32}, {n:String})",
			store.Params{"v": strconv.Itoa(m.Version), "n": m.Name})
		if err != nil {
			return res, fmt.Errorf("recording migration %04d_%s: %w", m.Version, m.Name, err)
		}
		res.Applied = append(res.Applied, m)
	}
	return res, nil
}

// renameColumn finds an ALTER that renames a column (its only clause).
var renameColumn = regexp.MustCompile(`(?m)^ALTER TABLE \S*?(\w+)\s[^;]*?\bRENAME COLUMN IF EXISTS (\w+) TO (\w+)\s*;?\s*$`)

// renamed reports whether stmt renames a column to a name the table
// already has, which makes a rename idempotent: IF EXISTS alone is not
// once the migration has put another column (an ALIAS) under the old
// name, which a second run would rename in turn.
func (t *templater) renamed(ctx context.Context, ex Execer, stmt string) (bool, error) {
	m := renameColumn.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	db, params := "currentDatabase()", store.Params{"t": m[1], "c": m[3]}
	if t.cfg.Database != "" {
		db, params["db"] = "{db:String}", t.cfg.Database
	}
	n := 0
	err := store.Each(ctx, ex, "SELECT count() AS n FROM system.columns WHERE database = "+db+" AND table = {t:String} AND name = {c:String}", params,
		func(r struct{ N int }) error {
			n = r.N
			return nil
		})
	if err != nil {
		return false, fmt.Errorf("looking for column %s of %s: %w", m[3], m[1], err)
	}
	return n > 0, nil
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
			stmts, err := t.withDistributed(stmt)
			if err != nil {
				return nil, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			out = append(out, stmts...)
		}
	}
	return out, nil
}

// currentDatabase returns the database the connection uses.
func currentDatabase(ctx context.Context, ex Execer) (string, error) {
	var db string
	err := store.Each(ctx, ex, "SELECT currentDatabase() AS db", nil, func(r struct {
		DB string `json:"db"`
	}) error {
		db = r.DB
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the connection's database: %w", err)
	}
	if db == "" {
		return "", errors.New("reading the connection's database: the server named none")
	}
	return db, nil
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

// PartSettings are the MergeTree settings of migration 0007 (its comment
// says why), which the CREATE TABLE of the tables it alters also carry: a
// table's cleanup schedule follows the settings the table was started
// with, so a store created and filled by one process (an import) would
// otherwise keep the default period until it is opened again.
func (t *templater) PartSettings() string {
	s := "fsync_after_insert = 1, fsync_part_directory = 1, min_compressed_bytes_to_fsync_after_merge = 1, old_parts_lifetime = 0"
	if t.cfg.Cluster == "" {
		s += ", cleanup_delay_period = 1, max_cleanup_delay_period = 1, cleanup_delay_period_random_add = 0"
	}
	return s
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

// shardKeys are the sharding keys of the Distributed tables: which shard a
// row written through the Distributed table goes to.
//
// Correctness asks one thing of a key. Every read that needs exact rows
// uses FINAL, and on a Distributed table each shard applies FINAL to its
// own rows only, so every copy of a row (same sort key) must land on the
// same shard: the key must be a deterministic function of sort-key
// columns (TestShardKeysUseSortKeyColumns checks it).
//
// audit_events: cityHash64(cluster, audit_id). Every stage and every
// duplicate of one request lands on one shard, chosen by a random UUID, so
// shards fill evenly whoever floods the apiserver. The alternative was
// locality: one object's events (cluster, namespace, name) or one
// client's watches (user, user_agent, source_ip, resource) on one shard.
// We chose against it:
//
//   - No query needs it. Over a Distributed table, shards return partial
//     aggregates and the initiator finishes GROUP BY, HAVING, window
//     functions and ORDER BY, so grouping a client's watches or an
//     object's writes is correct wherever the rows are. The detectors'
//     one IN subquery (the watch-loop's Service writes) is GLOBAL: the
//     initiator runs it once and sends the (small) result to the shards.
//     There are no JOINs. Locality would pay off only for large local
//     JOINs or IN subqueries (distributed_product_mode = 'local').
//   - It makes hot shards, at the worst time. Lists and watches, the bulk
//     of an audit stream, name no object, so an object key puts every
//     collection request of a namespace (of the whole cluster, for
//     cluster-wide watches) on one shard. A client key puts the
//     kube-controller-manager's and the scheduler's traffic on one shard
//     each, and an incident auditlens exists to record (a watch loop, a
//     controller hot-looping on one object, a client relisting) multiplies
//     one client's and one object's traffic on that shard while it is
//     being ingested.
//   - What per-request placement does buy: a request's stages, which the
//     detectors group by (cluster, audit_id), are complete on one shard,
//     so ClickHouse can finish those groups on the shards
//     (optimize_distributed_group_by_sharding_key), and a lookup by audit
//     ID (evidence, the event detail view) can be sent to one shard
//     (optimize_skip_unused_shards).
//
// findings and reports: cityHash64(id), their ReplacingMergeTree row
// identity, so every version of a finding or report is on one shard;
// detector_state likewise by its row identity (detector, cluster, key).
// schema_migrations: the version.
//
// audit_event_counts: cityHash64(cluster, slot). Its rows are written on
// each shard by the materialized view over that shard's events, and only
// the migration's backfill goes through the Distributed table; readers
// sum the counts of every shard with GROUP BY and never use FINAL, so any
// placement is correct. The key only spreads the backfill.
//
// Placement holds only for rows written through the Distributed tables;
// never insert into the _local tables directly.
var shardKeys = map[string]string{
	"audit_events":       "cityHash64(cluster, audit_id)",
	"findings":           "cityHash64(id)",
	"reports":            "cityHash64(id)",
	"detector_state":     "cityHash64(detector, cluster, key)",
	"schema_migrations":  "version",
	"audit_event_counts": "cityHash64(cluster, slot)",
}

// alterLocal finds an ALTER of a local table; columnClause, whether it
// changes columns.
var (
	alterLocal   = regexp.MustCompile(`(?m)^ALTER TABLE (\S*?)(\w+)_local(\s)`)
	columnClause = regexp.MustCompile(`\b(ADD|DROP|MODIFY|RENAME|COMMENT) COLUMN\b`)
)

// withDistributed returns stmt and, on a cluster, the Distributed table in
// front of each local table it creates, or the same column change on the
// Distributed table in front of a local table it alters: a Distributed
// table has its own column list, copied from the local table when it was
// created, and a column it does not list can be neither written nor read
// through it. Other alterations (indexes, TTL, settings) concern only the
// local table.
func (t *templater) withDistributed(stmt string) ([]string, error) {
	if t.cfg.Cluster == "" {
		return []string{stmt}, nil
	}
	if a := alterLocal.FindStringSubmatchIndex(stmt); a != nil {
		if !columnClause.MatchString(stmt) {
			return []string{stmt}, nil
		}
		table := stmt[a[4]:a[5]]
		if _, ok := shardKeys[table]; !ok {
			return nil, fmt.Errorf("table %s has no sharding key in shardKeys", table)
		}
		// From the ALTER line on: the comments before it were shown once.
		dist := "ALTER TABLE " + stmt[a[2]:a[3]] + table + stmt[a[6]:a[7]] + stmt[a[1]:]
		return []string{stmt, dist}, nil
	}
	m := createLocal.FindStringSubmatch(stmt)
	if m == nil {
		return []string{stmt}, nil
	}
	db := t.cfg.Database
	if db == "" {
		db = "currentDatabase()"
	} else {
		db = "'" + strings.ReplaceAll(strings.ReplaceAll(db, "\\", "\\\\"), "'", "\\'") + "'"
	}
	shardKey, ok := shardKeys[m[2]]
	if !ok {
		// A random key would break FINAL: see shardKeys.
		return nil, fmt.Errorf("table %s has no sharding key in shardKeys", m[2])
	}
	dist := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s%s %s AS %s%s_local ENGINE = Distributed(%s, %s, '%s_local', %s)",
		m[1], m[2], t.OnCluster(), m[1], m[2], quoteIdent(t.cfg.Cluster), db, m[2], shardKey)
	return []string{stmt, dist}, nil
}

func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, "\\", "\\\\"), "`", "\\`") + "`"
}
