package watchloop

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
)

// Name is the name of the watch-loop detector.
const Name = "watch-loop"

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

// Config holds the watch-loop detector's parameters. Zero fields
// take the defaults, which hold at real time scales (client-go restarts a
// watch every 5–10 minutes, loops run for days, Endpoints stay missing for
// minutes) and at compressed test scales (restarts every 10–25 seconds).
type Config struct {
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
	// MinRestarts is the fewest watch restarts from stale
	// resourceVersions that make a loop (default 3).
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

func (c *Config) setDefaults() {
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
		c.MaxEvidence = detect.DefaultMaxEvidence
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
// as nothing newer lands at the end of the Services event stream. Each
// other early Service deleted meanwhile moves the resume point to its own
// old resourceVersion: X drifts, far behind the store, and it is still
// one loop.
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
//     balancer's source NAT or a leader change alters) restarted at least
//     MinRestarts successful watches from stale resourceVersions (see
//     account: from the first restart below the highest it resumed from
//     since its last relist, every restart at or below it, until it
//     relists or resumes from above), failed watches not counted;
//   - the cluster demonstrably moved past the highest of them: some
//     request, at any time, showed a higher resourceVersion (etcd
//     revisions are global);
//   - after at least MinIterations of those restarts, and MinFollowedRatio
//     of them, within FollowWithin, the same program deleted Endpoints that
//     no create or delete of their Service explains (a Service write
//     explains only the Endpoints writes within ReactionWithin after it).
//
// Once a loop is declared it is remembered (with a StateStore: see
// EvaluateState): further restarts of the loop, from whichever stale
// resourceVersion, extend the same finding (one per reflector), its
// counts add up over days, and a window that shows only some of it does
// not lose it.
type WatchLoop struct{ cfg Config }

// New returns the detector with cfg's parameters.
func New(cfg Config) *WatchLoop {
	cfg.setDefaults()
	return &WatchLoop{cfg: cfg}
}

// Name implements Detector.
func (d *WatchLoop) Name() string { return Name }

// Config returns the parameters in effect.
func (d *WatchLoop) Config() Config { return d.cfg }

func (d *WatchLoop) deleteRole() string { return d.cfg.ChurnResource + "-delete" }
func (d *WatchLoop) createRole() string { return d.cfg.ChurnResource + "-create" }

// candidate is a reflector that may be looping, as far as this window and
// the remembered history show.
type candidate struct {
	events.WatchGroup
	burstOf []int // restart (burst) index of each watch; -1 for a relist
	starts  []int // index of the first watch of each burst
	deletes []attributed
	hist    *history     // remembered history, nil when there is none
	inLoop  map[int]bool // bursts that are restarts of the loop
	// replayable marks the watches that can replay history
	// (markReplayable).
	replayable []bool
}

// markReplayable marks the restarts that can replay history: from a
// resourceVersion at or below the highest its client resumed from since
// its last relist, or one the walk cannot place (the client's first since
// the walk began, or one an earlier evaluation walked). A restart from
// above, or the first after a relist, resumes from a fresh
// resourceVersion and replays nothing: churn after it follows something
// else (on a busy program, its other clients' restarts come every few
// seconds).
func (c *candidate) markReplayable() {
	c.replayable = make([]bool, len(c.Watches))
	high, listed := map[string]uint64{}, map[string]bool{}
	var walked time.Time
	if c.hist != nil {
		walked = c.hist.CountedUntil
		for a, st := range c.hist.Streams {
			high[a], listed[a] = st.High, st.Listed
		}
	}
	for i, ws := range c.Watches {
		if !walked.IsZero() && !ws.Time.After(walked) {
			c.replayable[i] = true
			continue
		}
		if ws.Relist {
			high[ws.Agent], listed[ws.Agent] = 0, true
			continue
		}
		rv, err := strconv.ParseUint(ws.RV, 10, 64)
		if err != nil || rv == 0 {
			continue
		}
		h := high[ws.Agent]
		c.replayable[i] = h == 0 && !listed[ws.Agent] || h > 0 && rv <= h
		high[ws.Agent] = max(h, rv)
	}
}

// attributed is a churned delete and the watch restart it followed.
type attributed struct {
	watch  int // index into Watches
	del    events.Row
	create *events.Row // the re-create within PairWithin, when seen
}

// Evaluate implements Detector: one window, nothing remembered.
func (d *WatchLoop) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: the window, added to what earlier
// evaluations remembered in st (nil: nothing).
func (d *WatchLoop) EvaluateState(ctx context.Context, q detect.Querier, st detect.StateStore, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	mem, err := d.load(ctx, st, w)
	if err != nil {
		return nil, err
	}
	groups, err := events.SelectWatchGroups(ctx, q, w, d.cfg.Resources, d.cfg.MinRestarts-1, d.cfg.RetrySpacing, mem.keys())
	if err != nil {
		return nil, err
	}
	var cands []*candidate
	clusters := map[string]bool{}
	for _, g := range groups {
		c := &candidate{WatchGroup: g, hist: mem.hists[g.Key()]}
		c.burstOf, c.starts = restarts(g.Watches, d.cfg.RetrySpacing)
		c.markReplayable()
		if len(c.starts) == 0 && c.hist == nil {
			continue
		}
		cands = append(cands, c)
		clusters[g.Cluster] = true
	}
	if len(cands) == 0 {
		return nil, nil
	}
	cw := w
	cw.Clusters = slices.Sorted(maps.Keys(clusters))
	churn, err := d.selectChurn(ctx, q, cw, cands)
	if err != nil {
		return nil, err
	}
	d.attribute(cands, churn)

	settled := w.Until.Add(-d.cfg.Settle)
	var out []detect.Finding
	var save []*history
	for _, c := range cands {
		tot, changed := d.account(c, settled)
		loop := tot.Confirmed || tot.Restarts >= d.cfg.MinRestarts && tot.Iterations >= d.cfg.MinIterations &&
			float64(tot.Iterations) >= d.cfg.MinFollowedRatio*float64(tot.Restarts)
		if loop && len(c.inLoop) > 0 {
			top := tot.maxStaleRV()
			known := tot.Advance
			if above, ok := detect.CompareRV(known.rv(), top); !ok || above <= 0 {
				known = nil // the loop drifted up past the proof
			}
			adv, err := mem.advance(ctx, q, w, c.Cluster, top, known)
			if err != nil {
				return nil, err
			}
			if adv != nil {
				if !c.hist.Confirmed || c.hist.Advance.rv() != adv.RV {
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

// restarts splits a reflector's requests (by time) into restarts: a watch
// from the same resourceVersion less than spacing after the one before is
// a quick retry of it, not a new restart; a relist is none. It returns
// the restart index of each request (-1 for a relist) and the first
// request of each restart.
func restarts(ws []events.WatchStart, spacing time.Duration) (burstOf, starts []int) {
	burstOf = make([]int, len(ws))
	last := -1 // the previous watch
	for i, w := range ws {
		if w.Relist {
			burstOf[i] = -1
			last = -1
			continue
		}
		if last >= 0 && w.RV == ws[last].RV && w.Time.Sub(ws[last].Time) < spacing {
			burstOf[i] = burstOf[last]
		} else {
			burstOf[i] = len(starts)
			starts = append(starts, i)
		}
		last = i
	}
	return burstOf, starts
}

// followedBursts returns the bursts of c that churn followed.
func (c *candidate) followedBursts() map[int]bool {
	seen := map[int]bool{}
	for _, a := range c.deletes {
		seen[c.burstOf[a.watch]] = true
	}
	return seen
}

// account walks the window's requests of c after what its remembered
// history walked, in time order: requests up to settled are added to the
// history (changed reports that it did), the younger ones only to the
// totals returned for this evaluation, because the churn that follows
// them may still be on its way.
//
// The walk follows the mechanism. A reflector resumes each watch from the
// resourceVersion of the last event it received, so a healthy one
// resumes from ever higher ones, or from the same one while nothing
// happens; a relist starts it over. A restart from below the highest
// resourceVersion it resumed from since its last relist went back: an
// event carried an old resourceVersion, and the episode of a loop
// begins. A restart churn followed from a resourceVersion it had already
// used (or the walk does not know: the window began mid-loop) begins one
// too. While an episode runs, every restart from a stale resourceVersion
// (at or below the highest) is one of the loop's, whichever one: others'
// deletes move the resume point to each deleted object's old
// resourceVersion, so it drifts. An episode ends when the reflector
// relists or resumes from above the highest; earlier restarts that merely
// share a number with the loop's are never counted.
func (d *WatchLoop) account(c *candidate, settled time.Time) (tot history, changed bool) {
	if c.hist == nil {
		c.hist = newHistory(c.WatchGroup)
	}
	h := c.hist
	walked := h.CountedUntil
	followed := c.followedBursts()
	c.inLoop = map[int]bool{}
	counted := map[int]bool{} // bursts counted by this walk
	step := func(t *history, i int) {
		ws := c.Watches[i]
		first := t.CountedUntil.IsZero() || t.Streams[ws.Agent] == nil // the walk's first request of the client
		retry := ws.RV == t.LastRV && !first && ws.Time.Sub(t.CountedUntil) < d.cfg.RetrySpacing
		if ws.Time.After(t.CountedUntil) {
			t.CountedUntil = ws.Time
		}
		t.LastRV = ws.RV
		st := t.stream(ws.Agent)
		if ws.Relist {
			endEpisode(st)
			*st = stream{Listed: true}
			t.LastRV = ""
			return
		}
		b := c.burstOf[i]
		if c.starts[b] != i || retry {
			return // a quick retry of a restart already walked
		}
		rv, err := strconv.ParseUint(ws.RV, 10, 64)
		if err != nil || rv == 0 {
			return // not an etcd revision: nothing to compare
		}
		fol := followed[b]
		known := st.High > 0
		stale := known && rv <= st.High
		back := known && rv < st.High
		if rv > st.High {
			st.High = rv
		}
		lead := st.Lead
		st.Lead = nil
		switch {
		case back:
			// Went back: the loop's, without doubt. Restarts held back
			// before it, from the resourceVersion it went back from,
			// are not: that one was the reflector's own.
			endEpisode(st)
			st.InLoop = true
		case fol && (stale || !known && !st.Listed):
			if !st.InLoop {
				// Churn began it: held back until it shows enough.
				st.InLoop, st.Held = true, true
				st.Pending, st.pendingBursts = nil, nil
				if lead != nil && lead.RV == ws.RV {
					st.Pending = append(st.Pending, pendingRestarts{RV: lead.RV, First: lead.First, Last: lead.Last, N: lead.Restarts})
					for lb, li := range c.starts {
						if lt := c.Watches[li].Time; c.Watches[li].RV == ws.RV && !lt.Before(lead.First) && !lt.After(lead.Last) {
							st.pendingBursts = append(st.pendingBursts, lb)
						}
					}
				}
			}
		case !stale && known:
			endEpisode(st)
			return
		case !st.InLoop:
			// Not a loop's restart, as far as the walk knows: but the
			// run of restarts from the resourceVersion the walk began
			// with is the loop's when churn follows it later.
			if first && !known || lead != nil && lead.RV == ws.RV {
				if lead == nil {
					lead = &detect.StaleRV{RV: ws.RV, First: ws.Time}
				}
				lead.Last = ws.Time
				lead.Restarts++
				st.Lead = lead
			}
			return
		}
		p := pendingRestarts{RV: ws.RV, First: ws.Time, Last: ws.Time, N: 1}
		if fol {
			p.Iterations, p.LastChurned = 1, ws.Time
		}
		if !st.Held {
			t.add(p)
			counted[b] = true
			return
		}
		if len(st.Pending) < maxPending {
			st.Pending = append(st.Pending, p)
			st.pendingBursts = append(st.pendingBursts, b)
		}
		if d.qualifies(t) {
			for _, o := range t.Streams {
				if o.Held {
					d.commit(t, o, counted)
				}
			}
		}
	}
	i := 0
	for ; i < len(c.Watches); i++ {
		ws := c.Watches[i]
		if !walked.IsZero() && !ws.Time.After(walked) {
			continue // walked by an earlier evaluation
		}
		if ws.Time.After(settled) {
			break
		}
		step(h, i)
		changed = true
	}
	tot = h.clone()
	for ; i < len(c.Watches); i++ {
		if walked.IsZero() || c.Watches[i].Time.After(walked) {
			step(&tot, i)
		}
	}
	// The loop's restarts in this window: those the walk counted, and
	// those an earlier evaluation did (from one of its stale
	// resourceVersions, after it began).
	staleRV := map[string]bool{}
	for _, s := range tot.StaleRVs {
		staleRV[s.RV] = true
	}
	for b, i := range c.starts {
		ws := c.Watches[i]
		if counted[b] || !walked.IsZero() && !ws.Time.After(walked) && !tot.FirstSeen.IsZero() &&
			!ws.Time.Before(tot.FirstSeen) && staleRV[ws.RV] {
			c.inLoop[b] = true
		}
	}
	for _, a := range c.deletes {
		if !c.inLoop[c.burstOf[a.watch]] {
			continue
		}
		for _, target := range []*history{h, &tot} {
			if target == h && (detect.Micros(a.del.TS).After(settled) || c.Watches[a.watch].Time.After(settled)) {
				continue
			}
			o := detect.Object{Resource: a.del.Resource, Namespace: a.del.Namespace, Name: a.del.Name}
			if !slices.Contains(target.Victims, o) && len(target.Victims) < maxVictims {
				target.Victims = append(target.Victims, o)
				slices.SortFunc(target.Victims, detect.CompareObjects)
				if target == h {
					changed = true
				}
			}
		}
	}
	tot.UserAgent, tot.SourceIPs = c.UserAgent, detect.MergeStrings(tot.SourceIPs, c.SourceIPs)
	if !slices.Equal(h.SourceIPs, tot.SourceIPs) || h.UserAgent != c.UserAgent {
		h.UserAgent, h.SourceIPs = tot.UserAgent, tot.SourceIPs
		changed = true
	}
	return tot, changed
}

// add counts restarts of the loop in the history.
func (h *history) add(p pendingRestarts) {
	h.Restarts += p.N
	if p.Iterations > 0 {
		h.Iterations += p.Iterations
		if p.LastChurned.After(h.LastIteration) {
			h.LastIteration = p.LastChurned
		}
	}
	if h.FirstSeen.IsZero() || p.First.Before(h.FirstSeen) {
		h.FirstSeen = p.First
	}
	if p.Last.After(h.LastSeen) {
		h.LastSeen = p.Last
	}
	h.stale(p.RV, p.First, p.Last, p.N)
}

// qualifies reports whether the restarts a history's clients hold back
// show a loop on their own (together: a leader change or source NAT may
// split one reflector's restarts between user agents).
func (d *WatchLoop) qualifies(h *history) bool {
	n, it := 0, 0
	for _, st := range h.Streams {
		if !st.Held {
			continue
		}
		for _, p := range st.Pending {
			n, it = n+p.N, it+p.Iterations
		}
	}
	return n >= d.cfg.MinRestarts && it >= d.cfg.MinIterations && float64(it) >= d.cfg.MinFollowedRatio*float64(n)
}

// commit adds a stream's held-back restarts to the history: from now on
// its episode counts as it goes.
func (d *WatchLoop) commit(h *history, st *stream, counted map[int]bool) {
	for _, p := range st.Pending {
		h.add(p)
	}
	for _, b := range st.pendingBursts {
		counted[b] = true
	}
	st.Pending, st.pendingBursts, st.Held = nil, nil, false
}

// endEpisode ends a stream's episode; what it held back is forgotten.
func endEpisode(st *stream) {
	st.InLoop, st.Held = false, false
	st.Pending, st.pendingBursts = nil, nil
}

// maxVictims bounds the objects a history remembers.
const maxVictims = 200
