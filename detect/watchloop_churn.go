package detect

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/auditlens/auditlens/store"
)

// The symptom side of the watch loop: deletes (and the re-creates after
// them) of the churn resource that no write of their owner explains, and
// which restart each followed.

// churnSQL selects the successful deletes and creates of the churn
// resource, one row per request (a request's stages share its audit ID;
// only ResponseComplete carries a code, and duplicates are identical).
// Ties in time (second-precision timestamps of 1.8-era logs) put a delete
// before a create.
const churnSQL = `SELECT ` + eventColumns + `
FROM audit_events
WHERE %WINDOW% AND resource = {churn:String} AND api_group = '' AND subresource = ''
  AND verb IN ('delete', 'create') AND code >= 200 AND code < 300%IGNORED%
ORDER BY cluster, namespace, name, ts, verb = 'create', audit_id
LIMIT 1 BY cluster, audit_id`

// ownerWritesSQL selects the creates and deletes of the owner resource
// from ReactionWithin before the window, one row per request, with the
// time it was made. A write counts unless it failed: without a status (a
// policy that records only RequestReceived) it may have succeeded, and an
// explained write must never be blamed on a loop. An owner written
// without a recorded name (generateName, or a policy that omits it)
// explains its whole namespace.
const ownerWritesSQL = `SELECT cluster, namespace, name, min(toUnixTimestamp64Micro(if(received_at > toDateTime64(0, 6, 'UTC'), least(received_at, ts), ts))) AS t
FROM audit_events
WHERE %WINDOW% AND resource = {owner:String} AND api_group = '' AND subresource = ''
  AND verb IN ('delete', 'create', 'deletecollection')
GROUP BY cluster, audit_id, namespace, name
HAVING max(code) = 0 OR (max(code) >= 200 AND max(code) < 300)
ORDER BY cluster, namespace, name, t`

type ownerWrite struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	T         int64  `json:"t"`
}

// churn is the window's churn-resource writes, by cluster, with what
// explains them.
type churn struct {
	events map[string][]eventRow // by cluster, ordered by object and time
	owners map[string][]ownerWrite
}

func (d *WatchLoop) selectChurn(ctx context.Context, q Querier, w Window) (churn, error) {
	c := churn{events: map[string][]eventRow{}, owners: map[string][]ownerWrite{}}
	p := store.Params{"churn": stringParam(d.cfg.ChurnResource), "owner": stringParam(d.cfg.OwnerResource)}
	ignored := ""
	if len(d.cfg.IgnoreChurnBy) > 0 {
		p["ignored"] = arrayParam(d.cfg.IgnoreChurnBy)
		ignored = " AND user NOT IN {ignored:Array(String)}"
	}
	sql := strings.Replace(strings.Replace(churnSQL, "%WINDOW%", windowParams(w, p), 1), "%IGNORED%", ignored, 1)
	err := selectRows(ctx, q, d.cfg.ChurnResource+" deletes and creates", sql, p, func(r eventRow) error {
		c.events[r.Cluster] = append(c.events[r.Cluster], r)
		return nil
	})
	if err != nil {
		return c, err
	}
	// Owner writes from ReactionWithin before the window: they explain
	// churn writes at its start.
	ow := w
	ow.Since = w.Since.Add(-d.cfg.ReactionWithin)
	po := store.Params{"owner": stringParam(d.cfg.OwnerResource)}
	err = selectRows(ctx, q, d.cfg.OwnerResource+" creates and deletes", strings.Replace(ownerWritesSQL, "%WINDOW%", windowParams(ow, po), 1), po,
		func(r ownerWrite) error {
			c.owners[r.Cluster] = append(c.owners[r.Cluster], r)
			return nil
		})
	return c, err
}

// ownerSkew is how much earlier than its owner's write a churn write may
// be stamped and still be its reaction: times of different requests are
// taken at different points of their handling, and 1.8-era logs have
// whole seconds.
const ownerSkew = time.Second

// explained reports whether a write of the object's owner explains the
// churn write e: a create or delete of the same namespace and name (or of
// a name the log does not record) at most ReactionWithin before it.
func (d *WatchLoop) explained(owners []ownerWrite, e eventRow) bool {
	t := e.requested()
	// owners are ordered by namespace, name and time.
	for _, name := range []string{e.Name, ""} {
		i, _ := slices.BinarySearchFunc(owners, ownerWrite{Namespace: e.Namespace, Name: name}, func(a, b ownerWrite) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		for ; i < len(owners) && owners[i].Namespace == e.Namespace && owners[i].Name == name; i++ {
			o := micros(owners[i].T)
			if !t.Before(o.Add(-ownerSkew)) && t.Sub(o) <= d.cfg.ReactionWithin {
				return true
			}
		}
	}
	return false
}

// requested is when the request was made.
func (e eventRow) requested() time.Time {
	t := e.TS
	if e.Received > 0 && e.Received < t {
		t = e.Received
	}
	return micros(t)
}

// attribute gives each unexplained delete to the watch restart it
// followed: among the restarts of every candidate of the cluster within
// FollowWithin before it, the latest one of the program that wrote the
// delete (the endpoints controller runs in the program whose informer
// replays; see sameProgram). When the log cannot say which program wrote
// it, the latest restart of any candidate. A delete by a program whose
// reflector did not restart (a user, a janitor) follows nothing. The
// re-create of the same object within PairWithin, unless explained, is
// its pair.
func (d *WatchLoop) attribute(cands []*candidate, ch churn) {
	type ref struct {
		t     time.Time
		cand  int
		watch int
	}
	byCluster := map[string][]ref{}
	for ci, c := range cands {
		for _, wi := range c.starts {
			byCluster[c.Cluster] = append(byCluster[c.Cluster], ref{c.Watches[wi].Time, ci, wi})
		}
	}
	for cluster, refs := range byCluster {
		slices.SortStableFunc(refs, func(a, b ref) int { return a.t.Compare(b.t) })
		events, owners := ch.events[cluster], ch.owners[cluster]
		for i, e := range events {
			if e.Verb != "delete" || e.Name == "" || d.explained(owners, e) {
				continue
			}
			del := e.requested()
			last := sort.Search(len(refs), func(i int) bool { return refs[i].t.After(del) }) - 1
			pick, unknown := -1, -1
			for j := last; j >= 0 && del.Sub(refs[j].t) <= d.cfg.FollowWithin; j-- {
				switch sameProgram(cands[refs[j].cand].watchGroup, e) {
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
				if n.Namespace != e.Namespace || n.Name != e.Name || n.requested().Sub(del) > d.cfg.PairWithin {
					break
				}
				if n.Verb == "create" {
					if !d.explained(owners, n) {
						a.create = &n
					}
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
func sameProgram(g watchGroup, e eventRow) programMatch {
	switch {
	case g.UserAgent != "" && e.UserAgent != "":
		if g.Program == programName(e.UserAgent, e.User) {
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
