package detect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/auditlens/auditlens/store"
)

// StateRecord is one thing a stateful detector remembers between
// evaluations: a JSON body under (detector, cluster, key). LastSeen is
// when what it describes was last seen; records not seen for a long time
// are not loaded again (see StateStore.LoadState).
type StateRecord struct {
	Detector string
	Cluster  string
	Key      string
	LastSeen time.Time
	Body     json.RawMessage
}

// StateStore keeps stateful detectors' records; *Repository is one, over
// the detector_state table.
type StateStore interface {
	// LoadState returns the newest version of the detector's records in
	// the clusters (all when empty) last seen at or after since.
	LoadState(ctx context.Context, detector string, clusters []string, since time.Time) ([]StateRecord, error)
	// SaveState stores a new version of each record.
	SaveState(ctx context.Context, recs []StateRecord) error
}

// Stateful is implemented by detectors that remember what earlier
// evaluations saw, so that an incident running for days stays one finding
// whose counts and last_seen keep growing, whatever window shows it. The
// Runner calls EvaluateState instead of Evaluate when it has a StateStore;
// Evaluate alone sees only its window.
type Stateful interface {
	EvaluateState(ctx context.Context, q Querier, st StateStore, w Window) ([]Finding, error)
}

// saveStateSQL stores a batch of records in one INSERT, as upsertSQL
// stores findings.
const saveStateSQL = `INSERT INTO detector_state (detector, cluster, key, last_seen, updated_at, body)
SELECT r.1, r.2, r.3, r.4, r.5, r.6
FROM (SELECT arrayJoin(arrayZip({detector:Array(String)}, {cluster:Array(String)}, {key:Array(String)},
    {last_seen:Array(DateTime64(6, 'UTC'))}, {updated_at:Array(DateTime64(6, 'UTC'))}, {body:Array(String)})) AS r)`

// SaveState implements StateStore: each record is a new version, stamped
// like findings so that versions never tie, all in one INSERT.
func (r *Repository) SaveState(ctx context.Context, recs []StateRecord) error {
	if len(recs) == 0 {
		return nil
	}
	n := len(recs)
	detectors, clusters, keys, bodies := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seen, stamps := make([]time.Time, n), make([]time.Time, n)
	for i, rec := range recs {
		detectors[i], clusters[i], keys[i], bodies[i] = rec.Detector, rec.Cluster, rec.Key, string(rec.Body)
		seen[i], stamps[i] = rec.LastSeen, r.stamp()
	}
	p := store.Params{
		"detector":   arrayParam(detectors),
		"cluster":    arrayParam(clusters),
		"key":        arrayParam(keys),
		"last_seen":  store.TimeArrayParam(seen),
		"updated_at": store.TimeArrayParam(stamps),
		"body":       arrayParam(bodies),
	}
	if err := r.st.Exec(ctx, saveStateSQL, p); err != nil {
		return fmt.Errorf("storing %d %s state records (%s/%s, …): %w", n, recs[0].Detector, recs[0].Cluster, recs[0].Key, err)
	}
	return nil
}

// LoadState implements StateStore. A newer version only moves last_seen
// forward, so filtering versions by last_seen before argMax is safe.
// Aliases differ from column names: ClickHouse resolves aliases in WHERE.
func (r *Repository) LoadState(ctx context.Context, detector string, clusters []string, since time.Time) ([]StateRecord, error) {
	p := store.Params{"detector": stringParam(detector), "since": timeParam(since)}
	cond := "detector = {detector:String} AND last_seen >= {since:DateTime64(6, 'UTC')}"
	if len(clusters) > 0 {
		p["clusters"] = arrayParam(clusters)
		cond += " AND cluster IN {clusters:Array(String)}"
	}
	sql := `SELECT cluster, key, toUnixTimestamp64Micro(argMax(last_seen, updated_at)) AS seen_us, argMax(body, updated_at) AS body_json
FROM detector_state WHERE ` + cond + `
GROUP BY cluster, key ORDER BY cluster, key`
	var out []StateRecord
	err := SelectRows(ctx, r.st, detector+" state", sql, p, func(row struct {
		Cluster  string `json:"cluster"`
		Key      string `json:"key"`
		LastSeen int64  `json:"seen_us"`
		Body     string `json:"body_json"`
	}) error {
		out = append(out, StateRecord{Detector: detector, Cluster: row.Cluster, Key: row.Key,
			LastSeen: Micros(row.LastSeen), Body: json.RawMessage(row.Body)})
		return nil
	})
	return out, err
}
