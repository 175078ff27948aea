package detect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/store"
)

// ErrNotFound is returned by Repository.Get for an unknown finding ID.
var ErrNotFound = errors.New("finding not found")

// Store is what the findings repository needs from the storage engine.
type Store interface {
	Querier
	Exec(ctx context.Context, sql string, params store.Params) error
}

// Repository keeps findings in the findings table (migration 0002). Each
// Upsert adds a version of a finding; readers take the newest version of
// each ID (argMax by updated_at, which also holds across the shards of a
// cluster where FINAL would not), so a finding is updated in place.
type Repository struct {
	st  Store
	now func() time.Time

	mu   sync.Mutex
	last time.Time // the last updated_at written, kept strictly increasing
}

// NewRepository returns a repository over st. now is the clock that
// stamps versions (time.Now when nil).
func NewRepository(st Store, now func() time.Time) *Repository {
	if now == nil {
		now = time.Now
	}
	return &Repository{st: st, now: now}
}

// stamp returns the updated_at of a new version: now, or a microsecond
// after the previous stamp so that versions never tie.
func (r *Repository) stamp() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now().UTC().Truncate(time.Microsecond)
	if !t.After(r.last) {
		t = r.last.Add(time.Microsecond)
	}
	r.last = t
	return t
}

// upsertSQL stores a batch of findings in one INSERT, so one part per
// evaluation rather than one per finding: each column's values come as an
// array parameter, zipped into rows.
const upsertSQL = `INSERT INTO findings (id, detector, cluster, severity, confidence, title, objects, first_seen, last_seen, updated_at, body)
SELECT r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11
FROM (SELECT arrayJoin(arrayZip({id:Array(String)}, {detector:Array(String)}, {cluster:Array(String)}, {severity:Array(String)},
    {confidence:Array(Float32)}, {title:Array(String)}, {objects:Array(Array(Tuple(String, String, String)))},
    {first_seen:Array(DateTime64(6, 'UTC'))}, {last_seen:Array(DateTime64(6, 'UTC'))}, {updated_at:Array(DateTime64(6, 'UTC'))},
    {body:Array(String)})) AS r)`

// Upsert stores a new version of each finding, all in one INSERT.
func (r *Repository) Upsert(ctx context.Context, fs []Finding) error {
	if len(fs) == 0 {
		return nil
	}
	n := len(fs)
	ids, detectors, clusters, severities, titles, bodies := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	confidences := make([]float64, n)
	objects := make([][]Object, n)
	firsts, lasts, stamps := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for i := range fs {
		f := fs[i]
		f.Normalize()
		body, err := json.Marshal(&f)
		if err != nil {
			return fmt.Errorf("encoding finding %s: %w", f.ID, err)
		}
		ids[i], detectors[i], clusters[i], severities[i], titles[i], bodies[i] =
			f.ID, f.Detector, f.Cluster, string(f.Severity), f.Title, string(body)
		confidences[i], objects[i] = f.Confidence, f.Objects
		firsts[i], lasts[i], stamps[i] = f.FirstSeen, f.LastSeen, r.stamp()
	}
	p := store.Params{
		"id":         arrayParam(ids),
		"detector":   arrayParam(detectors),
		"cluster":    arrayParam(clusters),
		"severity":   arrayParam(severities),
		"confidence": store.FloatArrayParam(confidences, 32),
		"title":      arrayParam(titles),
		"objects":    objectsParam(objects),
		"first_seen": store.TimeArrayParam(firsts),
		"last_seen":  store.TimeArrayParam(lasts),
		"updated_at": store.TimeArrayParam(stamps),
		"body":       arrayParam(bodies),
	}
	if err := r.st.Exec(ctx, upsertSQL, p); err != nil {
		return fmt.Errorf("storing %d findings (%s, …): %w", n, ids[0], err)
	}
	return nil
}

// objectsParam renders each finding's objects for an
// Array(Array(Tuple(String, String, String))) parameter: (resource,
// namespace, name) tuples, as the objects column holds them.
func objectsParam(objs [][]Object) string {
	parts := make([]string, len(objs))
	for i, os := range objs {
		tuples := make([][]string, len(os))
		for j, o := range os {
			tuples[j] = []string{o.Resource, o.Namespace, o.Name}
		}
		parts[i] = store.StringTupleArrayParam(tuples)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Get returns the newest version of one finding, or an error wrapping
// ErrNotFound.
func (r *Repository) Get(ctx context.Context, id string) (Finding, error) {
	m, err := r.GetMany(ctx, []string{id})
	if err != nil {
		return Finding{}, err
	}
	f, ok := m[id]
	if !ok {
		return Finding{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return f, nil
}

// GetMany returns the newest version of each of the findings that exist,
// by ID.
func (r *Repository) GetMany(ctx context.Context, ids []string) (map[string]Finding, error) {
	out := make(map[string]Finding, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	const q = `SELECT argMax(body, updated_at) AS body FROM findings WHERE id IN {ids:Array(String)} GROUP BY id`
	err := SelectRows(ctx, r.st, "findings", q, store.Params{"ids": arrayParam(ids)}, func(row bodyRow) error {
		f, err := row.finding()
		if err != nil {
			return err
		}
		out[f.ID] = f
		return nil
	})
	return out, err
}

type bodyRow struct {
	Body string `json:"body"`
}

func (b bodyRow) finding() (Finding, error) {
	var f Finding
	if err := json.Unmarshal([]byte(b.Body), &f); err != nil {
		return Finding{}, fmt.Errorf("decoding a stored finding: %w", err)
	}
	f.Normalize()
	return f, nil
}

// ListFilter selects findings. Zero fields place no constraint.
type ListFilter struct {
	// Since and Until select findings seen in [Since, Until): last_seen >=
	// Since and first_seen < Until.
	Since, Until time.Time
	Detectors    []string
	Clusters     []string
	// Objects keeps the findings whose objects include one of these
	// (resource, namespace and name all equal).
	Objects []Object
	// MinSeverity keeps findings at least this urgent.
	MinSeverity Severity
	// Limit is the most findings returned (default and maximum 10000).
	Limit int
}

// MaxList is the most findings List returns.
const MaxList = 10000

// List returns the newest version of the findings that match f, the most
// recently seen first.
func (r *Repository) List(ctx context.Context, f ListFilter) ([]Finding, error) {
	p := store.Params{}
	var inner, outer []string
	if len(f.Detectors) > 0 {
		p["detectors"] = arrayParam(f.Detectors)
		inner = append(inner, "detector IN {detectors:Array(String)}")
	}
	if len(f.Clusters) > 0 {
		p["clusters"] = arrayParam(f.Clusters)
		inner = append(inner, "cluster IN {clusters:Array(String)}")
	}
	// A merge only widens [first_seen, last_seen], so the newest version
	// matches the time filter whenever an older one does: filtering the
	// versions before argMax is safe, and cheaper.
	if !f.Since.IsZero() {
		p["since"] = timeParam(f.Since)
		inner = append(inner, "last_seen >= {since:DateTime64(6, 'UTC')}")
		outer = append(outer, "ls >= {since:DateTime64(6, 'UTC')}")
	}
	if !f.Until.IsZero() {
		p["until"] = timeParam(f.Until)
		inner = append(inner, "first_seen < {until:DateTime64(6, 'UTC')}")
		outer = append(outer, "fs < {until:DateTime64(6, 'UTC')}")
	}
	if f.MinSeverity != "" {
		var sev []string
		for _, s := range []Severity{Info, Warning, Critical} {
			if s.AtLeast(f.MinSeverity) {
				sev = append(sev, string(s))
			}
		}
		p["severities"] = arrayParam(sev)
		outer = append(outer, "sev IN {severities:Array(String)}")
	}
	objs := ""
	if len(f.Objects) > 0 {
		// On the newest version's objects: an update may change them.
		p["objects"] = objectsParam([][]Object{f.Objects})
		objs = ", argMax(objects, updated_at) AS objs"
		outer = append(outer, "hasAny(objs, {objects:Array(Array(Tuple(String, String, String)))}[1])")
	}
	limit := f.Limit
	if limit <= 0 || limit > MaxList {
		limit = MaxList
	}
	p["limit"] = strconv.Itoa(limit)
	q := "SELECT body FROM (\n  SELECT id, argMax(body, updated_at) AS body, argMax(first_seen, updated_at) AS fs,\n" +
		"         argMax(last_seen, updated_at) AS ls, argMax(severity, updated_at) AS sev" + objs + "\n  FROM findings" +
		where(inner, "\n  ") + "\n  GROUP BY id\n)" + where(outer, "\n") + "\nORDER BY ls DESC, id\nLIMIT {limit:UInt32}"
	var out []Finding
	err := SelectRows(ctx, r.st, "findings", q, p, func(row bodyRow) error {
		f, err := row.finding()
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

func where(conds []string, indent string) string {
	s := ""
	for i, c := range conds {
		if i == 0 {
			s += indent + "WHERE " + c
		} else {
			s += indent + "  AND " + c
		}
	}
	return s
}
