package query

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/internal/reflector"
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
	// Watchers are the same watches (and those of the other watched
	// resources asked for) grouped by the program that made them, each with
	// its latest watch requests: every restart and the resourceVersion it
	// resumed from. The most active watchers first.
	Watchers []Watcher `json:"watchers"`
	// WatchersTruncated says there were more watchers than
	// MaxHistoryWatchers: Watchers are the most active ones.
	WatchersTruncated bool `json:"watchers_truncated"`
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
	Resource        string     `json:"resource"`
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

// Watcher is one program's watch of one resource across its restarts:
// the reflector the watch-loop detector follows. Its identity is the
// user, the user agent's product (Program), the resource, the namespace
// and the selectors, so reconnects through a load balancer and a new
// leader of kube-controller-manager stay one watcher; the loopback
// informers of several kube-apiservers (user system:apiserver) are one
// watcher per apiserver (Instance).
type Watcher struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
	// UserAgent is the one of its latest watch.
	UserAgent     string   `json:"user_agent"`
	Program       string   `json:"program"`
	Instance      string   `json:"instance,omitempty"`
	APIGroup      string   `json:"api_group"`
	Resource      string   `json:"resource"`
	Namespace     string   `json:"namespace"`
	LabelSelector string   `json:"label_selector"`
	FieldSelector string   `json:"field_selector"`
	SourceIPs     []string `json:"source_ips"` // up to 16, sorted
	// Watches counts its watch requests in the range, ResourceVersions the
	// distinct resourceVersions they asked for: many watches from one
	// resourceVersion is a reflector that never moves on.
	Watches          int       `json:"watches"`
	ResourceVersions int       `json:"resource_versions"`
	First            time.Time `json:"first"` // the start of its first watch in the range
	Last             time.Time `json:"last"`  // the start of its latest
	// Restarts are its latest watch requests (MaxWatcherRestarts at
	// most), oldest first: each start is a (re)start of the watch.
	Restarts []WatchRestart `json:"restarts"`
	// RestartsTruncated says Watches > len(Restarts): older ones are left out.
	RestartsTruncated bool `json:"restarts_truncated"`
}

// WatchRestart is one watch request of a watcher.
type WatchRestart struct {
	AuditID   string     `json:"audit_id"`
	APIServer string     `json:"apiserver"`
	SourceIP  string     `json:"source_ip"`
	Start     time.Time  `json:"start"`
	End       *time.Time `json:"end"` // nil while open (or its end is not stored)
	// ResourceVersion is the one it asked for (resourceVersion= in its
	// requestURI): where the reflector resumed.
	ResourceVersion string `json:"resource_version"`
	Code            int32  `json:"code"`
}

// HistoryOptions are ObjectHistoryWith's optional arguments.
type HistoryOptions struct {
	// Since and Until bound the requests ([Since, Until); zero leaves an
	// end open).
	Since, Until time.Time
	// Limit bounds the requests (0: DefaultHistoryLimit).
	Limit int
	// WatchResources are the resources whose watches to return (default:
	// the object's), e.g. endpoints and services for Endpoints whose
	// churn a watcher of Services explains. At most MaxWatchResources.
	WatchResources []string
}

// DefaultHistoryLimit is the number of requests ObjectHistory returns when
// its limit is 0; MaxHistoryLimit the most it returns.
const (
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10_000
	maxHistoryWatches   = 500
	// MaxHistoryWatchers bounds the watchers returned, MaxWatcherRestarts
	// the restarts returned per watcher (the latest), so that a busy
	// resource stays cheap.
	MaxHistoryWatchers = 50
	MaxWatcherRestarts = 100
	// MaxWatchResources bounds HistoryOptions.WatchResources.
	MaxWatchResources = 8
	// watchReach is how far before an object's first event a watch open
	// at that time may have started: apiservers end watches after
	// --min-request-timeout (30 minutes at most by default).
	watchReach = time.Hour
)

// ObjectHistory returns the requests that named obj in [since, until)
// (zero times leave the ends open), and the watches of its resource open
// meanwhile. limit bounds the requests (0: DefaultHistoryLimit).
func ObjectHistory(ctx context.Context, st Selecter, obj ObjectRef, since, until time.Time, limit int) (History, error) {
	return ObjectHistoryWith(ctx, st, obj, HistoryOptions{Since: since, Until: until, Limit: limit})
}

// ObjectHistoryWith is ObjectHistory with the watches of other resources
// too (opt.WatchResources).
func ObjectHistoryWith(ctx context.Context, st Selecter, obj ObjectRef, opt HistoryOptions) (History, error) {
	since, until, limit := opt.Since, opt.Until, opt.Limit
	h := History{Object: obj, Events: []ObjectEvent{}, Watches: []Watch{}, Watchers: []Watcher{}}
	if obj.Resource == "" || obj.Name == "" {
		return h, fmt.Errorf("%w: an object needs a resource and a name (namespace empty for a cluster-scoped one)", ErrBadFilter)
	}
	resources := []string{}
	for _, r := range append([]string{obj.Resource}, opt.WatchResources...) {
		if r != "" && !slices.Contains(resources, r) {
			resources = append(resources, r)
		}
	}
	if len(resources) > MaxWatchResources {
		return h, fmt.Errorf("%w: watches of %d resources asked for, at most %d", ErrBadFilter, len(resources), MaxWatchResources)
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
	err := store.Each(ctx, st, sql, p, func(r struct {
		C, API, ID, St, Vb, Us, UA, IP, Rrv, Orv, Qrv, Sub, URI string
		T                                                       int64
		Cd                                                      int32
	}) error {
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
		"resources": store.StringArrayParam(resources),
		"namespace": store.StringParam(obj.Namespace),
		"from":      store.TimeParam(first),
		"to":        store.TimeParam(last),
		"reach_ms":  strconv.FormatInt(watchReach.Milliseconds(), 10),
		"limit":     strconv.Itoa(maxHistoryWatches),
	}
	wsql := `SELECT cluster AS c, any(apiserver) AS api, audit_id AS id, any(resource) AS res, any(user) AS us, any(user_agent) AS ua, any(source_ip) AS ip,
	any(namespace) AS ns, any(req_rv) AS rv, any(label_selector) AS ls, any(field_selector) AS fs,
	` + watchSpanCols + `, max(code) AS cd
FROM audit_events` + watchesWhere + `
GROUP BY c, id
HAVING` + watchesHaving + `
ORDER BY start_ts, id
LIMIT {limit:UInt32}`
	err = store.Each(ctx, st, wsql, wp, func(r struct {
		C, API, ID, Res, Us, UA, IP, NS, RV, LS, FS string
		Start                                       time.Time `ch:"start_ts"`
		End                                         time.Time `ch:"end_ts"`
		Ended                                       bool
		Cd                                          int32
	}) error {
		w := Watch{Cluster: r.C, APIServer: r.API, AuditID: r.ID, Resource: r.Res, User: r.Us, UserAgent: r.UA, SourceIP: r.IP, Namespace: r.NS,
			ResourceVersion: r.RV, LabelSelector: r.LS, FieldSelector: r.FS, Code: r.Cd, Start: r.Start}
		if r.Ended {
			w.End = &r.End
		}
		h.Watches = append(h.Watches, w)
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("reading the watches of %s: %w", strings.Join(resources, ", "), err)
	}
	if err := watchers(ctx, st, wp, &h); err != nil {
		return h, fmt.Errorf("reading the watchers of %s: %w", strings.Join(resources, ", "), err)
	}
	return h, nil
}

// The watches of the resources watched: cluster-wide or in the object's
// namespace, started up to watchReach around the object's events.
const watchesWhere = `
WHERE cluster IN {clusters:Array(String)} AND resource IN {resources:Array(String)} AND verb = 'watch'
  AND namespace IN ('', {namespace:String})
  AND ts >= {from:DateTime64(6, 'UTC')} - toIntervalMillisecond({reach_ms:Int64})
  AND ts < {to:DateTime64(6, 'UTC')} + toIntervalMillisecond({reach_ms:Int64})`

// watchSpanCols are a watch's start and end, grouped by audit ID.
const watchSpanCols = `min(ts) AS start_ts, maxIf(ts, stage IN ('ResponseComplete', 'Panic')) AS end_ts,
	toBool(countIf(stage IN ('ResponseComplete', 'Panic')) > 0) AS ended`

// Kept: the watches open at some time between the first and last event.
const watchesHaving = ` start_ts <= {to:DateTime64(6, 'UTC')} AND (NOT ended OR end_ts >= {from:DateTime64(6, 'UTC')})`

// watchersSQL groups the watches of watchesWhere/watchesHaving by watcher
// and keeps the latest {per} of each (groupArraySorted of the negated
// start: bounded memory however many watches a watcher made), the
// {watchers} most active watchers.
const watchersSQL = `SELECT * EXCEPT (recent) FROM (
SELECT c, toString(ident) AS ident, any(w_user) AS us, argMax(w_ua, s_us) AS ua, any(w_program) AS prog,
	any(w_instance) AS inst, any(w_group) AS grp, any(w_res) AS res, any(w_ns) AS ns, any(w_ls) AS ls, any(w_fs) AS fs,
	arraySort(groupUniqArray(16)(w_ip)) AS ips, count() AS n, uniqExact(w_rv) AS rvs, min(s_us) AS first_us, max(s_us) AS last_us,
	groupArraySorted({per:UInt32})((-s_us, id, w_rv, e_us, ended, cd, api, w_ip)) AS recent,
	arrayMap(x -> -x.1, recent) AS r_start, arrayMap(x -> x.2, recent) AS r_id, arrayMap(x -> x.3, recent) AS r_rv,
	arrayMap(x -> x.4, recent) AS r_end, arrayMap(x -> x.5, recent) AS r_ended, arrayMap(x -> x.6, recent) AS r_code,
	arrayMap(x -> x.7, recent) AS r_api, arrayMap(x -> x.8, recent) AS r_ip
FROM (
	SELECT cluster AS c, audit_id AS id, any(apiserver) AS api, any(user) AS w_user, any(toString(user_agent)) AS w_ua,
		any(toString(source_ip)) AS w_ip, any(api_group) AS w_group, any(resource) AS w_res, any(namespace) AS w_ns,
		any(req_rv) AS w_rv, any(label_selector) AS w_ls, any(field_selector) AS w_fs,
		any(` + reflector.ProgramSQL + `) AS w_program, any(` + reflector.InstanceSQL + `) AS w_instance,
		any(` + reflector.IdentSQL + `) AS ident,
		` + watchSpanCols + `, toUnixTimestamp64Micro(start_ts) AS s_us, toUnixTimestamp64Micro(end_ts) AS e_us, max(code) AS cd
	FROM audit_events` + watchesWhere + `
	GROUP BY c, id
	HAVING` + watchesHaving + `
)
GROUP BY c, ident
ORDER BY n DESC, first_us, ident
LIMIT {watchers:UInt32}
)
ORDER BY n DESC, first_us, ident`

// watchers fills h.Watchers from the parameters of the watches query.
func watchers(ctx context.Context, st Selecter, wp store.Params, h *History) error {
	p := store.Params{}
	maps.Copy(p, wp)
	p["per"] = strconv.Itoa(MaxWatcherRestarts)
	p["watchers"] = strconv.Itoa(MaxHistoryWatchers + 1)
	err := store.Each(ctx, st, watchersSQL, p, func(r struct {
		C, Ident, Us, UA, Prog, Inst, Grp, Res, NS, LS, FS string
		IPs                                                []string
		N, RVs                                             int
		FirstUs                                            int64    `json:"first_us"`
		LastUs                                             int64    `json:"last_us"`
		RStart                                             []int64  `json:"r_start"`
		RID                                                []string `json:"r_id"`
		RRV                                                []string `json:"r_rv"`
		REnd                                               []int64  `json:"r_end"`
		REnded                                             []bool   `json:"r_ended"`
		RCode                                              []int32  `json:"r_code"`
		RAPI                                               []string `json:"r_api"`
		RIP                                                []string `json:"r_ip"`
	}) error {
		k := len(r.RStart)
		if len(r.RID) != k || len(r.RRV) != k || len(r.REnd) != k || len(r.REnded) != k || len(r.RCode) != k || len(r.RAPI) != k || len(r.RIP) != k {
			return fmt.Errorf("a watcher row with %d starts and other lengths", k)
		}
		w := Watcher{Cluster: r.C, User: r.Us, UserAgent: r.UA, Program: r.Prog, Instance: r.Inst, APIGroup: r.Grp, Resource: r.Res,
			Namespace: r.NS, LabelSelector: r.LS, FieldSelector: r.FS, SourceIPs: r.IPs, Watches: r.N, ResourceVersions: r.RVs,
			First: time.UnixMicro(r.FirstUs).UTC(), Last: time.UnixMicro(r.LastUs).UTC(), Restarts: make([]WatchRestart, 0, k),
			RestartsTruncated: r.N > k}
		if w.SourceIPs == nil {
			w.SourceIPs = []string{}
		}
		// Newest first from the engine: oldest first here.
		for i := k - 1; i >= 0; i-- {
			rs := WatchRestart{AuditID: r.RID[i], APIServer: r.RAPI[i], SourceIP: r.RIP[i], Start: time.UnixMicro(r.RStart[i]).UTC(),
				ResourceVersion: r.RRV[i], Code: r.RCode[i]}
			if r.REnded[i] {
				end := time.UnixMicro(r.REnd[i]).UTC()
				rs.End = &end
			}
			w.Restarts = append(w.Restarts, rs)
		}
		h.Watchers = append(h.Watchers, w)
		return nil
	})
	if err != nil {
		return err
	}
	if len(h.Watchers) > MaxHistoryWatchers {
		h.Watchers, h.WatchersTruncated = h.Watchers[:MaxHistoryWatchers], true
	}
	return nil
}
