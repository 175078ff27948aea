package watchloop

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
	"github.com/auditlens/auditlens/store"

	"github.com/auditlens/auditlens/internal/auditsql"
	refl "github.com/auditlens/auditlens/internal/reflector"
)

// The symptom side of the watch loop: deletes (and the re-creates after
// them) of the churn resource that no write of their owner explains, and
// which restart each followed.

// churnDeletesSQL selects the successful deletes of the churn resource
// that may follow a candidate's restart, and that no create or delete of
// their owner (same namespace and name) explains: those stamped in the
// time buckets ({bucket_us}, a third of FollowWithin) from a restart to
// FollowWithin after it ({buckets}; the exact test is in Go) — keyed by
// the restarting program when the delete names its program
// ({program_buckets}: "program|bucket"; any program when a candidate's
// watches carry no user agent, {any_program}) — whose owner's latest
// write up to ownerSkew after the delete was made (an ASOF join) is more
// than ReactionWithin before it, or absent (o_t 0). An owner written
// without a recorded name is left to Go. One row per request: only
// ResponseComplete carries a code, and duplicates of a row are identical.
//
// The join is GLOBAL: on a cluster audit_events is a Distributed table,
// and GLOBAL runs the owner subquery once and ships its (small) result to
// the shards; on a single node it is a plain join.
func churnDeletesSQL(window, ownerWindow, ignored string) string {
	return `SELECT d.cluster AS cluster, d.audit_id AS audit_id, d.stage AS stage, d.t AS t, d.received AS received,
       d.verb AS verb, d.resource AS resource, d.namespace AS namespace, d.name AS name, d.user AS user,
       d.user_agent AS user_agent, d.source_ip AS source_ip, d.request_uri AS request_uri, d.code AS code,
       d.req_rv AS req_rv, d.response_rv AS response_rv, d.object_rv AS object_rv
FROM (
    SELECT ` + events.Columns + `, if(received > 0 AND received < t, received, t) AS req_t, req_t + {skew_us:Int64} AS req_t_skew
    FROM audit_events
    WHERE ` + window + ` AND resource = {churn:String} AND api_group = '' AND subresource = ''
      AND verb = 'delete' AND code >= 200 AND code < 300` + ignored + `
      AND (intDiv(toUnixTimestamp64Micro(ts), {bucket_us:Int64}) IN {buckets:Array(Int64)} AND (user_agent = '' OR {any_program:Bool})
           OR concat(` + refl.ProgramSQL + `, '|', toString(intDiv(toUnixTimestamp64Micro(ts), {bucket_us:Int64}))) IN {program_buckets:Array(String)})
    LIMIT 1 BY cluster, audit_id
) AS d
GLOBAL LEFT ASOF JOIN (` + namedOwnerWritesSQL(ownerWindow) + `) AS o
ON d.cluster = o.cluster AND d.namespace = o.namespace AND d.name = o.name AND d.req_t_skew >= o.o_t
WHERE o.o_t = 0 OR d.req_t - o.o_t > {reaction_us:Int64}`
}

// nextCreatesSQL reads, for each of the given deletes ({deletes}), the
// first successful create of the same object at or after it (an ASOF
// join): the re-create that ended the churn, whoever caused it.
func nextCreatesSQL(window, ignored string) string {
	return `SELECT c.cluster AS cluster, c.audit_id AS audit_id, c.stage AS stage, c.t AS t, c.received AS received,
       c.verb AS verb, c.resource AS resource, c.namespace AS namespace, c.name AS name, c.user AS user,
       c.user_agent AS user_agent, c.source_ip AS source_ip, c.request_uri AS request_uri, c.code AS code,
       c.req_rv AS req_rv, c.response_rv AS response_rv, c.object_rv AS object_rv
FROM (
    SELECT cluster, audit_id, namespace, name, toUnixTimestamp64Micro(ts) AS d_t
    FROM audit_events
    WHERE ` + window + ` AND audit_id IN {deletes:Array(String)} AND stage = 'ResponseComplete'
    LIMIT 1 BY cluster, audit_id
) AS d
GLOBAL ASOF JOIN (
    SELECT ` + events.Columns + `
    FROM audit_events
    WHERE ` + window + ` AND resource = {churn:String} AND api_group = '' AND subresource = ''
      AND verb = 'create' AND code >= 200 AND code < 300` + ignored + `
      AND concat(namespace, '/', name) IN {objects:Array(String)}
    LIMIT 1 BY cluster, audit_id
) AS c
ON d.cluster = c.cluster AND d.namespace = c.namespace AND d.name = c.name AND d.d_t <= c.t
LIMIT 1 BY c.cluster, c.audit_id`
}

// namedOwnerWritesSQL is the owner writes that name their object, with
// the time each request was made: a write counts unless it failed (without
// a status — a policy that records only RequestReceived — it may have
// succeeded, and an explained write must never be blamed on a loop).
func namedOwnerWritesSQL(ownerWindow string) string {
	return `
    SELECT cluster, namespace, name, min(` + auditsql.RequestTime + `) AS o_t
    FROM audit_events
    WHERE ` + ownerWindow + ` AND resource = {owner:String} AND api_group = '' AND subresource = ''
      AND verb IN ('delete', 'create', 'deletecollection') AND name != ''
    GROUP BY cluster, audit_id, namespace, name
    HAVING max(code) = 0 OR (max(code) >= 200 AND max(code) < 300)
`
}

// unnamedOwnerWritesSQL selects the owner writes that name no object
// (generateName, or a policy that omits the name) in the namespaces of
// the churn: such a write explains the churn writes of its whole
// namespace right after it. It is checked in Go (explainedUnnamed).
func unnamedOwnerWritesSQL(window string) string {
	return `SELECT cluster, namespace, name, min(` + auditsql.RequestTime + `) AS t
FROM audit_events
WHERE ` + window + ` AND resource = {owner:String} AND api_group = '' AND subresource = ''
  AND verb IN ('delete', 'create', 'deletecollection') AND name = '' AND namespace IN {namespaces:Array(String)}
GROUP BY cluster, audit_id, namespace, name
HAVING max(code) = 0 OR (max(code) >= 200 AND max(code) < 300)
ORDER BY cluster, namespace, name, t`
}

type ownerWrite struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	T         int64  `json:"t"`
}

// churn is the churn-resource writes that may follow the candidates'
// restarts, by cluster, with what explains them.
type churn struct {
	// events are the deletes no named owner write explains and the first
	// create of the same object after each, ordered by object and time, a
	// delete before a create of the same time (second-precision timestamps
	// of 1.8-era logs).
	events map[string][]events.Row
	// owners are the owner writes that name no object, which explain the
	// churn of their namespace (see explainedUnnamed).
	owners map[string][]ownerWrite
}

func (d *WatchLoop) selectChurn(ctx context.Context, q detect.Querier, w detect.Window, cands []*candidate) (churn, error) {
	c := churn{events: map[string][]events.Row{}, owners: map[string][]ownerWrite{}}
	width := max(d.cfg.FollowWithin.Microseconds()/3, 1)
	buckets, keyed := map[string]bool{}, map[string]bool{}
	anyProgram := false
	for _, cd := range cands {
		anyProgram = anyProgram || cd.UserAgent == ""
		for _, i := range cd.starts {
			// A delete within FollowWithin (plus ownerSkew and the
			// delete's own handling) of the restart.
			b := cd.Watches[i].Time.UnixMicro() / width
			for x := b; x <= b+4; x++ {
				buckets[strconv.FormatInt(x, 10)] = true
				keyed[cd.Program+"|"+strconv.FormatInt(x, 10)] = true
			}
		}
	}
	p := store.Params{"churn": store.StringParam(d.cfg.ChurnResource), "owner": store.StringParam(d.cfg.OwnerResource),
		"bucket_us": strconv.FormatInt(width, 10), "buckets": "[" + strings.Join(slices.Sorted(maps.Keys(buckets)), ",") + "]",
		"program_buckets": store.StringArrayParam(slices.Sorted(maps.Keys(keyed))), "any_program": strconv.FormatBool(anyProgram),
		"skew_us": strconv.FormatInt(ownerSkew.Microseconds(), 10), "reaction_us": strconv.FormatInt(d.cfg.ReactionWithin.Microseconds(), 10)}
	ignored := ""
	if len(d.cfg.IgnoreChurnBy) > 0 {
		p["ignored"] = store.StringArrayParam(d.cfg.IgnoreChurnBy)
		ignored = " AND user NOT IN {ignored:Array(String)}"
	}
	// Owner writes from ReactionWithin before the window: they explain
	// churn writes at its start.
	ow := w
	ow.Since = w.Since.Add(-d.cfg.ReactionWithin)
	ownerWindow := detect.WindowCond(ow, p, "o_")
	window := detect.WindowParams(w, p)
	objects, namespaces := map[string]bool{}, map[string]bool{}
	var deletes []string
	err := detect.SelectRows(ctx, q, d.cfg.ChurnResource+" deletes", churnDeletesSQL(window, ownerWindow, ignored), p, func(r events.Row) error {
		c.events[r.Cluster] = append(c.events[r.Cluster], r)
		objects[r.Namespace+"/"+r.Name] = true
		namespaces[r.Namespace] = true
		deletes = append(deletes, r.AuditID)
		return nil
	})
	if err != nil || len(objects) == 0 {
		return c, err
	}
	p["objects"] = store.StringArrayParam(slices.Sorted(maps.Keys(objects)))
	p["namespaces"] = store.StringArrayParam(slices.Sorted(maps.Keys(namespaces)))
	slices.Sort(deletes)
	p["deletes"] = store.StringArrayParam(slices.Compact(deletes))
	err = detect.SelectRows(ctx, q, d.cfg.ChurnResource+" re-creates", nextCreatesSQL(window, ignored), p, func(r events.Row) error {
		c.events[r.Cluster] = append(c.events[r.Cluster], r)
		return nil
	})
	if err != nil {
		return c, err
	}
	for _, evs := range c.events {
		slices.SortFunc(evs, func(a, b events.Row) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), cmp.Compare(a.TS, b.TS),
				cmp.Compare(verbOrder(a.Verb), verbOrder(b.Verb)), strings.Compare(a.AuditID, b.AuditID))
		})
	}
	err = detect.SelectRows(ctx, q, d.cfg.OwnerResource+" creates and deletes", unnamedOwnerWritesSQL(ownerWindow), p,
		func(r ownerWrite) error {
			c.owners[r.Cluster] = append(c.owners[r.Cluster], r)
			return nil
		})
	return c, err
}

// verbOrder puts a delete before a create of the same time.
func verbOrder(verb string) int {
	if verb == "delete" {
		return 0
	}
	return 1
}

// ownerSkew is how much earlier than its owner's write a churn write may
// be stamped and still be its reaction: times of different requests are
// taken at different points of their handling, and 1.8-era logs have
// whole seconds.
const ownerSkew = time.Second

// explainedUnnamed reports whether an owner write that names no object
// (owners: those of the cluster, ordered by namespace and time) explains
// the churn write e: one in e's namespace at most ReactionWithin before
// it. Named owner writes were applied in the engine (churnDeletesSQL).
func (d *WatchLoop) explainedUnnamed(owners []ownerWrite, e events.Row) bool {
	t := e.Requested()
	i, _ := slices.BinarySearchFunc(owners, e.Namespace, func(a ownerWrite, ns string) int { return strings.Compare(a.Namespace, ns) })
	for ; i < len(owners) && owners[i].Namespace == e.Namespace; i++ {
		o := detect.Micros(owners[i].T)
		if !t.Before(o.Add(-ownerSkew)) && t.Sub(o) <= d.cfg.ReactionWithin {
			return true
		}
	}
	return false
}

// attribute gives each unexplained delete to the watch restart it
// followed: among the restarts that can replay history (markReplayable)
// of every candidate of the cluster within
// FollowWithin before it, the latest one of the program that wrote the
// delete (the endpoints controller runs in the program whose informer
// replays; see sameProgram). When the log cannot say which program wrote
// it, the latest restart of any candidate. A delete by a program whose
// reflector did not restart (a user, a janitor) follows nothing. The
// first re-create of the same object within PairWithin is its pair.
func (d *WatchLoop) attribute(cands []*candidate, ch churn) {
	type ref struct {
		t     time.Time
		cand  int
		watch int
	}
	byCluster := map[string][]ref{}
	for ci, c := range cands {
		for _, wi := range c.starts {
			if c.replayable[wi] {
				byCluster[c.Cluster] = append(byCluster[c.Cluster], ref{c.Watches[wi].Time, ci, wi})
			}
		}
	}
	for cluster, refs := range byCluster {
		slices.SortStableFunc(refs, func(a, b ref) int { return a.t.Compare(b.t) })
		events, owners := ch.events[cluster], ch.owners[cluster]
		for i, e := range events {
			if e.Verb != "delete" || e.Name == "" || d.explainedUnnamed(owners, e) {
				continue
			}
			del := e.Requested()
			last := sort.Search(len(refs), func(i int) bool { return refs[i].t.After(del) }) - 1
			pick, unknown := -1, -1
			for j := last; j >= 0 && del.Sub(refs[j].t) <= d.cfg.FollowWithin; j-- {
				switch sameProgram(cands[refs[j].cand].WatchGroup, e) {
				case programSame:
					pick = j
				case programUnknown:
					if unknown < 0 {
						unknown = j
					}
				}
				if pick >= 0 {
					break
				}
			}
			if pick < 0 {
				pick = unknown
			}
			if pick < 0 {
				continue
			}
			a := attributed{watch: refs[pick].watch, del: e}
			for _, n := range events[i+1:] {
				if n.Namespace != e.Namespace || n.Name != e.Name || n.Requested().Sub(del) > d.cfg.PairWithin {
					break
				}
				if n.Verb == "create" {
					a.create = &n
					break
				}
			}
			c := cands[refs[pick].cand]
			c.deletes = append(c.deletes, a)
		}
	}
}

type programMatch int

const (
	programOther programMatch = iota
	programSame
	programUnknown
)

// sameProgram tells whether the event was written by the program that
// runs the reflector g. With user agents on both sides (every log since
// Kubernetes 1.12), their products compare. Without them (1.7–1.11, the
// releases the bug hit) the users do, kube-controller-manager's
// controllers' own service accounts (--use-service-account-credentials)
// counting as kube-controller-manager. Only a log that gives one side a
// user agent and not the other leaves it unknown.
func sameProgram(g events.WatchGroup, e events.Row) programMatch {
	switch {
	case g.UserAgent != "" && e.UserAgent != "":
		if g.Program == events.ProgramName(e.UserAgent, e.User) {
			return programSame
		}
		return programOther
	case g.UserAgent == "" && e.UserAgent == "":
		if userProgram(g.User) == userProgram(e.User) {
			return programSame
		}
		return programOther
	}
	return programUnknown
}

// userProgram names the program a user is, for logs without user agents:
// kube-controller-manager's controllers write as service accounts of
// kube-system named after the controller ("endpoint-controller").
func userProgram(user string) string {
	if user == "system:kube-controller-manager" {
		return "kube-controller-manager"
	}
	if sa, ok := strings.CutPrefix(user, "system:serviceaccount:kube-system:"); ok && strings.HasSuffix(sa, "-controller") {
		return "kube-controller-manager"
	}
	return user
}
