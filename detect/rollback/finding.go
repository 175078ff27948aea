package rollback

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
	"github.com/auditlens/auditlens/store"

	"github.com/auditlens/auditlens/internal/auditsql"
	refl "github.com/auditlens/auditlens/internal/reflector"
)

// The rv-rollback detector's findings: the evidence queries, run only
// around a drop or a jump the head series showed, and the text.

// headEventsSQL lists the successful writes of short ranges (each {span}
// long from one of {starts}, in microseconds), with the resourceVersion
// headSQL reads from each. The ranges are a small part of the window: only
// their rows are read beyond their times (PREWHERE).
func headEventsSQL(window string) string {
	return `SELECT audit_id, toUnixTimestamp64Micro(ts) AS t,
       greatest(toUInt64OrZero(response_rv), if(verb = 'update', toUInt64OrZero(object_rv), 0)) AS hv
FROM audit_events
WHERE ` + window + ` AND cluster = {cluster:String}
  AND arrayExists(s -> toUnixTimestamp64Micro(ts) >= s AND toUnixTimestamp64Micro(ts) < s + {span:Int64}, {starts:Array(Int64)})
  AND verb IN ` + writeVerbs + ` AND stage = 'ResponseComplete' AND code >= 200 AND code < 300 AND hv > 0
ORDER BY ts, audit_id`
}

// showsRVSQL finds the first event of a short range that shows {rv}: a
// write's, a watch's or list's, or a listed resourceVersion.
func showsRVSQL(window string) string {
	return `SELECT ` + events.Columns + `
FROM audit_events
WHERE ` + window + ` AND cluster = {cluster:String} AND {rv:String} IN (response_rv, object_rv, req_rv)
ORDER BY ts, audit_id
LIMIT 1`
}

// futureSQL groups the watches and lists made from {from} on from a
// resourceVersion above {after} by client, resource and requested
// resourceVersion: a stuck reflector asks again and again from the one it
// holds. last is when its last request ended (or was last seen). FINAL
// is not needed: requests are counted by audit ID.
func futureSQL(window string) string {
	return `SELECT user, toString(user_agent) AS ua, toString(source_ip) AS ip, resource, any(namespace) AS ns, req_rv AS rv,
       uniqExact(audit_id) AS n,
       min(` + auditsql.RequestTime + `) AS first,
       max(toUnixTimestamp64Micro(ts)) AS last,
       argMin(audit_id, ts) AS first_id, argMin(stage, ts) AS first_stage, argMin(request_uri, ts) AS first_uri,
       argMin(verb, ts) AS first_verb,
       argMax(audit_id, ts) AS last_id, argMax(request_uri, ts) AS last_uri, argMax(verb, ts) AS last_verb,
       max(code) AS max_code
FROM audit_events
WHERE ` + window + ` AND cluster = {cluster:String} AND verb IN ('watch', 'list') AND toUInt64OrZero(req_rv) > {after:UInt64}
  AND ` + auditsql.RequestAt + ` >= {from:DateTime64(6, 'UTC')}
GROUP BY user, user_agent, source_ip, resource, req_rv
ORDER BY first, user, ip, resource, rv`
}

type futureRow struct {
	User      string `json:"user"`
	UserAgent string `json:"ua"`
	SourceIP  string `json:"ip"`
	Resource  string `json:"resource"`
	Namespace string `json:"ns"`
	RV        string `json:"rv"`
	N         int    `json:"n"`
	First     int64  `json:"first"`
	Last      int64  `json:"last"`
	FirstID   string `json:"first_id"`
	FirstSt   string `json:"first_stage"`
	FirstURI  string `json:"first_uri"`
	FirstVerb string `json:"first_verb"`
	LastID    string `json:"last_id"`
	LastURI   string `json:"last_uri"`
	LastVerb  string `json:"last_verb"`
	Code      int32  `json:"max_code"`
}

// aftermathSQL lists, one row per request made in the range, the 409 conflicts on updates
// and patches, the relists (lists and watch-lists, internal/reflector's
// ListSQL: a paginated list once; not the apiserver's own informers
// starting) and the controllers' churn of a range ({since}, {until}): kind says which. Churn is what a
// controller acting on a stale cache does: a delete (done, or 404: the
// object existed only after the snapshot) of an object not created
// earlier in the window ({w_since}; a controller deleting what it just
// created is routine), or a create of an object that was created before
// the drop ({drop}) — one that existed only after the snapshot, gone with
// the restore and created again.
func aftermathSQL(window string) string {
	return `SELECT ` + events.Columns + `, kind FROM (
    SELECT *, request_uri, received_at, multiIf(verb IN ('update', 'patch') AND code = 409, 'conflict',
                      ` + refl.ListSQL + `, 'relist',
                      'churn') AS kind
    FROM audit_events
    WHERE ` + window + ` AND cluster = {cluster:String} AND stage = 'ResponseComplete'
      AND ` + auditsql.RequestAt + ` >= {since:DateTime64(6, 'UTC')}
      AND ((verb IN ('update', 'patch') AND code = 409)
        OR (` + refl.ListSQL + ` AND user != 'system:apiserver')
        OR (verb IN ('create', 'delete') AND subresource = '' AND name != '' AND resource NOT IN ` + notChurn + `
            AND arrayExists(p -> startsWith(user, p), {churn_by:Array(String)})
            AND ((verb = 'delete' AND ((code >= 200 AND code < 300) OR code = 404)
                  AND (resource, namespace, name) NOT IN (` + createdSQL + ` AND ts < {until:DateTime64(6, 'UTC')}))
              OR (verb = 'create' AND code >= 200 AND code < 300
                  AND (resource, namespace, name) IN (` + createdSQL + ` AND ts < {drop:DateTime64(6, 'UTC')})))))
)
ORDER BY ts, audit_id
LIMIT 1 BY audit_id`
}

// createdSQL selects the objects created in the window from {w_since}.
const createdSQL = `SELECT resource, namespace, name FROM audit_events
    WHERE cluster = {cluster:String} AND ts >= {w_since:DateTime64(6, 'UTC')} AND verb = 'create'
      AND stage = 'ResponseComplete' AND code >= 200 AND code < 300 AND name != ''`

// notChurn are resources whose creates and deletes are no objects hurt.
const notChurn = `('events', 'leases', 'tokenreviews', 'subjectaccessreviews', 'selfsubjectaccessreviews',
                                 'localsubjectaccessreviews', 'selfsubjectreviews')`

// maxPerRole bounds the conflicts, relists and churn events (and the
// objects) a finding keeps as evidence; the counts go on.
const maxPerRole = 200

type aftermathRow struct {
	events.Row
	Kind string `json:"kind"`
}

// within returns the part of w (one cluster) from since to until.
func within(w detect.Window, cluster string, since, until time.Time) (detect.Window, bool) {
	out := detect.Window{Since: since, Until: until, Clusters: []string{cluster}}
	if out.Since.Before(w.Since) {
		out.Since = w.Since
	}
	if out.Until.After(w.Until) || out.Until.IsZero() {
		out.Until = w.Until
	}
	return out, out.Since.Before(out.Until)
}

func (d *RVRollback) firstShowing(ctx context.Context, q detect.Querier, w detect.Window, cluster string, rv uint64, since time.Time) (*events.Row, error) {
	rw, ok := within(w, cluster, since, since.Add(d.cfg.Bucket))
	if !ok {
		return nil, nil
	}
	p := store.Params{"cluster": store.StringParam(cluster), "rv": store.StringParam(detect.FormatRV(rv))}
	var found *events.Row
	err := detect.SelectRows(ctx, q, "the event that showed the head", showsRVSQL(detect.WindowParams(rw, p)), p,
		func(r events.Row) error {
			found = &r
			return nil
		})
	return found, err
}

// headRow is a write that showed the head, with the resourceVersion it
// showed.
type headRow struct {
	AuditID string `json:"audit_id"`
	TS      int64  `json:"t"`
	HV      uint64 `json:"hv"`
}

// writesNear reads, in one query, the writes that showed the head around
// each of the times froms (the bucket before each, its own and the next):
// where the head changed.
func (d *RVRollback) writesNear(ctx context.Context, q detect.Querier, w detect.Window, cluster string, froms []time.Time) ([]headRow, error) {
	if len(froms) == 0 {
		return nil, nil
	}
	lo, hi := froms[0], froms[0]
	starts := make([]string, 0, len(froms))
	for _, f := range froms {
		lo, hi = events.MinTime(lo, f), events.MaxTime(hi, f)
		starts = append(starts, strconv.FormatInt(f.Add(-d.cfg.Bucket).UnixMicro(), 10))
	}
	// The bucket after too: the head after is the highest of the writes
	// within a Bucket of the first lower one (see locate).
	rw, ok := within(w, cluster, lo.Add(-d.cfg.Bucket), hi.Add(2*d.cfg.Bucket))
	if !ok {
		return nil, nil
	}
	p := store.Params{"cluster": store.StringParam(cluster), "starts": "[" + strings.Join(starts, ",") + "]",
		"span": strconv.FormatInt((3 * d.cfg.Bucket).Microseconds(), 10)}
	var rows []headRow
	err := detect.SelectRows(ctx, q, "the writes where the head changed", headEventsSQL(detect.WindowParams(rw, p)), p,
		func(r headRow) error {
			rows = append(rows, r)
			return nil
		})
	return rows, err
}

// edge returns the first write around from (the bucket before it and its
// own, among near) that shows a new head (isNew), and whether it is a
// clean edge: no write showed the old head (isOld: at or near it) within
// MinGap before it, and none after it. A restore stops etcd and restarts
// the apiservers, so the writes pause and the old head never comes back,
// where two sources of resourceVersions mixed under one cluster name (two
// clusters' feeds, say) take turns without a pause. Writes carrying an
// object's own older resourceVersion (an update of an object last written
// before the snapshot) are neither. nil when there is no new write in the
// window.
func (d *RVRollback) edge(near []headRow, from time.Time, isNew, isOld func(uint64) bool) (*headRow, bool) {
	lo, hi := from.Add(-d.cfg.Bucket), from.Add(d.cfg.Bucket)
	var rows []headRow
	for _, r := range near {
		if t := detect.Micros(r.TS); !t.Before(lo) && t.Before(hi) {
			rows = append(rows, r)
		}
	}
	first := slices.IndexFunc(rows, func(r headRow) bool { return isNew(r.HV) })
	if first < 0 {
		return nil, false
	}
	r := rows[first]
	for k, o := range rows {
		switch {
		case !isOld(o.HV):
		case k > first:
			return &r, false // the old head is back: the two take turns
		case detect.Micros(r.TS).Sub(detect.Micros(o.TS)) < d.cfg.MinGap:
			return &r, false // no pause
		}
	}
	return &r, true
}

// event reads the first stage of one request, around t.
func (d *RVRollback) event(ctx context.Context, q detect.Querier, w detect.Window, cluster, id string, t time.Time) (*events.Row, error) {
	rw := detect.Window{Since: t.Add(-time.Minute), Until: t.Add(time.Minute)}
	rows, err := events.Select(ctx, q, rw, cluster, []string{id})
	if err != nil {
		return nil, err
	}
	r, ok := events.FirstStage(rows[id])
	if !ok {
		return nil, nil
	}
	return &r, nil
}

// rollbackFinding builds the finding of a drop: rb holds its head
// events; the window's requests after it are its consequences. They
// begin at the restart, which is between the head-before and head-after
// events: kubelets' first Lease updates got 409 and clients watched from
// the future before any write showed the lower head.
func (d *RVRollback) rollbackFinding(ctx context.Context, q detect.Querier, w detect.Window, cluster string, rb *rollbackState, dr *drop) (detect.Finding, error) {
	f := detect.Finding{
		// Named by the head before alone: the head after is read from the
		// writes of the drop's first seconds, which a window that ends
		// early (webhook batches still on their way) holds only part of.
		ID:       detect.FindingID(Name, cluster, detect.FormatRV(rb.BeforeRV)),
		Detector: Name,
		Cluster:  cluster,
		Subjects: detect.Subjects{PreviousResourceVersion: detect.FormatRV(rb.BeforeRV), ResourceVersion: detect.FormatRV(rb.AfterRV)},
	}
	f.Evidence = append(f.Evidence, rb.Before, rb.After)
	dropAt := rb.After.Time
	from := dropAt.Add(-d.cfg.Bucket)
	if b := rb.Before.Time; b.Before(dropAt) && b.After(dropAt.Add(-d.cfg.Aftermath)) {
		from = b
	}

	// Clients in the future, for as long as the head stays below what they
	// ask for.
	// A drop this window shows only the end of (its head-before and first
	// lower write remembered) is followed from its restart: what came
	// between, before the window, is its own doing, at most Aftermath
	// before the drop.
	reach := w
	if from.Before(reach.Since) {
		reach.Since = from
	}
	if fw, ok := within(reach, cluster, from, time.Time{}); ok {
		p := store.Params{"cluster": store.StringParam(cluster), "after": detect.FormatRV(rb.AfterRV), "from": store.TimeParam(from)}
		stuck := map[string]*stuckAcc{}
		groups := 0
		err := detect.SelectRows(ctx, q, "watches from the future", futureSQL(detect.WindowParams(fw, p)), p,
			func(r futureRow) error {
				rv, err := strconv.ParseUint(r.RV, 10, 64)
				first := detect.Micros(r.First)
				if err != nil || rv <= dr.headAt(first) || !dr.CaughtUp.IsZero() && !first.Before(dr.CaughtUp) {
					return nil
				}
				until := detect.Micros(r.Last)
				if passed, ok := dr.passed(rv); ok && passed.Before(until) {
					until = passed
				}
				prog := clientName(r.User)
				a := stuck[prog]
				if a == nil {
					a = &stuckAcc{c: detect.StuckClient{Program: prog, From: first, Until: until}, inst: map[string]bool{}, res: map[string]bool{}}
					stuck[prog] = a
				}
				a.add(r.User+"\x00"+r.SourceIP, r.Resource, rv, first, until)
				if groups++; groups <= maxPerRole {
					f.Evidence = append(f.Evidence, detect.Evidence{AuditID: r.FirstID, Stage: r.FirstSt, Time: first, Verb: r.FirstVerb,
						Resource: r.Resource, Namespace: r.Namespace, User: r.User, RequestURI: r.FirstURI, Code: r.Code,
						Role: RoleFutureWatch, ResourceVersion: r.RV})
				}
				return nil
			})
		if err != nil {
			return f, err
		}
		for _, k := range slices.Sorted(maps.Keys(stuck)) {
			f.Subjects.Stuck = append(f.Subjects.Stuck, stuck[k].client())
		}
	}

	// 409s, relists and churn in the aftermath.
	if aw, ok := within(reach, cluster, from, dropAt.Add(d.cfg.Aftermath)); ok {
		p := store.Params{"cluster": store.StringParam(cluster), "churn_by": store.StringArrayParam(d.cfg.ChurnBy),
			"w_since": store.TimeParam(reach.Since), "drop": store.TimeParam(dropAt)}
		err := detect.SelectRows(ctx, q, "the drop's aftermath", aftermathSQL(detect.WindowParams(aw, p)), p,
			func(r aftermathRow) error {
				switch r.Kind {
				case "conflict":
					if f.Subjects.Conflicts++; f.Subjects.Conflicts <= maxPerRole {
						f.Evidence = append(f.Evidence, r.Evidence(RoleConflict, r.ObjectRV))
					}
				case "relist":
					if f.Subjects.Relists++; f.Subjects.Relists <= maxPerRole {
						f.Evidence = append(f.Evidence, r.Evidence(detect.RoleRelist, r.ReqRV))
					}
				case "churn":
					if len(f.Objects) < maxPerRole {
						f.Evidence = append(f.Evidence, r.Evidence(RoleChurn, r.ResponseRV))
						f.Objects = append(f.Objects, detect.Object{Resource: r.Resource, Namespace: r.Namespace, Name: r.Name})
					}
				}
				return nil
			})
		if err != nil {
			return f, err
		}
	}
	f.Normalize()
	d.describe(&f)
	return f, nil
}

// stuckAcc gathers one program's requests from the future.
type stuckAcc struct {
	c        detect.StuckClient
	inst     map[string]bool
	res      map[string]bool
	min, max uint64
}

func (a *stuckAcc) add(instance, resource string, rv uint64, from, until time.Time) {
	a.inst[instance] = true
	a.res[resource] = true
	if a.min == 0 || rv < a.min {
		a.min = rv
	}
	a.max = max(a.max, rv)
	a.c.From = events.MinTime(a.c.From, from)
	a.c.Until = events.MaxTime(a.c.Until, until)
}

func (a *stuckAcc) client() detect.StuckClient {
	c := a.c
	c.Instances, c.Resources = len(a.inst), slices.Sorted(maps.Keys(a.res))
	c.MinRV, c.MaxRV = detect.FormatRV(a.min), detect.FormatRV(a.max)
	return c
}

// mergeStuck combines the stuck clients two evaluations saw, by program.
func mergeStuck(a, b []detect.StuckClient) []detect.StuckClient {
	by := map[string]detect.StuckClient{}
	for _, c := range append(slices.Clone(a), b...) {
		o, ok := by[c.Program]
		if !ok {
			by[c.Program] = c
			continue
		}
		o.Instances = max(o.Instances, c.Instances)
		o.Resources = detect.MergeStrings(o.Resources, c.Resources)
		if x, ok := detect.CompareRV(c.MinRV, o.MinRV); ok && x < 0 {
			o.MinRV = c.MinRV
		}
		if x, ok := detect.CompareRV(c.MaxRV, o.MaxRV); ok && x > 0 {
			o.MaxRV = c.MaxRV
		}
		o.From, o.Until = events.MinTime(o.From, c.From), events.MaxTime(o.Until, c.Until)
		by[c.Program] = o
	}
	out := make([]detect.StuckClient, 0, len(by))
	for _, k := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[k])
	}
	return out
}

// restoreFinding builds the info finding of a jump whose relist herd
// makes it a restore with --bump-revision; ok is false when too few
// clients relisted.
func (d *RVRollback) restoreFinding(ctx context.Context, q detect.Querier, w detect.Window, cluster string, before, after detect.Evidence) (detect.Finding, bool, error) {
	f := detect.Finding{
		ID:       detect.FindingID(Name, cluster, "restore", before.ResourceVersion),
		Detector: Name,
		Cluster:  cluster,
		Subjects: detect.Subjects{PreviousResourceVersion: before.ResourceVersion, ResourceVersion: after.ResourceVersion},
		Evidence: []detect.Evidence{before, after},
	}
	aw, ok := within(w, cluster, after.Time.Add(-d.cfg.Bucket), after.Time.Add(d.cfg.Aftermath))
	if !ok {
		return f, false, nil
	}
	p := store.Params{"cluster": store.StringParam(cluster), "churn_by": store.StringArrayParam([]string{}),
		"w_since": store.TimeParam(w.Since), "drop": store.TimeParam(after.Time)}
	clients := map[string]bool{}
	err := detect.SelectRows(ctx, q, "relists after the jump", aftermathSQL(detect.WindowParams(aw, p)), p,
		func(r aftermathRow) error {
			if r.Kind == "relist" {
				if f.Subjects.Relists++; f.Subjects.Relists <= maxPerRole {
					f.Evidence = append(f.Evidence, r.Evidence(detect.RoleRelist, r.ReqRV))
				}
				clients[r.User+"\x00"+r.UserAgent+"\x00"+r.SourceIP] = true
			}
			return nil
		})
	if err != nil || len(clients) < d.cfg.MinHerd {
		return f, false, err
	}
	f.Normalize()
	d.describe(&f)
	return f, true, nil
}

// Merge implements Merger: evidence, objects and stuck clients are the
// union, the counts the higher of both (each evaluation counts the whole
// aftermath its window holds).
func (d *RVRollback) Merge(prev, next detect.Finding) detect.Finding {
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Normalize()
	f.Subjects.Conflicts = max(prev.Subjects.Conflicts, next.Subjects.Conflicts)
	f.Subjects.Relists = max(prev.Subjects.Relists, next.Subjects.Relists)
	f.Subjects.Stuck = mergeStuck(prev.Subjects.Stuck, next.Subjects.Stuck)
	d.describe(&f)
	return f
}

// describe sets the times, severity, confidence and text of a finding
// from its subjects and evidence.
func (d *RVRollback) describe(f *detect.Finding) {
	s := &f.Subjects
	var before, after *detect.Evidence
	var creates, deletes, futureConflicts int
	relisters := map[string]bool{}
	afterRV, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
	beforeRV, _ := strconv.ParseUint(s.PreviousResourceVersion, 10, 64)
	for i := range f.Evidence {
		e := &f.Evidence[i]
		switch e.Role {
		case RoleHeadBefore:
			before = e
		case RoleHeadAfter:
			after = e
		case RoleConflict:
			if rv, err := strconv.ParseUint(e.ResourceVersion, 10, 64); err == nil && rv > afterRV {
				futureConflicts++
			}
		case detect.RoleRelist:
			relisters[e.User] = true
		case RoleChurn:
			if e.Verb == "delete" {
				deletes++
			} else {
				creates++
			}
		}
	}
	if before == nil || after == nil {
		return
	}
	f.FirstSeen, f.LastSeen = after.Time, after.Time
	for _, e := range f.Evidence {
		if e.Role != RoleHeadBefore {
			f.FirstSeen = events.MinTime(f.FirstSeen, e.Time)
		}
		f.LastSeen = events.MaxTime(f.LastSeen, e.Time)
	}
	for _, c := range s.Stuck {
		f.LastSeen = events.MaxTime(f.LastSeen, c.Until)
	}
	if afterRV > beforeRV {
		d.describeRestore(f, before, after, len(relisters))
		return
	}

	f.Severity, f.Confidence = detect.Warning, 0.6
	if len(s.Stuck) > 0 || futureConflicts > 0 {
		f.Severity, f.Confidence = detect.Critical, 0.8
		if len(s.Stuck) > 0 && futureConflicts > 0 {
			f.Confidence = 0.9
		}
		if beforeRV-afterRV >= 10*d.cfg.MinDrop {
			f.Confidence += 0.05
		}
	}
	f.Confidence = detect.Round2(f.Confidence)
	f.Title = fmt.Sprintf("The cluster's resourceVersion went back from %s to %s: etcd restored without --bump-revision",
		s.PreviousResourceVersion, s.ResourceVersion)

	var b strings.Builder
	fmt.Fprintf(&b, "The highest resourceVersion the cluster's writes showed was %s", s.PreviousResourceVersion)
	if before.AuditID != "" {
		fmt.Fprintf(&b, " (%s %s by %s at %s)", before.Verb, evidenceTarget(*before), before.User, before.Time.Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "; by %s writes showed resourceVersions at least %d lower, the new head reaching %s within seconds (%s %s by %s), and stayed "+
		"below it. resourceVersions are etcd revisions, which only grow: etcd was restored from a snapshot without "+
		"--bump-revision and hands out again the revisions it had handed out since. ",
		after.Time.Format(time.RFC3339), beforeRV-afterRV, s.ResourceVersion, after.Verb, evidenceTarget(*after), after.User)
	if len(s.Stuck) > 0 {
		b.WriteString("Clients watched or listed from resourceVersions above the new head, accepted and silent until the " +
			"head passed them: ")
		for i, c := range s.Stuck {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(c.Program)
			if c.Instances > 1 {
				fmt.Fprintf(&b, " (%d instances)", c.Instances)
			}
			fmt.Fprintf(&b, " on %s from %s", strings.Join(c.Resources, ", "), c.MinRV)
			if c.MaxRV != c.MinRV {
				fmt.Fprintf(&b, "–%s", c.MaxRV)
			}
			fmt.Fprintf(&b, ", %s to %s (%s)", c.From.Format(time.RFC3339), c.Until.Format(time.RFC3339), c.Until.Sub(c.From).Round(time.Second))
		}
		b.WriteString(". ")
	} else {
		b.WriteString("No client was seen watching from above the new head: every client restarted, or the audit policy " +
			"hides their watches. ")
	}
	fmt.Fprintf(&b, "From the restart to %s after the drop: %d updates answered 409 Conflict", d.cfg.Aftermath, s.Conflicts)
	if futureConflicts > 0 {
		fmt.Fprintf(&b, " (%d carrying a resourceVersion above the new head, as kubelets' Lease updates do)", futureConflicts)
	}
	fmt.Fprintf(&b, ", %s by %s, and controllers deleted %s they did not create and created %s that existed before the drop",
		rvCount(s.Relists, "relist"), rvCount(len(relisters), "user"), rvCount(deletes, "object"), rvCount(creates, "object"))
	if len(f.Objects) > 0 {
		names := make([]string, 0, min(len(f.Objects), 8))
		for _, o := range f.Objects[:min(len(f.Objects), 8)] {
			names = append(names, o.String())
		}
		fmt.Fprintf(&b, " (%s", strings.Join(names, ", "))
		if len(f.Objects) > 8 {
			fmt.Fprintf(&b, " and %d more", len(f.Objects)-8)
		}
		b.WriteString(")")
	}
	b.WriteString(". Objects written after the snapshot are gone, and controllers acting on stale caches delete or " +
		"re-create what they think is stale.")
	f.Summary = b.String()
	f.Remediation = fmt.Sprintf("Restore etcd again the documented way: `etcdutl snapshot restore SNAPSHOT --bump-revision N "+
		"--mark-compacted` with N larger than the revisions handed out since the snapshot (at least %d here; a large margin such "+
		"as 1000000000 is usual), then restart every kube-apiserver: marking the old revisions compacted makes every client's "+
		"watch fail with 410 Gone and relist. Until then restart, or force to relist, the clients stuck in the future — "+
		"kube-controller-manager, kube-scheduler, kube-proxy on every node, the kubelets and CNI agents such as Calico "+
		"(re-initialise kube-proxy if Services still have no rules). Check Deployments' revisions (`kubectl rollout "+
		"history`) against what etcd now holds, and re-create the objects written after the snapshot.",
		beforeRV-afterRV)
}

// describeRestore is describe for a jump up: a restore done the safe way.
func (d *RVRollback) describeRestore(f *detect.Finding, before, after *detect.Evidence, relisters int) {
	s := &f.Subjects
	f.Severity, f.Confidence = detect.Info, 0.7
	f.Title = fmt.Sprintf("The cluster's resourceVersion jumped from %s to %s: etcd restored with --bump-revision", s.PreviousResourceVersion, s.ResourceVersion)
	f.Summary = fmt.Sprintf("The highest resourceVersion the cluster showed jumped from %s (at %s) to %s (%s %s by %s at %s), far "+
		"more than the cluster writes in that time, and %s relisted (%s) within %s: etcd was restored from a snapshot "+
		"with --bump-revision and --mark-compacted, so clients got 410 Gone and relisted instead of watching from stale "+
		"resourceVersions. Objects written after the snapshot are gone.",
		s.PreviousResourceVersion, before.Time.Format(time.RFC3339), s.ResourceVersion, after.Verb, evidenceTarget(*after), after.User,
		after.Time.Format(time.RFC3339), rvCount(relisters, "user"), rvCount(s.Relists, "list"), d.cfg.Aftermath)
	f.Remediation = "Nothing to undo in the clients. Check that the objects written after the snapshot (Deployments' " +
		"revisions, Services and their Endpoints) are what the cluster should run."
}

// clientName names a client by its user, as people call the program:
// kubelet for system:node:<n>, the service account's name, the system
// component's name.
func clientName(user string) string {
	switch {
	case strings.HasPrefix(user, "system:node:"):
		return "kubelet"
	case strings.HasPrefix(user, "system:serviceaccount:"):
		return user[strings.LastIndexByte(user, ':')+1:]
	case strings.HasPrefix(user, "system:"):
		return strings.TrimPrefix(user, "system:")
	}
	return user
}

// rvCount counts things in English: "1 user", "2 users".
func rvCount(n int, thing string) string {
	return strconv.Itoa(n) + " " + detect.Plural(n, thing, thing+"s")
}

// evidenceTarget names what an evidence event touched.
func evidenceTarget(e detect.Evidence) string {
	o := detect.Object{Resource: e.Resource, Namespace: e.Namespace, Name: e.Name}
	if e.Name == "" {
		if e.Namespace == "" {
			return e.Resource
		}
		return e.Resource + " in " + e.Namespace
	}
	return o.String()
}
