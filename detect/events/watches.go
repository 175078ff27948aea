package events

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/store"

	"github.com/auditlens/auditlens/internal/auditsql"
	refl "github.com/auditlens/auditlens/internal/reflector"
)

// Client identifies one reflector: who (user, user agent, source address)
// watches what (resource, namespace, selectors). Several instances of one
// program, such as kube-proxy on every node, share a user and user agent
// but not an address.
type Client struct {
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

// WatchStart is one watch request, counted once whatever stages of it the
// audit log holds.
type WatchStart struct {
	AuditID string
	Stage   string // the earliest stage stored
	Time    time.Time
	URI     string
	Code    int32
	RV      string // the resourceVersion it resumed from
	// Relist: a list, watch-list or watch from "" or "0", which starts
	// the reflector over; Agent is the user agent that made it (the
	// watch-loop detector's requests only).
	Relist bool
	Agent  string
}

func (w WatchStart) Evidence(c Client, rv, role string) detect.Evidence {
	return detect.Evidence{
		AuditID: w.AuditID, Stage: w.Stage, Time: w.Time, Verb: "watch", Resource: c.Resource,
		Namespace: c.Namespace, User: c.User, RequestURI: w.URI, Code: w.Code,
		Role: role, ResourceVersion: rv,
	}
}

// Reflector is one program's watch of one resource (internal/reflector
// says what identifies it): what stays the same
// across the program's watch restarts, its reconnects through a load
// balancer (whose source NAT changes the address) and its leader changes
// (a new kube-controller-manager instance is the same program). Program is
// the user agent's product ("kube-controller-manager"), or the user when
// there is no user agent. Instance tells apart reflectors that share all
// the rest: the loopback informers of several kube-apiservers
// (system:apiserver) are one reflector per apiserver. Ident is the
// engine's hash of all of it.
type Reflector struct {
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

// reflectorWatchesSQL selects the watches and relists of the reflectors
// that may be looping, one row per reflector (internal/reflector says
// what identifies one) with its requests in one array, one element per
// request (audit ID): the request's stages are grouped, its start is the
// request received time (stageTimestamp of RequestReceived, or the
// requestReceivedTimestamp every stage carries, so a watch whose
// RequestReceived stage the policy omitted still counts once). Requests
// that failed (a 4xx or 5xx code) restarted nothing and are left out.
// A relist is a list, a watch-list (sendInitialEvents=true, which the
// apiserver accepts only with resourceVersionMatch=NotOlderThan) or a
// watch from "" or "0" (the current state first): it starts the
// reflector over from a fresh resourceVersion.
//
// The reflectors are first narrowed to those that watchSuspectsSQL found
// ({suspects}: cluster and ident): the ones that can be looping and the
// ones the detector remembers. The newest watch's user
// agent (the first by name of equal starts) and the first 16 addresses by
// name come from the array.
//
// Aliases differ from column names: ClickHouse resolves aliases in WHERE.
// Grouping by audit ID collapses duplicate rows as FINAL would, so the
// query reads without it.
func reflectorWatchesSQL(window string) string {
	return `SELECT cluster, toString(w_ident) AS ident, user, program, instance, api_group, resource, namespace,
       label_selector, field_selector,
       arraySort(x -> (-x.2, x.7), w)[1].7 AS user_agent,
       arraySlice(arraySort(arrayDistinct(arrayMap(x -> x.6, w))), 1, 16) AS source_ips,
       arrayMap(x -> x.1, w) AS ids, arrayMap(x -> x.2, w) AS starts, arrayMap(x -> x.3, w) AS stages,
       arrayMap(x -> x.4, w) AS uris, arrayMap(x -> x.5, w) AS codes, arrayMap(x -> x.8, w) AS rvs,
       arrayMap(x -> x.9, w) AS relists, arrayMap(x -> x.7, w) AS agents
FROM (
SELECT cluster, w_ident, any(w_user) AS user, any(w_program) AS program, any(w_instance) AS instance,
       any(w_api_group) AS api_group, any(w_resource) AS resource, any(w_namespace) AS namespace,
       any(w_label_selector) AS label_selector, any(w_field_selector) AS field_selector,
       groupArray((audit_id, w_start, w_stage, w_uri, w_code, w_source_ip, w_user_agent, w_rv, w_relist)) AS w
FROM (
    SELECT cluster, audit_id, any(r_ident) AS w_ident,
           any(user) AS w_user, any(r_program) AS w_program, any(r_instance) AS w_instance,
           any(toString(user_agent)) AS w_user_agent, any(toString(source_ip)) AS w_source_ip,
           any(api_group) AS w_api_group, any(resource) AS w_resource, any(namespace) AS w_namespace,
           any(label_selector) AS w_label_selector, any(field_selector) AS w_field_selector, any(req_rv) AS w_rv,
           min(` + auditsql.RequestTime + `) AS w_start,
           argMin(stage, ts) AS w_stage, any(request_uri) AS w_uri, max(code) AS w_code, toUInt8(max(r_relist)) AS w_relist
    FROM (
        SELECT *, request_uri, received_at, ` + refl.ProgramSQL + ` AS r_program, ` + refl.InstanceSQL + ` AS r_instance,
               ` + refl.IdentSQL + ` AS r_ident, (` + refl.ListSQL + ` OR req_rv IN ('', '0')) AS r_relist
        FROM audit_events
        WHERE ` + window + ` AND verb IN ('watch', 'list') AND resource IN {resources:Array(String)}
          AND (cluster, toString(r_ident)) IN {suspects:Array(Tuple(String, String))}
    )
    GROUP BY cluster, audit_id
    HAVING w_code = 0 OR (w_code >= 200 AND w_code < 300)
)
GROUP BY cluster, w_ident
)`
}

type reflectorWatchesRow struct {
	Reflector
	UserAgent string   `json:"user_agent"`
	SourceIPs []string `json:"source_ips"`
	IDs       []string `json:"ids"`
	Starts    []int64  `json:"starts"`
	Stages    []string `json:"stages"`
	URIs      []string `json:"uris"`
	Codes     []int32  `json:"codes"`
	RVs       []string `json:"rvs"`
	Relists   []uint8  `json:"relists"`
	Agents    []string `json:"agents"`
}

// watchSuspectsSQL finds, with one cheap aggregation of the watches (no
// grouping of every request by audit ID), the reflectors that may be
// looping and those remembered. It runs first: when it finds none, as in
// most windows, reflectorWatchesSQL, whose planning alone costs the
// engine tens of milliseconds, does not run. A looping reflector restarts
// its watch, at least {min_steps} times, from a resourceVersion no higher
// than that of its watch before, at least {min_span} microseconds
// (RetrySpacing) later — an advancing reflector resumes from ever higher
// ones, and a quick retry is not a restart. It reads the watches' stages
// as they are (they share the request's start and resourceVersion, so
// copies never count as a restart) and every watch, failed ones included,
// so it is a superset of what the detector weighs. resourceVersions that
// are not integers compare as 0. The remembered reflectors ({known}:
// their idents) are kept whatever their watches.
func watchSuspectsSQL(window string) string {
	return `SELECT cluster, toString(g_ident) AS ident FROM (
            SELECT cluster, ` + refl.IdentSQL + ` AS g_ident,
                   arraySort(groupArray((` + auditsql.RequestTime + `, toUInt64OrZero(req_rv)))) AS s
            FROM audit_events
            WHERE ` + window + ` AND verb = 'watch' AND resource IN {resources:Array(String)}
              AND req_rv != '' AND req_rv != '0' AND req_rv_match != 'NotOlderThan'
            GROUP BY cluster, g_ident
        )
        WHERE arrayCount((cur, prev) -> cur.2 <= prev.2 AND cur.1 - prev.1 >= {min_span:Int64}, arrayPopFront(s), arrayPopBack(s)) >= {min_steps:UInt32}
           OR toString(g_ident) IN {known:Array(String)}`
}

// WatchGroup is one reflector's watches and relists, by time.
type WatchGroup struct {
	Reflector
	UserAgent string   // the newest watch's
	SourceIPs []string // where the requests came from (up to 16)
	Watches   []WatchStart
}

func (g WatchGroup) Key() string { return StateKey(g.Cluster, g.Ident) }

// Client is the reflector as the evidence and the regression detector
// name it.
func (g WatchGroup) Client() Client {
	c := Client{Cluster: g.Cluster, User: g.User, UserAgent: g.UserAgent, APIGroup: g.APIGroup, Resource: g.Resource,
		Namespace: g.Namespace, LabelSelector: g.LabelSelector, FieldSelector: g.FieldSelector}
	if len(g.SourceIPs) == 1 {
		c.SourceIP = g.SourceIPs[0]
	}
	return c
}

// SelectWatchGroups returns the watches and relists of the reflectors of
// resources that restarted at least minSteps times from a
// resourceVersion no higher than the one before, at least spacing after
// it, and of the reflectors named in known (idents) whatever they did.
func SelectWatchGroups(ctx context.Context, q detect.Querier, w detect.Window, resources []string, minSteps int, spacing time.Duration, known []string) ([]WatchGroup, error) {
	p := store.Params{"resources": store.StringArrayParam(resources), "min_steps": Itoa(minSteps),
		"min_span": strconv.FormatInt(spacing.Microseconds(), 10), "known": store.StringArrayParam(known)}
	window := detect.WindowParams(w, p)
	var suspects [][]string
	err := detect.SelectRows(ctx, q, "reflectors that may loop", watchSuspectsSQL(window), p, func(r struct {
		Cluster string `json:"cluster"`
		Ident   string `json:"ident"`
	}) error {
		suspects = append(suspects, []string{r.Cluster, r.Ident})
		return nil
	})
	if err != nil || len(suspects) == 0 {
		return nil, err
	}
	p["suspects"] = store.StringTupleArrayParam(suspects)
	var out []WatchGroup
	err = detect.SelectRows(ctx, q, "watch starts", reflectorWatchesSQL(window), p, func(r reflectorWatchesRow) error {
		g := WatchGroup{Reflector: r.Reflector, UserAgent: r.UserAgent, SourceIPs: r.SourceIPs}
		for i := range r.IDs {
			g.Watches = append(g.Watches, WatchStart{AuditID: r.IDs[i], Stage: At(r.Stages, i),
				Time: detect.Micros(At(r.Starts, i)), URI: At(r.URIs, i), Code: At(r.Codes, i), RV: At(r.RVs, i), Relist: At(r.Relists, i) != 0,
				Agent: At(r.Agents, i)})
		}
		slices.SortFunc(g.Watches, func(a, b WatchStart) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			return strings.Compare(a.AuditID, b.AuditID)
		})
		out = append(out, g)
		return nil
	})
	// Deterministic order, whatever order the engine grouped in.
	slices.SortFunc(out, func(a, b WatchGroup) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.User, b.User), strings.Compare(a.Program, b.Program),
			strings.Compare(a.Resource, b.Resource), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Ident, b.Ident))
	})
	return out, err
}

// Bursts splits watch times (sorted) into restarts: a watch started less
// than spacing after the one before is a quick retry of it, not a new
// restart. It returns the burst index of each time.
func Bursts(times []time.Time, spacing time.Duration) (ids []int, n int) {
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

// Row is the key fields of one stored event.
type Row struct {
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

// Columns selects a Row.
const Columns = `cluster, audit_id, stage, toUnixTimestamp64Micro(ts) AS t, toUnixTimestamp64Micro(received_at) AS received, verb, resource, namespace, name, user,
       user_agent, source_ip, request_uri, code, req_rv, response_rv, object_rv`

// Requested is when the request was made: its requestReceivedTimestamp,
// or the stage's time when that is missing or later.
func (e Row) Requested() time.Time {
	t := e.TS
	if e.Received > 0 && e.Received < t {
		t = e.Received
	}
	return detect.Micros(t)
}

// Evidence describes the event as evidence. Its time is when the request
// was made, as for watches (a watch's stages can be minutes apart).
func (e Row) Evidence(role, rv string) detect.Evidence {
	return detect.Evidence{AuditID: e.AuditID, Stage: e.Stage, Time: e.Requested(), Verb: e.Verb, Resource: e.Resource,
		Namespace: e.Namespace, Name: e.Name, User: e.User, RequestURI: e.RequestURI, Code: e.Code,
		Role: role, ResourceVersion: rv}
}

// Select returns the stored stages of the given audit IDs in one
// cluster and window, by audit ID.
func Select(ctx context.Context, q detect.Querier, w detect.Window, cluster string, ids []string) (map[string][]Row, error) {
	out := map[string][]Row{}
	if len(ids) == 0 {
		return out, nil
	}
	p := store.Params{"cluster": store.StringParam(cluster), "ids": store.StringArrayParam(ids)}
	ww := w
	ww.Clusters = nil
	sql := "SELECT " + Columns + "\nFROM audit_events\nWHERE " + detect.WindowParams(ww, p) +
		" AND cluster = {cluster:String} AND audit_id IN {ids:Array(String)}\nORDER BY ts, stage\nLIMIT 1 BY audit_id, stage"
	err := detect.SelectRows(ctx, q, "evidence events", sql, p, func(r Row) error {
		out[r.AuditID] = append(out[r.AuditID], r)
		return nil
	})
	return out, err
}

// FirstStage returns the earliest stored stage of a request, when it was
// made, with the response code of whichever stage has one.
func FirstStage(rows []Row) (Row, bool) {
	if len(rows) == 0 {
		return Row{}, false
	}
	r := rows[0]
	for _, o := range rows[1:] {
		r.Code = max(r.Code, o.Code)
	}
	return r, true
}

// At is s[i], or the zero value when s is shorter (arrays of one row
// that the engine returned shorter).
func At[T any](s []T, i int) T {
	var zero T
	if i < len(s) {
		return s[i]
	}
	return zero
}

// Itoa formats a count for a query parameter (negative counts as 0).
func Itoa(n int) string { return strconv.Itoa(max(n, 0)) }

// StateKey is the key of a reflector's remembered history: its cluster
// and ident.
func StateKey(cluster, ident string) string { return cluster + "\x00" + ident }

// ProgramName is the program of a client (internal/reflector).
func ProgramName(userAgent, user string) string { return refl.Program(userAgent, user) }
