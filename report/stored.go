package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// ErrNotFound is returned when no stored report matches.
var ErrNotFound = errors.New("report not found")

const saveSQL = `INSERT INTO reports (id, name, window_start, window_end, clusters, created_at, body)
VALUES ({id:String}, {name:String}, {window_start:DateTime64(6, 'UTC')}, {window_end:DateTime64(6, 'UTC')},
        {clusters:Array(String)}, {created_at:DateTime64(6, 'UTC')}, {body:String})`

// Save stores r in the reports table. Saving a report of the same name and
// window end again replaces it (same ID; the newest created_at wins). A
// version's created_at is the latest of GeneratedAt and its deliveries, so
// a report saved again after delivery supersedes the one saved before.
func Save(ctx context.Context, st Store, r Report) error {
	created := r.GeneratedAt
	for _, d := range r.Deliveries {
		if d.At.After(created) {
			created = d.At
		}
	}
	if len(r.Deliveries) > 0 && !created.After(r.GeneratedAt) {
		created = r.GeneratedAt.Add(time.Microsecond)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding report %s: %w", r.ID, err)
	}
	p := store.Params{
		"id":           store.StringParam(r.ID),
		"name":         store.StringParam(r.Name),
		"window_start": store.TimeParam(r.WindowStart),
		"window_end":   store.TimeParam(r.WindowEnd),
		"clusters":     store.StringArrayParam(r.Clusters),
		"created_at":   store.TimeParam(created),
		"body":         store.StringParam(string(body)),
	}
	if err := st.Exec(ctx, saveSQL, p); err != nil {
		return fmt.Errorf("storing report %s: %w", r.ID, err)
	}
	return nil
}

// Previous returns the newest stored report named name whose window ends
// before end, or an error wrapping ErrNotFound.
func Previous(ctx context.Context, st Store, name string, end time.Time) (Report, error) {
	const q = `SELECT body FROM reports
WHERE name = {name:String} AND window_end < {end:DateTime64(6, 'UTC')}
ORDER BY window_end DESC, created_at DESC LIMIT 1`
	return one(ctx, st, q, store.Params{"name": store.StringParam(name), "end": store.TimeParam(end)}, "previous report "+strconv.Quote(name))
}

// Get returns the newest version of the stored report with this ID, or an
// error wrapping ErrNotFound.
func Get(ctx context.Context, st Store, id string) (Report, error) {
	const q = `SELECT body FROM reports WHERE id = {id:String} ORDER BY created_at DESC LIMIT 1`
	return one(ctx, st, q, store.Params{"id": store.StringParam(id)}, "report "+strconv.Quote(id))
}

func one(ctx context.Context, st Store, q string, p store.Params, what string) (Report, error) {
	var out *Report
	err := selectRows(ctx, st, what, q, p, func(row struct {
		Body string `json:"body"`
	}) error {
		var r Report
		if err := json.Unmarshal([]byte(row.Body), &r); err != nil {
			return fmt.Errorf("decoding stored %s: %w", what, err)
		}
		out = &r
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	if out == nil {
		return Report{}, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	return *out, nil
}

// Summary describes a stored report in listings.
type Summary struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	CreatedAt   time.Time `json:"created_at"`
	// Clusters are those the report covers (empty: every cluster).
	Clusters []string `json:"clusters"`
}

// ListFilter selects stored reports. Zero fields place no constraint.
type ListFilter struct {
	Name string
	// Within, when not nil, keeps the reports that cover named clusters
	// all among these (a report of every cluster is left out): what a
	// reader allowed only these clusters may see.
	Within []string
	// Limit is the most reports returned (default and maximum MaxList).
	Limit int
}

// MaxList is the most reports List returns.
const MaxList = 1000

// List returns stored reports, the latest window end first, each once
// (its newest version).
func List(ctx context.Context, st Store, f ListFilter) ([]Summary, error) {
	p := store.Params{}
	var conds []string
	if f.Name != "" {
		p["name"] = store.StringParam(f.Name)
		conds = append(conds, "name = {name:String}")
	}
	having := ""
	if f.Within != nil {
		p["within"] = store.StringArrayParam(f.Within)
		having = " HAVING notEmpty(cl) AND hasAll({within:Array(String)}, cl)"
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	limit := f.Limit
	if limit <= 0 || limit > MaxList {
		limit = MaxList
	}
	p["limit"] = strconv.Itoa(limit)
	q := `SELECT id, any(name) AS n, toUnixTimestamp64Micro(any(window_start)) AS ws,
       toUnixTimestamp64Micro(any(window_end)) AS we, toUnixTimestamp64Micro(max(created_at)) AS ca,
       argMax(clusters, created_at) AS cl
FROM reports` + where + `
GROUP BY id` + having + ` ORDER BY we DESC, n, id LIMIT {limit:UInt32}`
	out := []Summary{}
	err := selectRows(ctx, st, "reports", q, p, func(row struct {
		ID   string   `json:"id"`
		Name string   `json:"n"`
		WS   int64    `json:"ws"`
		WE   int64    `json:"we"`
		CA   int64    `json:"ca"`
		CL   []string `json:"cl"`
	}) error {
		cl := row.CL
		if cl == nil {
			cl = []string{}
		}
		out = append(out, Summary{ID: row.ID, Name: row.Name, WindowStart: time.UnixMicro(row.WS).UTC(),
			WindowEnd: time.UnixMicro(row.WE).UTC(), CreatedAt: time.UnixMicro(row.CA).UTC(), Clusters: cl})
		return nil
	})
	return out, err
}

// Repository reads and writes stored reports of one store: what the
// reports API and the scheduler use.
type Repository struct{ st Store }

// NewRepository returns a repository over st.
func NewRepository(st Store) *Repository { return &Repository{st: st} }

// List returns stored reports; see the package function List.
func (r *Repository) List(ctx context.Context, f ListFilter) ([]Summary, error) {
	return List(ctx, r.st, f)
}

// Get returns one stored report; see the package function Get.
func (r *Repository) Get(ctx context.Context, id string) (Report, error) { return Get(ctx, r.st, id) }

// Save stores a report; see the package function Save.
func (r *Repository) Save(ctx context.Context, rep Report) error { return Save(ctx, r.st, rep) }
