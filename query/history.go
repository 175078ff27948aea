package query

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/store"
)

// ObjectRef names one API object; Cluster "" means every cluster.
type ObjectRef struct {
	Cluster   string `json:"cluster"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// History is what happened to one object: the JSON of
// GET /api/v1/objects/history.
type History struct {
	Object ObjectRef `json:"object"`
	// Events are the requests that named the object, oldest first, one
	// per request.
	Events []ObjectEvent `json:"events"`
	// Watches are the watches of the object's resource (cluster-wide or in
	// its namespace) open at some time between its first and last event.
	Watches []Watch `json:"watches"`
	// Truncated says there were more requests than the limit: Events are
	// the latest ones.
	Truncated bool `json:"truncated"`
}

// ObjectEvent is one request on an object.
type ObjectEvent struct {
	Time      time.Time `json:"time"` // when the request was first recorded
	Cluster   string    `json:"cluster"`
	APIServer string    `json:"apiserver"` // which apiserver of the cluster served it; "" when not said
	AuditID   string    `json:"audit_id"`
	Stage     string    `json:"stage"` // the last stage recorded
	Verb      string    `json:"verb"`
	User      string    `json:"user"`
	UserAgent string    `json:"user_agent"`
	SourceIP  string    `json:"source_ip"`
	Code      int32     `json:"code"`
	// ResourceVersion is the object's resourceVersion the request shows:
	// the response's, else the one in objectRef, else the one asked for.
	ResourceVersion string `json:"resource_version"`
	Subresource     string `json:"subresource"`
	RequestURI      string `json:"request_uri"`
}

// Watch is one watch request over its life.
type Watch struct {
	Cluster         string     `json:"cluster"`
	APIServer       string     `json:"apiserver"`
	AuditID         string     `json:"audit_id"`
	User            string     `json:"user"`
	UserAgent       string     `json:"user_agent"`
	SourceIP        string     `json:"source_ip"`
	Namespace       string     `json:"namespace"`
	ResourceVersion string     `json:"resource_version"` // the one the watch asked for
	LabelSelector   string     `json:"label_selector"`
	FieldSelector   string     `json:"field_selector"`
	Start           time.Time  `json:"start"`
	End             *time.Time `json:"end"` // nil while the watch is open (or its end is not stored)
	Code            int32      `json:"code"`
}

// DefaultHistoryLimit is the number of requests ObjectHistory returns when
// its limit is 0; MaxHistoryLimit the most it returns.
const (
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10_000
	maxHistoryWatches   = 500
	// watchReach is how far before an object's first event a watch open
	// at that time may have started: apiservers end watches after
	// --min-request-timeout (30 minutes at most by default).
	watchReach = time.Hour
)

// ObjectHistory returns the requests that named obj in [since, until)
// (zero times leave the ends open), and the watches of its resource open
// meanwhile. limit bounds the requests (0: DefaultHistoryLimit).
func ObjectHistory(ctx context.Context, st Selecter, obj ObjectRef, since, until time.Time, limit int) (History, error) {
	h := History{Object: obj, Events: []ObjectEvent{}, Watches: []Watch{}}
	if obj.Resource == "" || obj.Name == "" {
		return h, fmt.Errorf("%w: an object needs a resource and a name (namespace empty for a cluster-scoped one)", ErrBadFilter)
	}
	switch {
	case limit == 0:
		limit = DefaultHistoryLimit
	case limit < 1 || limit > MaxHistoryLimit:
		return h, fmt.Errorf("%w: limit %d is not from 1 to %d", ErrBadFilter, limit, MaxHistoryLimit)
	}
	f := Filter{Since: since, Until: until, Resource: []string{obj.Resource}, Namespace: []string{obj.Namespace}, Name: []string{obj.Name}}
	if obj.Cluster != "" {
		f.Cluster = []string{obj.Cluster}
	}
	if err := f.Validate(); err != nil {
		return h, err
	}
	p := store.Params{}
	// The newest requests first, so that a busy object shows its latest
	// history; one row per request (its last stage, its first time).
	sql := `SELECT cluster AS c, any(apiserver) AS api, audit_id AS id, toUnixTimestamp64Micro(min(ts)) AS t,
	argMax(stage, multiIf(stage = 'RequestReceived', 0, stage = 'ResponseStarted', 1, stage = 'ResponseComplete', 2, 3)) AS st,
	any(verb) AS vb, any(user) AS us, any(user_agent) AS ua, any(source_ip) AS ip, max(code) AS cd,
	max(response_rv) AS rrv, max(object_rv) AS orv, max(req_rv) AS qrv, any(subresource) AS sub, any(request_uri) AS uri
FROM audit_events` + f.where(p) + `
GROUP BY c, id
ORDER BY t DESC, id DESC
LIMIT {limit:UInt32}`
	p["limit"] = strconv.Itoa(limit + 1)
	err := st.Select(ctx, sql, p, func(row []byte) error {
		var r struct {
			C, API, ID, St, Vb, Us, UA, IP, Rrv, Orv, Qrv, Sub, URI string
			T                                                       int64
			Cd                                                      int32
		}
		if err := json.Unmarshal(row, &r); err != nil {
			return fmt.Errorf("decoding a history row: %w", err)
		}
		t := time.UnixMicro(r.T).UTC()
		rv := cmp.Or(r.Rrv, r.Orv, r.Qrv)
		h.Events = append(h.Events, ObjectEvent{Time: t, Cluster: r.C, APIServer: r.API, AuditID: r.ID, Stage: r.St, Verb: r.Vb,
			User: r.Us, UserAgent: r.UA, SourceIP: r.IP, Code: r.Cd, ResourceVersion: rv, Subresource: r.Sub, RequestURI: r.URI})
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("reading the history of %s %s/%s: %w", obj.Resource, obj.Namespace, obj.Name, err)
	}
	if len(h.Events) > limit {
		h.Events, h.Truncated = h.Events[:limit], true
	}
	slices.Reverse(h.Events)
	if len(h.Events) == 0 {
		return h, nil
	}

	first, last := h.Events[0].Time, h.Events[len(h.Events)-1].Time
	clusters := []string{}
	for _, e := range h.Events {
		if !slices.Contains(clusters, e.Cluster) {
			clusters = append(clusters, e.Cluster)
		}
	}
	wp := store.Params{
		"clusters":  store.StringArrayParam(clusters),
		"resource":  store.StringParam(obj.Resource),
		"namespace": store.StringParam(obj.Namespace),
		"from":      store.TimeParam(first),
		"to":        store.TimeParam(last),
		"reach_ms":  strconv.FormatInt(watchReach.Milliseconds(), 10),
		"limit":     strconv.Itoa(maxHistoryWatches),
	}
	wsql := `SELECT cluster AS c, any(apiserver) AS api, audit_id AS id, any(user) AS us, any(user_agent) AS ua, any(source_ip) AS ip,
	any(namespace) AS ns, any(req_rv) AS rv, any(label_selector) AS ls, any(field_selector) AS fs,
	min(ts) AS start_ts, maxIf(ts, stage IN ('ResponseComplete', 'Panic')) AS end_ts,
	toUnixTimestamp64Micro(start_ts) AS s_us, toUnixTimestamp64Micro(end_ts) AS e_us,
	toBool(countIf(stage IN ('ResponseComplete', 'Panic')) > 0) AS ended, max(code) AS cd
FROM audit_events
WHERE cluster IN {clusters:Array(String)} AND resource = {resource:String} AND verb = 'watch'
  AND namespace IN ('', {namespace:String})
  AND ts >= {from:DateTime64(6, 'UTC')} - toIntervalMillisecond({reach_ms:Int64})
  AND ts < {to:DateTime64(6, 'UTC')} + toIntervalMillisecond({reach_ms:Int64})
GROUP BY c, id
HAVING start_ts <= {to:DateTime64(6, 'UTC')} AND (NOT ended OR end_ts >= {from:DateTime64(6, 'UTC')})
ORDER BY start_ts, id
LIMIT {limit:UInt32}`
	err = st.Select(ctx, wsql, wp, func(row []byte) error {
		var r struct {
			C, API, ID, Us, UA, IP, NS, RV, LS, FS string
			SUs                                    int64 `json:"s_us"`
			EUs                                    int64 `json:"e_us"`
			Ended                                  bool
			Cd                                     int32
		}
		if err := json.Unmarshal(row, &r); err != nil {
			return fmt.Errorf("decoding a watch row: %w", err)
		}
		w := Watch{Cluster: r.C, APIServer: r.API, AuditID: r.ID, User: r.Us, UserAgent: r.UA, SourceIP: r.IP, Namespace: r.NS,
			ResourceVersion: r.RV, LabelSelector: r.LS, FieldSelector: r.FS, Code: r.Cd}
		w.Start = time.UnixMicro(r.SUs).UTC()
		if r.Ended {
			end := time.UnixMicro(r.EUs).UTC()
			w.End = &end
		}
		h.Watches = append(h.Watches, w)
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("reading the watches of %s: %w", obj.Resource, err)
	}
	return h, nil
}
