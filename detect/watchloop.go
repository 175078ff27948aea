package detect

import (
	"context"
	"slices"
	"strconv"
	"time"
)

// WatchLoopName is the name of the watch-loop detector.
const WatchLoopName = "watch-loop"

// Evidence roles of watch-loop findings.
const (
	// RoleStaticWatch is a watch the reflector started from the static
	// resourceVersion.
	RoleStaticWatch = "static-watch"
	// RoleRVAdvanced is an event showing the cluster at a higher
	// resourceVersion than the static one (resourceVersions are etcd
	// revisions, global to the cluster): any client's watch or list from
	// a higher one, or a write that carried one.
	RoleRVAdvanced = "rv-advanced"
)

// WatchLoopConfig holds the watch-loop detector's parameters. Zero fields
// take the defaults, which hold at real time scales (client-go restarts a
// watch every 5–10 minutes, loops run for days, Endpoints stay missing for
// minutes) and at compressed test scales (restarts every 10–25 seconds).
type WatchLoopConfig struct {
	// Resources are the watched resources whose loop the detector looks
	// for (default: services). The Endpoints churn of the incident comes
	// from a loop on Services; the same loop on ConfigMaps or Secrets
	// leaves no churn in the audit log to prove it.
	Resources []string
	// ChurnResource is the resource whose deletes (and the re-creates
	// after them) are the symptom (default: endpoints). OwnerResource is
	// the resource of the same namespace/name whose create or delete
	// explains a churn write that follows it within ReactionWithin
	// (default: services).
	ChurnResource, OwnerResource string
	// MinRestarts is the fewest watch restarts from one resourceVersion
	// that count as "re-watching from a static resourceVersion" (default 3).
	MinRestarts int
	// RetrySpacing: a watch started less than this after the previous
	// watch from the same resourceVersion is a quick retry, counted with
	// it as one restart (default 5s).
	RetrySpacing time.Duration
	// FollowWithin is how soon after a watch restart a delete counts as
	// following it (default 30s). The replay reaches the reflector as soon
	// as its watch starts; a real endpoints controller acted 10–30 ms
	// later.
	FollowWithin time.Duration
	// ReactionWithin is how long after a create or delete of a Service
	// the endpoints controller's write of that Service's Endpoints is its
	// reaction, explained and never churn (default 10s). A Service write
	// explains nothing later: the replay after each of the static
	// watcher's restarts, minutes later, is not a reaction to it.
	ReactionWithin time.Duration
	// PairWithin is the longest time from a churned delete to the
	// re-create of the same object that is shown as its pair (default
	// 30m: in the seed, Endpoints stayed missing for up to tens of
	// minutes). A delete is churn whether or not its re-create is seen.
	PairWithin time.Duration
	// MinIterations is the fewest restarts followed by churn that make a
	// loop (default 2).
	MinIterations int
	// MinFollowedRatio is the least share of the reflector's restarts
	// that must be followed by churn before a loop is declared (default
	// 0.5). Once declared, a loop stays one finding while its restarts
	// from the static resourceVersion go on.
	MinFollowedRatio float64
	// IgnoreChurnBy lists users whose writes are never the symptom
	// (default: system:apiserver, whose endpoint reconciler rewrites
	// default/kubernetes at start-up).
	IgnoreChurnBy []string
	// Settle: restarts younger than this at the window's end are counted
	// for this evaluation only, not yet remembered, because the churn that
	// follows them may still be on its way (webhook batches wait up to
	// 30 s; retries take longer) (default 2m).
	Settle time.Duration
	// Remember is how long a reflector's history is kept after its last
	// restart from the static resourceVersion (default 7 days).
	Remember time.Duration
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *WatchLoopConfig) setDefaults() {
	if len(c.Resources) == 0 {
		c.Resources = []string{"services"}
	}
	if c.ChurnResource == "" {
		c.ChurnResource = "endpoints"
	}
	if c.OwnerResource == "" {
		c.OwnerResource = "services"
	}
	if c.MinRestarts <= 0 {
		c.MinRestarts = 3
	}
	if c.RetrySpacing <= 0 {
		c.RetrySpacing = 5 * time.Second
	}
	if c.FollowWithin <= 0 {
		c.FollowWithin = 30 * time.Second
	}
	if c.ReactionWithin <= 0 {
		c.ReactionWithin = 10 * time.Second
	}
	if c.PairWithin <= 0 {
		c.PairWithin = 30 * time.Minute
	}
	if c.MinIterations <= 0 {
		c.MinIterations = 2
	}
	if c.MinFollowedRatio <= 0 {
		c.MinFollowedRatio = 0.5
	}
	if c.IgnoreChurnBy == nil {
		c.IgnoreChurnBy = []string{"system:apiserver"}
	}
	if c.Settle <= 0 {
		c.Settle = 2 * time.Minute
	}
	if c.Remember <= 0 {
		c.Remember = 7 * 24 * time.Hour
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = DefaultMaxEvidence
	}
}

// WatchLoop detects the static-resourceVersion watch loop behind vanishing
// Endpoints (DOMAIN.md, seeds 000 and 001).
//
// The mechanism: a reflector resumes each watch from the resourceVersion
// of the last event it received. When that event carries an old
// resourceVersion X (the 1.7.0–1.9.2 watch cache sent DELETE events with
// the deleted object's old one), every restart replays the Services
// history since X: the program's cache drops Services that were deleted
// and re-created after X, and its endpoints controller deletes their
// Endpoints as orphans and re-creates them — at every restart, for as long
// as nothing newer lands at the end of the Services event stream.
//
// What it needs from the audit log: the reflector's watches of Services
// with their requestURI (Metadata level is enough: the resourceVersion is
// in the URI), the Endpoints deletes and creates with their response code,
// the Services creates and deletes (to tell a user's own re-create from
// churn), and any request that shows a resourceVersion past X.
//
// What it claims, when all of these hold:
//   - a reflector (one program's watch of Services: user, user-agent
//     product, namespace, selectors — not its address, which a load
//     balancer's source NAT or a leader change alters) started at least
//     MinRestarts successful watches from one resourceVersion X, watch-list
//     relists and failed watches not counted;
//   - the cluster demonstrably moved past X: some request, at any time,
//     showed a higher resourceVersion (etcd revisions are global);
//   - after at least MinIterations of those restarts, and MinFollowedRatio
//     of them, within FollowWithin, the same program deleted Endpoints that
//     no create or delete of their Service explains (a Service write
//     explains only the Endpoints writes within ReactionWithin after it).
//
// Once a loop is declared it is remembered (with a StateStore: see
// EvaluateState): further restarts from X extend the same finding, its
// counts add up over days, and a window that shows only some of it does
// not lose it.
type WatchLoop struct{ cfg WatchLoopConfig }

// NewWatchLoop returns the detector with cfg's parameters.
func NewWatchLoop(cfg WatchLoopConfig) *WatchLoop {
	cfg.setDefaults()
	return &WatchLoop{cfg: cfg}
}

// Name implements Detector.
func (d *WatchLoop) Name() string { return WatchLoopName }

// Config returns the parameters in effect.
func (d *WatchLoop) Config() WatchLoopConfig { return d.cfg }

func (d *WatchLoop) deleteRole() string { return d.cfg.ChurnResource + "-delete" }
func (d *WatchLoop) createRole() string { return d.cfg.ChurnResource + "-create" }

// candidate is a reflector re-watching from one resourceVersion, as far as
// this window and the remembered history show.
type candidate struct {
	watchGroup
	burstOf []int // restart (burst) index of each watch
	starts  []int // index of the first watch of each burst
	deletes []attributed
	hist    *history // remembered history, nil when there is none
}

// attributed is a churned delete and the watch restart it followed.
type attributed struct {
	watch  int // index into Watches
	del    eventRow
	create *eventRow // the re-create within PairWithin, when seen
}

// Evaluate implements Detector: one window, nothing remembered.
func (d *WatchLoop) Evaluate(ctx context.Context, q Querier, w Window) ([]Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: the window, added to what earlier
// evaluations remembered in st (nil: nothing).
func (d *WatchLoop) EvaluateState(ctx context.Context, q Querier, st StateStore, w Window) ([]Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	mem, err := d.load(ctx, st, w)
	if err != nil {
		return nil, err
	}
	groups, err := selectWatchGroups(ctx, q, w, d.cfg.Resources, d.cfg.MinRestarts, d.cfg.RetrySpacing, mem.keys())
	if err != nil {
		return nil, err
	}
	var cands []*candidate
	clusters := map[string]bool{}
	for _, g := range groups {
		c := &candidate{watchGroup: g, hist: mem.hists[g.key()]}
		times := make([]time.Time, len(g.Watches))
		for i, ws := range g.Watches {
			times[i] = ws.Time
		}
		var n int
		c.burstOf, n = bursts(times, d.cfg.RetrySpacing)
		c.starts = make([]int, 0, n)
		for i, b := range c.burstOf {
			if i == 0 || b != c.burstOf[i-1] {
				c.starts = append(c.starts, i)
			}
		}
		if n < d.cfg.MinRestarts && c.hist == nil {
			continue
		}
		cands = append(cands, c)
		clusters[g.Cluster] = true
	}
	if len(cands) == 0 {
		return nil, nil
	}
	cw := w
	cw.Clusters = sortedKeys(clusters)
	churn, err := d.selectChurn(ctx, q, cw, cands)
	if err != nil {
		return nil, err
	}
	d.attribute(cands, churn)

	settled := w.Until.Add(-d.cfg.Settle)
	var out []Finding
	var save []*history
	for _, c := range cands {
		tot, changed := d.account(c, settled)
		loop := tot.Confirmed || tot.Restarts >= d.cfg.MinRestarts && tot.Iterations >= d.cfg.MinIterations &&
			float64(tot.Iterations) >= d.cfg.MinFollowedRatio*float64(tot.Restarts)
		if loop {
			adv, err := mem.advance(ctx, q, w, c.Cluster, c.RV, tot.Advance)
			if err != nil {
				return nil, err
			}
			if adv != nil {
				if !c.hist.Confirmed || c.hist.Advance == nil {
					c.hist.Confirmed, c.hist.Advance = true, adv
					changed = true
				}
				tot.Confirmed, tot.Advance = true, adv
				hd, err := mem.apiservers(ctx, q, w, c.Cluster)
				if err != nil {
					return nil, err
				}
				f, err := d.finding(ctx, q, cw, c, tot, hd)
				if err != nil {
					return nil, err
				}
				out = append(out, f)
			}
		}
		if changed && (c.hist.Iterations > 0 || c.hist.Confirmed) {
			save = append(save, c.hist)
		}
	}
	if err := mem.save(ctx, st, save); err != nil {
		return nil, err
	}
	return out, nil
}

// followedBursts returns the bursts of c that churn followed.
func (c *candidate) followedBursts() map[int]bool {
	seen := map[int]bool{}
	for _, a := range c.deletes {
		seen[c.burstOf[a.watch]] = true
	}
	return seen
}

// account adds the window's restarts of c to its remembered history:
// restarts after what the history counted, up to settled, are added to it
// (changed reports that it grew); the younger ones only to the totals
// returned for this evaluation.
func (d *WatchLoop) account(c *candidate, settled time.Time) (tot history, changed bool) {
	if c.hist == nil {
		c.hist = newHistory(c.watchGroup)
	}
	h := c.hist
	followed := c.followedBursts()
	tot = h.clone()
	for b, i := range c.starts {
		t := c.Watches[i].Time
		if !h.CountedUntil.IsZero() && t.Sub(h.CountedUntil) < d.cfg.RetrySpacing {
			continue // counted by an earlier evaluation
		}
		for _, target := range []*history{h, &tot} {
			if target == h && t.After(settled) {
				continue
			}
			target.Restarts++
			if followed[b] {
				target.Iterations++
				target.LastIteration = t
			}
			if target.FirstSeen.IsZero() || t.Before(target.FirstSeen) {
				target.FirstSeen = t
			}
			if t.After(target.LastSeen) {
				target.LastSeen = t
			}
			if t.After(target.CountedUntil) {
				target.CountedUntil = t
			}
			if target == h {
				changed = true
			}
		}
	}
	for _, a := range c.deletes {
		for _, target := range []*history{h, &tot} {
			if target == h && micros(a.del.TS).After(settled) {
				continue
			}
			o := Object{Resource: a.del.Resource, Namespace: a.del.Namespace, Name: a.del.Name}
			if !slices.Contains(target.Victims, o) && len(target.Victims) < maxVictims {
				target.Victims = append(target.Victims, o)
				slices.SortFunc(target.Victims, compareObjects)
				if target == h {
					changed = true
				}
			}
		}
	}
	tot.UserAgent, tot.SourceIPs = c.UserAgent, mergeStrings(tot.SourceIPs, c.SourceIPs)
	if !slices.Equal(h.SourceIPs, tot.SourceIPs) || h.UserAgent != c.UserAgent {
		h.UserAgent, h.SourceIPs = tot.UserAgent, tot.SourceIPs
		changed = true
	}
	return tot, changed
}

// maxVictims bounds the objects a history remembers.
const maxVictims = 200

func mergeStrings(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 16 {
		out = out[:16]
	}
	return out
}

func fmtRV(v uint64) string { return strconv.FormatUint(v, 10) }
