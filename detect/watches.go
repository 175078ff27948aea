package detect

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	refl "github.com/auditlens/auditlens/internal/reflector"
	"github.com/auditlens/auditlens/store"
)

// Queries and types shared by the watch detectors.

// client identifies one reflector: who (user, user agent, source address)
// watches what (resource, namespace, selectors). Several instances of one
// program, such as kube-proxy on every node, share a user and user agent
// but not an address.
type client struct {
	Cluster       string `json:"cluster"`
	User          string `json:"user"`
	UserAgent     string `json:"user_agent"`
	SourceIP      string `json:"source_ip"`
	APIGroup      string `json:"api_group"`
	Resource      string `json:"resource"`
	Namespace     string `json:"namespace"`
	LabelSelector string `json:"label_selector"`
	FieldSelector string `json:"field_selector"`
}

// watchStart is one watch request, counted once whatever stages of it the
// audit log holds.
type watchStart struct {
	AuditID string
	Stage   string // the earliest stage stored
	Time    time.Time
	URI     string
	Code    int32
}

func (w watchStart) evidence(c client, rv, role string) Evidence {
	return Evidence{
		AuditID: w.AuditID, Stage: w.Stage, Time: w.Time, Verb: "watch", Resource: c.Resource,
		Namespace: c.Namespace, User: c.User, RequestURI: w.URI, Code: w.Code,
		Role: role, ResourceVersion: rv,
	}
}

// reflector is one program's watch of one resource (internal/reflector
// says what identifies it): what stays the same
// across the program's watch restarts, its reconnects through a load
// balancer (whose source NAT changes the address) and its leader changes
// (a new kube-controller-manager instance is the same program). Program is
// the user agent's product ("kube-controller-manager"), or the user when
// there is no user agent. Instance tells apart reflectors that share all
// the rest: the loopback informers of several kube-apiservers
// (system:apiserver) are one reflector per apiserver. Ident is the
// engine's hash of all of it.
type reflector struct {
	Cluster       string `json:"cluster"`
	Ident         string `json:"ident"`
	User          string `json:"user"`
	Program       string `json:"program"`
	Instance      string `json:"instance,omitempty"`
	APIGroup      string `json:"api_group"`
	Resource      string `json:"resource"`
	Namespace     string `json:"namespace"`
	LabelSelector string `json:"label_selector"`
	FieldSelector string `json:"field_selector"`
}

// watchStartsSQL selects the watches in a window, one row per watch
// (audit ID): the request's stages are grouped, its start is the request
// received time (stageTimestamp of RequestReceived, or the
// requestReceivedTimestamp every stage carries, so a watch whose
// RequestReceived stage the policy omitted still counts once). Watches
// that failed (a 4xx or 5xx code) did not restart anything, and a
// watch-list (sendInitialEvents=true, which the apiserver accepts only
// with resourceVersionMatch=NotOlderThan) is a relist: both are left out. The
// outer query groups the watches by reflector and requested
// resourceVersion, and keeps the groups that can hold enough restarts, or
// that the detector remembers ({known}: "ident/rv").
//
// Aliases differ from column names: ClickHouse resolves aliases in WHERE.
// Grouping by audit ID collapses duplicate rows as FINAL would, so the
// query reads without it.
//
// Most groups (a reflector's watch from one resourceVersion) hold a
// single watch and are dropped by HAVING, so the watches are first
// narrowed to the groups that can pass it (watchGroupsSQL), which costs
// one cheap aggregation of the rows instead of grouping every watch by
// audit ID and keeping eight aggregate states for every group. The
// groups' watches are gathered as one array of tuples: the newest watch's
// user agent (the first by name of equal starts) and the first 16
// addresses by name come from it.
//
// On the 10M-event bench store (166k Services watch rows, 125k groups, 5
// kept) the query took 1.6 s with the arrays of every group built, 0.6 s
// when only counting them. GLOBAL: on a cluster both reads are of the
// Distributed table, whose shards cannot run a subquery of it themselves;
// the groups are counted once over all shards and the set sent to each.
const watchStartsSQL = `SELECT cluster, toString(w_ident) AS ident, user, program, instance, api_group, resource, namespace,
       label_selector, field_selector, w_rv AS rv,
       arraySort(x -> (-x.2, x.7), w)[1].7 AS user_agent, arraySlice(arraySort(arrayDistinct(arrayMap(x -> x.6, w))), 1, 16) AS source_ips,
       arrayMap(x -> x.1, w) AS ids, arrayMap(x -> x.2, w) AS starts, arrayMap(x -> x.3, w) AS stages,
       arrayMap(x -> x.4, w) AS uris, arrayMap(x -> x.5, w) AS codes
FROM (
SELECT cluster, w_ident, w_rv, any(w_user) AS user, any(w_program) AS program, any(w_instance) AS instance,
       any(w_api_group) AS api_group, any(w_resource) AS resource, any(w_namespace) AS namespace,
       any(w_label_selector) AS label_selector, any(w_field_selector) AS field_selector,
       groupArray((audit_id, w_start, w_stage, w_uri, w_code, w_source_ip, w_user_agent)) AS w
FROM (
    SELECT cluster, audit_id, any(r_ident) AS w_ident,
           any(user) AS w_user, any(r_program) AS w_program, any(r_instance) AS w_instance,
           any(toString(user_agent)) AS w_user_agent, any(toString(source_ip)) AS w_source_ip,
           any(api_group) AS w_api_group, any(resource) AS w_resource, any(namespace) AS w_namespace,
           any(label_selector) AS w_label_selector, any(field_selector) AS w_field_selector, any(req_rv) AS w_rv,
           min(toUnixTimestamp64Micro(if(received_at > toDateTime64(0, 6, 'UTC'), least(received_at, ts), ts))) AS w_start,
           argMin(stage, ts) AS w_stage, any(request_uri) AS w_uri, max(code) AS w_code, any(req_rv_match) AS w_rv_match
    FROM (
        SELECT *, request_uri, received_at, ` + refl.ProgramSQL + ` AS r_program, ` + refl.InstanceSQL + ` AS r_instance,
               ` + refl.IdentSQL + ` AS r_ident
        FROM audit_events
        WHERE %WINDOW% AND verb = 'watch' AND resource IN {resources:Array(String)}
          AND req_rv != '' AND req_rv != '0'
          AND (cluster, r_ident, req_rv) GLOBAL IN (` + watchGroupsSQL + `)
    )
    GROUP BY cluster, audit_id
    HAVING (w_code = 0 OR (w_code >= 200 AND w_code < 300))
       AND w_rv_match != 'NotOlderThan'
)
GROUP BY cluster, w_ident, w_rv
HAVING (count() >= {min_watches:UInt32} AND max(w_start) - min(w_start) >= {min_span:Int64})
    OR concat(toString(w_ident), '/', w_rv) IN {known:Array(String)}
)`

type watchGroupRow struct {
	reflector
	RV        string   `json:"rv"`
	UserAgent string   `json:"user_agent"`
	SourceIPs []string `json:"source_ips"`
	IDs       []string `json:"ids"`
	Starts    []int64  `json:"starts"`
	Stages    []string `json:"stages"`
	URIs      []string `json:"uris"`
	Codes     []int32  `json:"codes"`
}

// watchGroupsSQL is a cheap superset of the groups watchStartsSQL keeps:
// it counts rows rather than watches (a watch has one row per stage
// stored), takes the span of every row's start, failed watches and
// watch-lists included, so a group the exact query keeps is never left
// out here.
const watchGroupsSQL = `SELECT cluster, ` + refl.IdentSQL + ` AS g_ident, req_rv
            FROM audit_events
            WHERE %WINDOW% AND verb = 'watch' AND resource IN {resources:Array(String)}
              AND req_rv != '' AND req_rv != '0'
            GROUP BY cluster, g_ident, req_rv
            HAVING (count() >= {min_watches:UInt32} AND max(` + requestTimeSQL + `) - min(` + requestTimeSQL + `) >= {min_span:Int64})
                OR concat(toString(g_ident), '/', req_rv) IN {known:Array(String)}`

// watchGroup is the watches of one reflector from one resourceVersion, by
// time.
type watchGroup struct {
	reflector
	RV        string
	UserAgent string   // the newest
	SourceIPs []string // where the watches came from (up to 16)
	Watches   []watchStart
}

func (g watchGroup) key() string { return stateKey(g.Cluster, g.Ident, g.RV) }

// client is the reflector as the evidence and the regression detector
// name it.
func (g watchGroup) client() client {
	c := client{Cluster: g.Cluster, User: g.User, UserAgent: g.UserAgent, APIGroup: g.APIGroup, Resource: g.Resource,
		Namespace: g.Namespace, LabelSelector: g.LabelSelector, FieldSelector: g.FieldSelector}
	if len(g.SourceIPs) == 1 {
		c.SourceIP = g.SourceIPs[0]
	}
	return c
}

// selectWatchGroups returns the groups of at least minWatches watches of
// resources from one resourceVersion ("" and "0", which mean "any", are
// left out) whose starts span at least minSpan — minWatches restarts at
// least spacing apart span (minWatches-1)*spacing, so groups that cannot
// hold them (a burst of retries) are left in the engine — and the groups
// named in known ("ident/rv") whatever their size.
func selectWatchGroups(ctx context.Context, q Querier, w Window, resources []string, minWatches int, spacing time.Duration, known []string) ([]watchGroup, error) {
	p := store.Params{"resources": arrayParam(resources), "min_watches": itoa(minWatches),
		"min_span": strconv.FormatInt(int64(max(minWatches-1, 0))*spacing.Microseconds(), 10),
		"known":    arrayParam(known)}
	sql := strings.ReplaceAll(watchStartsSQL, "%WINDOW%", windowParams(w, p))
	var out []watchGroup
	err := selectRows(ctx, q, "watch starts", sql, p, func(r watchGroupRow) error {
		g := watchGroup{reflector: r.reflector, RV: r.RV, UserAgent: r.UserAgent, SourceIPs: r.SourceIPs}
		for i := range r.IDs {
			g.Watches = append(g.Watches, watchStart{AuditID: r.IDs[i], Stage: at(r.Stages, i),
				Time: micros(at(r.Starts, i)), URI: at(r.URIs, i), Code: at(r.Codes, i)})
		}
		slices.SortFunc(g.Watches, func(a, b watchStart) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			return strings.Compare(a.AuditID, b.AuditID)
		})
		out = append(out, g)
		return nil
	})
	// Deterministic order, whatever order the engine grouped in.
	slices.SortFunc(out, func(a, b watchGroup) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.User, b.User), strings.Compare(a.Program, b.Program),
			strings.Compare(a.Resource, b.Resource), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Ident, b.Ident),
			strings.Compare(a.RV, b.RV))
	})
	return out, err
}

// bursts splits watch times (sorted) into restarts: a watch started less
// than spacing after the one before is a quick retry of it, not a new
// restart. It returns the burst index of each time.
func bursts(times []time.Time, spacing time.Duration) (ids []int, n int) {
	ids = make([]int, len(times))
	for i, t := range times {
		if i > 0 && t.Sub(times[i-1]) >= spacing {
			n++
		}
		ids[i] = n
	}
	if len(times) > 0 {
		n++
	}
	return ids, n
}

// eventRow is the key fields of one stored event.
type eventRow struct {
	Cluster string `json:"cluster"`
	AuditID string `json:"audit_id"`
	Stage   string `json:"stage"`
	TS      int64  `json:"t"`
	// Received is when the request was made (requestReceivedTimestamp).
	Received   int64  `json:"received"`
	Verb       string `json:"verb"`
	Resource   string `json:"resource"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	User       string `json:"user"`
	UserAgent  string `json:"user_agent"`
	SourceIP   string `json:"source_ip"`
	RequestURI string `json:"request_uri"`
	Code       int32  `json:"code"`
	ReqRV      string `json:"req_rv"`
	ResponseRV string `json:"response_rv"`
	ObjectRV   string `json:"object_rv"`
}

const eventColumns = `cluster, audit_id, stage, toUnixTimestamp64Micro(ts) AS t, toUnixTimestamp64Micro(received_at) AS received, verb, resource, namespace, name, user,
       user_agent, source_ip, request_uri, code, req_rv, response_rv, object_rv`

// evidence describes the event as evidence. Its time is when the request
// was made, as for watches (a watch's stages can be minutes apart).
func (e eventRow) evidence(role, rv string) Evidence {
	t := e.TS
	if e.Received > 0 && e.Received < t {
		t = e.Received
	}
	return Evidence{AuditID: e.AuditID, Stage: e.Stage, Time: micros(t), Verb: e.Verb, Resource: e.Resource,
		Namespace: e.Namespace, Name: e.Name, User: e.User, RequestURI: e.RequestURI, Code: e.Code,
		Role: role, ResourceVersion: rv}
}

// selectEvents returns the stored stages of the given audit IDs in one
// cluster and window, by audit ID.
func selectEvents(ctx context.Context, q Querier, w Window, cluster string, ids []string) (map[string][]eventRow, error) {
	out := map[string][]eventRow{}
	if len(ids) == 0 {
		return out, nil
	}
	p := store.Params{"cluster": stringParam(cluster), "ids": arrayParam(ids)}
	ww := w
	ww.Clusters = nil
	sql := "SELECT " + eventColumns + "\nFROM audit_events FINAL\nWHERE " + windowParams(ww, p) +
		" AND cluster = {cluster:String} AND audit_id IN {ids:Array(String)}\nORDER BY ts, stage"
	err := selectRows(ctx, q, "evidence events", sql, p, func(r eventRow) error {
		out[r.AuditID] = append(out[r.AuditID], r)
		return nil
	})
	return out, err
}

// firstStage returns the earliest stored stage of a request, when it was
// made, with the response code of whichever stage has one.
func firstStage(rows []eventRow) (eventRow, bool) {
	if len(rows) == 0 {
		return eventRow{}, false
	}
	r := rows[0]
	for _, o := range rows[1:] {
		r.Code = max(r.Code, o.Code)
	}
	return r, true
}

func at[T any](s []T, i int) T {
	var zero T
	if i < len(s) {
		return s[i]
	}
	return zero
}

func itoa(n int) string { return strconv.Itoa(max(n, 0)) }
