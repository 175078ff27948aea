package scenario

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// etcd restored from a snapshot (seed 003), and the look-alikes the
// rv-rollback detector must stay silent on.
//
// The model: the cluster hands out revisions at a steady rate (most
// writes are not in the trace: other namespaces, events). At the restore
// the apiservers go down; etcd comes back at the snapshot's revision S
// (S+N with --bump-revision N) and hands out revisions from there.
// Without bump, clients that hold resourceVersions above S keep watching
// from them: the apiserver answers 200 and the watch stays open, stale,
// until its timeout; they re-watch from the same resourceVersion until the
// head passes it or someone restarts them. kubelets' and the leader
// elections' Lease updates get 409 with the resourceVersion they held,
// then succeed after a re-read; kube-controller-manager's controllers act
// on their stale caches (Endpoints deleted, Pods created). With bump and
// --mark-compacted, every watch from an old resourceVersion ends at once
// (410 inside the stream) and the client relists.

// Restore is an etcd restore a trace holds.
type Restore struct {
	// At is when the apiservers served again.
	At time.Time
	// Before is the highest revision handed out before the restore; After
	// the new head as the log shows it (what the detector reports): the
	// highest resourceVersion writes showed within 5 s of the first write
	// after it.
	Before, After string
	// Bumped: restored with --bump-revision and --mark-compacted.
	Bumped bool
	// Stuck are the programs that watched from above the new head
	// (kube-controller-manager, kubelet, …), sorted.
	Stuck []string
	// Churned are the objects controllers created or deleted after it,
	// "resource namespace/name", sorted.
	Churned []string
}

// restoreStory is one restore's free parameters (or a control's).
type restoreStory struct {
	nodes int
	// age is the snapshot's age at the restore, by scale (real,
	// compressed): the restore distance is age × rate.
	age [2][2]time.Duration
	// rate is the revisions per second the cluster hands out, by scale.
	rate [2]float64
	// restore: the trace holds a restore (with bump when bump > 0);
	// restart: the apiservers only restart.
	restore, restart bool
	bump             int64
	// full: writes and lists are logged at RequestResponse (their
	// responses carry resourceVersions); otherwise Metadata only.
	full bool
	// ha: two apiservers behind a load balancer; lag: the second one's
	// watch cache lags by up to lag revisions.
	ha  bool
	lag int64
	// restartAfter: programs restarted (they relist) this long after the
	// restore, in restart periods; the others stay until the head passes
	// their resourceVersion.
	restartAfter map[string]float64
	// churn: kube-controller-manager's controllers act on stale caches
	// after a restore without bump.
	churn bool
	// r0 is the revision at the start; newCluster starts near 1 with
	// everyone listing.
	r0         int64
	newCluster bool
	// idle: no Lease updates in the log (the policy drops them), writes
	// are rare and an admin edits long-unchanged ConfigMaps.
	idle bool
	// liar: one client asks to watch from a made-up resourceVersion far
	// above the head, again and again.
	liar bool
	// down bounds how long the apiservers are down at the real scale
	// (default 40–90 s; 4–12 s compressed).
	down [2]time.Duration
}

var restoreScenarios = []Scenario{
	{
		Name: "etcd-restore",
		Doc: "Kubernetes 1.37, 5 nodes: etcd is restored from a snapshot 1–3 days old (real scale; 3–6 minutes compressed) " +
			"without --bump-revision, the apiserver down for a minute. Writes are logged at RequestResponse. Every " +
			"reflector that held a resourceVersion above the snapshot's watches from it again (200, stale until its " +
			"timeout) and keeps doing so; kube-scheduler is restarted after 2 restart periods and relists; the kubelets' " +
			"and the leader elections' Lease updates get 409, re-read and succeed with lower resourceVersions; " +
			"kube-controller-manager's controllers delete Endpoints and create Pods from their stale caches. Expect " +
			"one critical rv-rollback finding with the resourceVersions before and after, the stuck programs, the 409s " +
			"and the churned objects.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 5, restore: true, full: true, churn: true,
				age:          [2][2]time.Duration{{24 * time.Hour, 72 * time.Hour}, {3 * time.Minute, 6 * time.Minute}},
				rate:         [2]float64{40, 4},
				restartAfter: map[string]float64{"kube-scheduler": 2}})
		},
	},
	{
		Name: "etcd-restore-metadata",
		Doc: "The restore without bump in a cluster whose policy logs everything at Metadata (no response objects): " +
			"the head shows only in the resourceVersions updates carry (objectRef) and in watch and list requests. " +
			"The snapshot is minutes old (a few hundred to a few thousand revisions). kube-proxy and the calico-node agents stay " +
			"stuck; kube-controller-manager is restarted after 3 restart periods. Expect one critical rv-rollback " +
			"finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 4, restore: true, churn: true,
				age:          [2][2]time.Duration{{20 * time.Minute, 90 * time.Minute}, {3 * time.Minute, 5 * time.Minute}},
				rate:         [2]float64{3, 3},
				restartAfter: map[string]float64{"kube-controller-manager": 3}})
		},
	},
	{
		Name: "etcd-restore-ha",
		Doc: "The restore without bump behind two kube-apiservers (apiserver-a, apiserver-b; clients spread by " +
			"address), both restarted; snapshot hours old (real) or minutes (compressed), millions or thousands " +
			"of revisions at 300 revisions/s. Every program but the kubelets stays stuck. Expect one critical " +
			"rv-rollback finding, whether the logs are imported together or each under its apiserver.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 6, restore: true, full: true, ha: true, lag: 3, churn: true,
				age:  [2][2]time.Duration{{2 * time.Hour, 6 * time.Hour}, {2 * time.Minute, 4 * time.Minute}},
				rate: [2]float64{300, 30}})
		},
	},
	{
		Name: "etcd-restore-bump",
		Doc: "etcd restored the documented way: --bump-revision 1000000000 --mark-compacted. The head jumps up; " +
			"every watch from an old resourceVersion ends within 0.1 s (410 inside the stream) and its client relists; " +
			"Lease updates get 409 once and succeed after a re-read. Expect no critical finding: one info rv-rollback " +
			"finding that a restore happened.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 5, restore: true, bump: 1_000_000_000, full: true,
				age:  [2][2]time.Duration{{24 * time.Hour, 72 * time.Hour}, {3 * time.Minute, 6 * time.Minute}},
				rate: [2]float64{40, 4}})
		},
	},
	{
		Name: "etcd-restore-bump-metadata",
		Doc: "The documented restore (--bump-revision 1000000 --mark-compacted) in a Metadata-only cluster: the jump " +
			"shows in updates' objectRef resourceVersions and in the relisted clients' watches. Expect no critical " +
			"finding: at most an info rv-rollback finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 4, restore: true, bump: 1_000_000,
				age:  [2][2]time.Duration{{20 * time.Minute, 90 * time.Minute}, {3 * time.Minute, 5 * time.Minute}},
				rate: [2]float64{3, 3}})
		},
	},
	{
		Name: "apiserver-restart",
		Doc: "The apiserver restarts (down for 15–35 s) with etcd untouched: watches end, clients re-watch from the " +
			"resourceVersions they hold (some too old: a short watch and a relist), Lease updates go on. A kubelet that " +
			"last renewed just before the stop goes longer than 30 s without a renewal. Expect no rv-rollback finding, " +
			"and at most an information audit-feed gap from heartbeat-loss (when a kubelet went over 30 s), never a wave.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 5, restart: true, full: true, rate: [2]float64{40, 4},
				down: [2]time.Duration{15 * time.Second, 35 * time.Second}})
		},
	},
	{
		Name: "ha-lagging-cache",
		Doc: "Two kube-apiservers; apiserver-b's watch cache lags a few revisions behind, so lists and watches through " +
			"it show resourceVersions a little below what writes show. Expect no rv-rollback finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 6, full: true, ha: true, lag: 5, rate: [2]float64{300, 30}})
		},
	},
	{
		Name: "new-cluster",
		Doc: "A cluster created while the log runs: resourceVersions start near 1 and grow fast, every client lists " +
			"and watches for the first time. Expect no rv-rollback finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 3, full: true, newCluster: true, r0: 1, rate: [2]float64{60, 60}})
		},
	},
	{
		Name: "idle-cluster",
		Doc: "A near-idle cluster whose policy drops Lease updates: watches from resourceVersions that hardly change, " +
			"a write every few minutes, and an admin updating long-unchanged ConfigMaps (their objectRef " +
			"resourceVersions are millions below the head). Expect no rv-rollback finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 3, idle: true, rate: [2]float64{0.02, 0.05}})
		},
	},
	{
		Name: "future-rv-client",
		Doc: "One client keeps asking to watch from a made-up resourceVersion a billion above the head (the " +
			"apiserver answers 200 and the watch waits): one client's view proves nothing about the head. Expect no " +
			"rv-rollback finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: func(s *sim) {
			buildRestore(s, restoreStory{nodes: 3, full: true, liar: true, rate: [2]float64{40, 4}})
		},
	},
}

func init() {
	for _, sc := range restoreScenarios {
		sc.salted = true
		all = append(all, sc)
	}
}

// timeline hands out revisions: from r0 at rate, and after a restore
// from the snapshot's revision (plus the bump).
type timeline struct {
	s        *sim
	rate     float64
	r0       int64
	down, up time.Time // the restore or restart: apiservers down in [down, up)
	restored bool
	snap     int64 // the restore's snapshot revision, bump included
	// times are the writes a first run noted, by epoch (before and after
	// the restore); plan their revisions for the second run.
	times [2][]time.Time
	plan  *[2]map[writeKey]int64
	nth   [2]map[time.Time]int
}

func (tl *timeline) after(t time.Time) bool { return !tl.up.IsZero() && !t.Before(tl.up) }

func (tl *timeline) isDown(t time.Time) bool {
	return !tl.down.IsZero() && !t.Before(tl.down) && t.Before(tl.up)
}

// head is the newest revision at t.
func (tl *timeline) head(t time.Time) int64 {
	if tl.restored && tl.after(t) {
		return tl.snap + int64(t.Sub(tl.up).Seconds()*tl.rate)
	}
	return tl.r0 + int64(t.Sub(tl.s.t0).Seconds()*tl.rate)
}

// write hands out the revision of a write at t. The story is written
// client by client, not in time order, so a first run only notes when
// each write happens (plan is nil) and the second hands out revisions in
// time order (see assign): later writes get higher revisions, as etcd's.
func (tl *timeline) write(t time.Time) int64 {
	e := 0
	if tl.restored && tl.after(t) {
		e = 1
	}
	if tl.plan == nil {
		tl.times[e] = append(tl.times[e], t)
		return tl.head(t) + 1
	}
	k := writeKey{t, tl.nth[e][t]}
	tl.nth[e][t]++
	return tl.plan[e][k]
}

type writeKey struct {
	t time.Time
	n int
}

// assign plans the revisions of the writes a first run noted: in time
// order, each above the one before and above the head at its time.
func (tl *timeline) assign() [2]map[writeKey]int64 {
	var plan [2]map[writeKey]int64
	for e := range plan {
		plan[e] = map[writeKey]int64{}
		ts := slices.Clone(tl.times[e])
		slices.SortFunc(ts, time.Time.Compare)
		var prev int64
		n := map[time.Time]int{}
		for _, t := range ts {
			r := max(prev+1, tl.head(t)+1)
			plan[e][writeKey{t, n[t]}] = r
			n[t]++
			prev = r
		}
	}
	return plan
}

// restoreSim is the state of one restore story.
type restoreSim struct {
	*sim
	st    restoreStory
	tl    *timeline
	level auditv1.Level
	// shown are the writes after the restore that show the head (their
	// times and resourceVersions).
	shown   []shownRV
	stuck   map[string]bool
	churned []string
}

// shows notes a write that shows the head as the detector reads it.
func (r *restoreSim) shows(t time.Time, rv int64) {
	if !r.tl.restored || !r.tl.after(t) {
		return
	}
	r.shown = append(r.shown, shownRV{t, rv})
}

type shownRV struct {
	t  time.Time
	rv int64
}

// headAfter is the head after the restore as a reader of the log can know
// it: the highest resourceVersion the writes showed within 5 s (the
// detector's default bucket) of the first one. The first alone may be an
// old object's own resourceVersion (a Lease re-read from the snapshot).
func (r *restoreSim) headAfter() int64 {
	if len(r.shown) == 0 {
		return 0
	}
	first := r.shown[0].t
	for _, w := range r.shown {
		if w.t.Before(first) {
			first = w.t
		}
	}
	var top int64
	for _, w := range r.shown {
		if w.t.Sub(first) < 5*time.Second {
			top = max(top, w.rv)
		}
	}
	return top
}

func scaleIndex(sc Scale) int {
	if sc.Name == Real.Name {
		return 0
	}
	return 1
}

// buildRestore writes the story twice from the same seed: the first run
// notes when writes happen, the second gives them revisions in time order.
func buildRestore(s *sim, st restoreStory) {
	seed := s.rng.Uint64()
	probe := *s
	probe.events, probe.seen, probe.want = nil, map[reflectorKey]*rvSeen{}, Want{}
	probe.rng = rand.New(rand.NewPCG(seed, 0x7e570e))
	plan := runRestore(&probe, st, nil).assign()
	s.rng = rand.New(rand.NewPCG(seed, 0x7e570e))
	runRestore(s, st, &plan)
}

// runRestore writes the story; plan is nil in the first run.
func runRestore(s *sim, st restoreStory, plan *[2]map[writeKey]int64) *timeline {
	si := scaleIndex(s.scale)
	r := &restoreSim{sim: s, st: st, level: auditv1.LevelMetadata, stuck: map[string]bool{}}
	if st.full {
		r.level = auditv1.LevelRequestResponse
	}
	r0 := st.r0
	if r0 == 0 {
		r0 = 40_000_000 + s.rng.Int64N(5_000_000)
	}
	r.tl = &timeline{s: s, rate: st.rate[si], r0: r0, plan: plan, nth: [2]map[time.Time]int{{}, {}}}
	pre, post := 30*time.Minute, 60*time.Minute
	if si == 1 {
		pre, post = 2*time.Minute, 6*time.Minute
	}
	if st.idle {
		post *= 2
	}
	down := st.down
	if down[1] == 0 {
		down = [2]time.Duration{40 * time.Second, 90 * time.Second}
	}
	downtime := s.between(down[0], down[1])
	if si == 1 {
		downtime = s.between(4*time.Second, 12*time.Second)
	}
	if st.restore || st.restart {
		r.tl.down = s.at(pre)
		r.tl.up = r.tl.down.Add(downtime).Truncate(time.Millisecond)
		s.end = r.tl.up.Add(post)
	} else {
		s.end = s.at(pre + post)
	}
	var before int64
	if st.restore {
		r.tl.restored = true
		before = r.tl.head(r.tl.down)
		age := s.between(st.age[si][0], st.age[si][1])
		distance := int64(math.Round(age.Seconds() * r.tl.rate))
		r.tl.snap = before - distance + st.bump
	}
	if st.ha {
		s.servers = map[string]string{}
		s.route = func(c Client, _ time.Time) string {
			if n := len(c.SourceIP); n > 0 && (c.SourceIP[n-1]-'0')%2 == 1 {
				return "apiserver-b"
			}
			return "apiserver-a"
		}
	}

	// Leases: every kubelet's every 10 s, the leader elections' every 2 s.
	if !st.idle {
		for i := range st.nodes {
			r.leases(s.kubelet(i), "kube-node-lease", "node-"+strconv.Itoa(i), 10*time.Second, "kubelet")
		}
		r.leases(s.kcm(), "kube-system", "kube-controller-manager", 2*time.Second, "kube-controller-manager")
		r.leases(s.scheduler(), "kube-system", "kube-scheduler", 2*time.Second, "kube-scheduler")
	}
	r.writes()
	// Nothing at all is logged while the apiservers are down. When a
	// kubelet's renewals stop for more than the 30 s that make it lost
	// (its last before the stop, up to 10 s earlier, to its first after),
	// heartbeat-loss reports that silence as an audit-feed gap
	// (information), never as a wave; a shorter stop is nothing.
	if !r.tl.down.IsZero() && !st.idle && r.longestNodeGap() > 30*time.Second {
		s.want.HeartbeatWaves = append(s.want.HeartbeatWaves, HeartbeatWave{FeedGap: true, Start: r.tl.down, Until: r.tl.up})
	}

	// Reflectors.
	type refl struct {
		c        Client
		program  string
		res, ns  string
		fieldSel string
	}
	var refls []refl
	kcm, sched := s.kcm(), s.scheduler()
	for _, res := range []string{"services", "endpoints", "pods", "nodes", "deployments", "replicasets"} {
		refls = append(refls, refl{c: kcm, program: "kube-controller-manager", res: res})
	}
	refls = append(refls, refl{c: sched, program: "kube-scheduler", res: "pods"}, refl{c: sched, program: "kube-scheduler", res: "nodes"})
	for i := range st.nodes {
		kl, kp := s.kubelet(i), s.kubeProxy(i)
		refls = append(refls,
			refl{c: kl, program: "kubelet", res: "pods", fieldSel: "spec.nodeName%3Dnode-" + strconv.Itoa(i)},
			refl{c: kl, program: "kubelet", res: "configmaps", ns: "kube-system"},
			refl{c: kp, program: "kube-proxy", res: "services"},
			refl{c: kp, program: "kube-proxy", res: "endpointslices"})
		if i < 3 {
			cal := podClient("calico-system", "calico-node", "calico-node/v3.28.0 (linux/amd64) kubernetes/$Format", nodeIP(i))
			refls = append(refls, refl{c: cal, program: "calico-node", res: "pods"})
		}
	}
	for _, f := range refls {
		r.reflect(f.c, f.program, f.res, f.ns, f.fieldSel, st.newCluster)
	}
	if st.liar {
		c := podClient("tools", "poller", "poller/0.1", "10.244.7.7")
		for t := s.at(s.between(0, time.Minute)); t.Before(s.end); t = t.Add(s.between(s.scale.RestartMin, s.scale.RestartMax)) {
			rv := strconv.FormatInt(r.tl.head(t)+1_000_000_000, 10)
			to := s.between(s.scale.RestartMin, s.scale.RestartMax).Truncate(time.Second)
			s.watch(t, to, c, "configmaps", "tools", rv, 200)
		}
	}
	if st.idle {
		admin := s.admin()
		for k, t := 0, s.at(s.between(time.Minute, 3*time.Minute)); t.Before(s.end); k, t = k+1, t.Add(s.between(3*time.Minute, 9*time.Minute)) {
			name := "settings-" + strconv.Itoa(k%4)
			old := r0/2 - int64(k%4)*1000
			r.update(t, admin, "configmaps", "", "v1", "default", name, old, 200)
		}
	}
	if st.restore && !st.restart && st.bump == 0 && st.churn {
		r.staleControllers()
	}
	if st.restore {
		if plan != nil {
			for _, rv := range plan[0] {
				before = max(before, rv)
			}
		}
		rs := Restore{At: r.tl.up, Before: strconv.FormatInt(before, 10), After: strconv.FormatInt(r.headAfter(), 10),
			Bumped: st.bump > 0, Stuck: sortedSet(r.stuck), Churned: r.churned}
		slices.Sort(rs.Churned)
		rs.Churned = slices.Compact(rs.Churned)
		s.want.Restores = append(s.want.Restores, rs)
	}
	return r.tl
}

// longestNodeGap is the longest any kubelet went without a heartbeat
// across the apiservers' stop: from its last before the stop to its first
// after.
func (r *restoreSim) longestNodeGap() time.Duration {
	last, first := map[string]time.Time{}, map[string]time.Time{}
	for _, e := range r.sim.events {
		if e.Stage != auditv1.StageRequestReceived || !isHeartbeat(e) || !strings.HasPrefix(e.User.Username, "system:node:") {
			continue
		}
		t, u := e.RequestReceivedTimestamp.Time, e.User.Username
		switch {
		case t.Before(r.tl.down):
			last[u] = later(last[u], t)
		case !t.Before(r.tl.up) && (first[u].IsZero() || t.Before(first[u])):
			first[u] = t
		}
	}
	var longest time.Duration
	for u, l := range last {
		if f, ok := first[u]; ok {
			longest = max(longest, f.Sub(l))
		}
	}
	return longest
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// leases renews one Lease every period, with the resourceVersion the
// holder got from its last update; after a restore the first update gets
// 409, the holder re-reads and updates from the Lease's restored
// resourceVersion.
func (r *restoreSim) leases(c Client, ns, name string, period time.Duration, program string) {
	s := r.sim
	var held int64
	reread := false
	for t := s.t0.Add(s.between(0, period)); t.Before(s.end); t = t.Add(s.between(period-period/20, period+period/20)) {
		if r.tl.isDown(t) {
			continue
		}
		if held == 0 {
			held = r.tl.head(t.Add(-period)) - s.rng.Int64N(5)
		}
		if r.tl.after(t) && !reread && (r.st.restore || r.st.restart) {
			reread = true
			if r.st.restore {
				// The Lease in the restored etcd is the snapshot's: keys
				// keep their revisions, only the store's is bumped.
				stored := max(1, r.tl.snap-r.st.bump-int64(period.Seconds()*r.tl.rate)-s.rng.Int64N(3))
				r.update(t, c, "leases", "coordination.k8s.io", "v1", ns, name, held, 409)
				t = t.Add(s.between(3*time.Millisecond, 20*time.Millisecond))
				r.get(t, c, "leases", "coordination.k8s.io", ns, name, stored)
				t = t.Add(s.between(2*time.Millisecond, 10*time.Millisecond))
				held = stored
			}
		}
		held = r.update(t, c, "leases", "coordination.k8s.io", "v1", ns, name, held, 200)
	}
}

// update emits an update of an object the client holds at resourceVersion
// held (objectRef.resourceVersion, from the request body), answered with
// code; it returns the new resourceVersion (held when it failed).
func (r *restoreSim) update(t time.Time, c Client, res, group, version, ns, name string, held int64, code int32) int64 {
	s := r.sim
	lat := s.between(2*time.Millisecond, 12*time.Millisecond)
	ref := auditv1.ObjectReference{Resource: res, Namespace: ns, Name: name, APIGroup: group, APIVersion: version,
		UID: types.UID(s.uid(res + "/" + ns + "/" + name)), ResourceVersion: strconv.FormatInt(held, 10)}
	uri := "/api/" + version + "/namespaces/" + ns + "/" + res + "/" + name
	if group != "" {
		uri = "/apis/" + group + "/" + version + "/namespaces/" + ns + "/" + res + "/" + name
	}
	held = max(held, 1)
	ref.ResourceVersion = strconv.FormatInt(held, 10)
	req := request{c: c, verb: "update", uri: uri, ref: ref, level: r.level}
	rv := held
	if code == 200 {
		rv = r.tl.write(t.Add(lat))
		req.status = &metav1.Status{Code: 200}
		req.reqObj = metaJSON(res, ref.Namespace, name, held)
		req.respObj = metaJSON(res, ref.Namespace, name, rv)
		r.shows(t.Add(lat), max(rv*boolInt(r.st.full), held))
	} else {
		req.status = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonConflict,
			Message: fmt.Sprintf("Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", res, name),
			Details: &metav1.StatusDetails{Name: name, Kind: res}}
		req.reqObj = metaJSON(res, ref.Namespace, name, held)
		req.respObj = statusJSON(req.status)
	}
	s.do(t, lat, req)
	return rv
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (r *restoreSim) get(t time.Time, c Client, res, group, ns, name string, rv int64) {
	s := r.sim
	uri := "/apis/" + group + "/v1/namespaces/" + ns + "/" + res + "/" + name
	s.do(t, s.between(time.Millisecond, 5*time.Millisecond), request{c: c, verb: "get", uri: uri, level: r.level,
		ref:    auditv1.ObjectReference{Resource: res, Namespace: ns, Name: name, APIGroup: group, APIVersion: "v1"},
		status: &metav1.Status{Code: 200}, respObj: metaJSON(res, ns, name, rv)})
}

// create and remove emit a controller's create or delete of a Pod or
// Endpoints.
func (r *restoreSim) create(t time.Time, c Client, res resource, ns, name string) {
	s := r.sim
	lat := s.between(3*time.Millisecond, 20*time.Millisecond)
	rv := r.tl.write(t.Add(lat))
	req := request{c: c, verb: "create", uri: path(res.name, ns), level: r.level,
		ref:    auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIVersion: "v1"},
		status: &metav1.Status{Code: 201}, reqObj: metaJSON(res.name, ns, name, 0), respObj: metaJSON(res.name, ns, name, rv)}
	if r.st.full {
		r.shows(t.Add(lat), rv)
	}
	s.do(t, lat, req)
}

func (r *restoreSim) remove(t time.Time, c Client, res resource, ns, name string) {
	s := r.sim
	lat := s.between(3*time.Millisecond, 20*time.Millisecond)
	rv := r.tl.write(t.Add(lat))
	req := request{c: c, verb: "delete", uri: path(res.name, ns) + "/" + name, level: r.level,
		ref:    auditv1.ObjectReference{Resource: res.name, Namespace: ns, Name: name, APIVersion: "v1"},
		status: &metav1.Status{Status: metav1.StatusSuccess, Code: 200}, respObj: metaJSON(res.name, ns, name, rv)}
	if r.st.full {
		r.shows(t.Add(lat), rv)
	}
	s.do(t, lat, req)
}

// writes is the cluster's other logged writes: the ReplicaSet controller
// replacing worker Pods and the endpoints controller updating their
// Endpoints (idle: one every few minutes).
func (r *restoreSim) writes() {
	s := r.sim
	rs, epc := s.controllerSA("replicaset-controller"), s.endpointController()
	lo, hi := 3*time.Second, 9*time.Second
	if r.st.idle {
		lo, hi = 3*time.Minute, 8*time.Minute
	}
	var prev string
	var epRV int64
	for t := s.t0.Add(s.between(0, lo)); t.Before(s.end); t = t.Add(s.between(lo, hi)) {
		if r.tl.isDown(t) {
			continue
		}
		pod := "worker-" + s.suffix()
		r.create(t, rs, pods, "batch", pod)
		if prev != "" {
			r.remove(t.Add(s.between(500*time.Millisecond, 2*time.Second)), rs, pods, "batch", prev)
		}
		prev = pod
		if epRV == 0 || r.st.idle {
			epRV = r.tl.head(t) - s.rng.Int64N(20)
		}
		if r.tl.restored && r.tl.after(t) && epRV > r.tl.head(t) {
			epRV = r.tl.head(t) - s.rng.Int64N(20) // the controller re-read it after a conflict
		}
		epRV = r.update(t.Add(s.between(200*time.Millisecond, time.Second)), epc, "endpoints", "", "v1", "batch", "worker", epRV, 200)
	}
}

// staleControllers is kube-controller-manager acting on its stale caches
// after a restore without bump: the endpoints controller deletes the
// Endpoints of Services its cache no longer has and creates again those
// of a Service created after the snapshot (gone with the restore); the
// ReplicaSet controller creates Pods for a ReplicaSet created after the
// snapshot (new names: no object of before).
func (r *restoreSim) staleControllers() {
	s := r.sim
	epc, rs, admin := s.endpointController(), s.controllerSA("replicaset-controller"), s.admin()
	// A Service created between the snapshot and the restore.
	t := r.tl.down.Add(-s.between(20*time.Second, 40*time.Second))
	r.create(t, admin, services, "web", "checkout")
	r.create(t.Add(s.between(50*time.Millisecond, 500*time.Millisecond)), epc, endpoints, "web", "checkout")

	t = r.tl.up.Add(s.between(2*time.Second, 20*time.Second))
	n := 3 + s.rng.IntN(4)
	for i, svc := range clusterServices[1 : 1+n] {
		at := t.Add(time.Duration(i) * s.between(5*time.Millisecond, 200*time.Millisecond))
		r.remove(at, epc, endpoints, svc.ns, svc.name)
		r.churned = append(r.churned, "endpoints "+svc.ns+"/"+svc.name)
	}
	r.create(t.Add(s.between(300*time.Millisecond, time.Second)), epc, endpoints, "web", "checkout")
	r.churned = append(r.churned, "endpoints web/checkout")
	t = t.Add(s.between(time.Second, 10*time.Second))
	for range 2 + s.rng.IntN(3) {
		r.create(t, rs, pods, "web", "web-7d4b9c-"+s.suffix())
		t = t.Add(s.between(10*time.Millisecond, 500*time.Millisecond))
	}
}

// reflect runs one reflector: it lists once and watches back to back,
// each watch from the resourceVersion of the last event or bookmark it
// got. The apiservers' restart cuts its watch; after a restore without
// bump it watches again from the resourceVersion it held, above the new
// head, until the head passes it or its program is restarted; after a
// bump its watch ends at once and it relists.
func (r *restoreSim) reflect(c Client, program, res, ns, fieldSel string, listFirst bool) {
	s := r.sim
	lo, hi := s.scale.RestartMin, s.scale.RestartMax
	t := s.startup()
	if listFirst {
		t = s.t0.Add(s.between(0, 10*time.Second))
	}
	var rv int64
	relist := func(at time.Time) time.Time {
		head := r.list(at, c, res, ns, fieldSel)
		rv = head
		return at.Add(s.between(5*time.Millisecond, 50*time.Millisecond))
	}
	if listFirst {
		t = relist(t)
	}
	restarted := false
	var restartAt time.Time
	if k, ok := r.st.restartAfter[program]; ok && r.tl.restored {
		restartAt = r.tl.up.Add(time.Duration(k * float64(s.period())))
	}
	afterUp := false
	for t.Before(s.end) {
		if r.tl.isDown(t) {
			t = r.tl.up.Add(s.between(200*time.Millisecond, 3*time.Second))
			continue
		}
		if r.tl.after(t) && !afterUp {
			afterUp = true
			switch {
			case r.st.restore && r.st.bump > 0:
				// --mark-compacted: 410 inside the stream, at once.
				r.watch(t, s.between(20*time.Millisecond, 100*time.Millisecond), c, res, ns, fieldSel, rv)
				t = relist(t.Add(s.between(100*time.Millisecond, 1200*time.Millisecond)))
				continue
			case r.st.restart && s.rng.IntN(3) == 0:
				// Too old for the new watch cache: 410, relist.
				r.watch(t, s.between(5*time.Millisecond, 50*time.Millisecond), c, res, ns, fieldSel, rv)
				t = relist(t.Add(s.between(100*time.Millisecond, 1200*time.Millisecond)))
				continue
			}
		}
		if !restartAt.IsZero() && !restarted && !t.Before(restartAt) {
			restarted = true
			t = relist(restartAt.Add(s.between(2*time.Second, 10*time.Second)))
			continue
		}
		head := r.tl.head(t)
		if r.tl.restored && r.tl.after(t) && rv > head {
			// In the future: accepted, silent until the timeout.
			r.stuck[program] = true
		} else if !(r.st.idle && rv != 0) {
			// Resumes from a recent event or bookmark.
			rv = max(rv, r.tl.head(t.Add(-s.between(0, lo/2))))
			if r.tl.restored && r.tl.after(t) {
				rv = min(max(rv, r.tl.snap), head)
			}
		}
		if rv == 0 {
			rv = r.tl.head(t.Add(-s.between(0, lo/2)))
		}
		to := s.between(lo, hi).Truncate(time.Second)
		end := t.Add(to)
		if !r.tl.down.IsZero() && t.Before(r.tl.down) && end.After(r.tl.down) {
			end = r.tl.down
		}
		r.watch(t, end.Sub(t), c, res, ns, fieldSel, rv)
		t = end.Add(s.between(time.Millisecond, 150*time.Millisecond))
	}
}

// watch emits a watch from rv, through the apiserver whose cache may lag.
func (r *restoreSim) watch(t time.Time, d time.Duration, c Client, res, ns, fieldSel string, rv int64) {
	s := r.sim
	if head := r.tl.head(t); r.st.lag > 0 && r.lagging(c) && rv <= head {
		// A bookmark from a cache a few revisions behind.
		rv = min(rv, head-1-s.rng.Int64N(r.st.lag))
	}
	q := "allowWatchBookmarks=true&"
	if fieldSel != "" {
		q += "fieldSelector=" + fieldSel + "&"
	}
	q += "resourceVersion=" + strconv.FormatInt(rv, 10) + "&timeoutSeconds=" + strconv.Itoa(int(max(d, time.Second).Seconds())) + "&watch=true"
	id := s.do(t, d, request{c: c, verb: "watch", uri: collection(res, ns) + "?" + q, level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res, Namespace: ns, APIGroup: groupOf(res), APIVersion: "v1"}, status: &metav1.Status{Code: 200}})
	s.noteWatch(c, res, ns, "", strconv.FormatInt(rv, 10), id)
}

func (r *restoreSim) lagging(c Client) bool {
	return r.sim.route != nil && r.sim.route(c, time.Time{}) == "apiserver-b"
}

// list emits a reflector's list (resourceVersion=0, from the watch cache)
// and returns the resourceVersion it returned.
func (r *restoreSim) list(t time.Time, c Client, res, ns, fieldSel string) int64 {
	s := r.sim
	head := r.tl.head(t)
	if r.st.lag > 0 && r.lagging(c) {
		head -= 1 + s.rng.Int64N(r.st.lag)
	}
	q := "limit=500&resourceVersion=0"
	if fieldSel != "" {
		q = "fieldSelector=" + fieldSel + "&" + q
	}
	req := request{c: c, verb: "list", uri: collection(res, ns) + "?" + q, level: r.level,
		ref:    auditv1.ObjectReference{Resource: res, Namespace: ns, APIGroup: groupOf(res), APIVersion: "v1"},
		status: &metav1.Status{Code: 200}}
	if r.st.full {
		body, _ := json.Marshal(map[string]any{"kind": "List", "apiVersion": "v1",
			"metadata": map[string]string{"resourceVersion": strconv.FormatInt(head, 10)}, "items": []any{}})
		req.respObj = body
	}
	s.do(t, s.between(3*time.Millisecond, 60*time.Millisecond), req)
	delete(s.seen, reflectorKey{c.key(), res, ns, ""})
	return head
}

func groupOf(res string) string {
	switch res {
	case "deployments", "replicasets":
		return "apps"
	case "endpointslices":
		return "discovery.k8s.io"
	case "leases":
		return "coordination.k8s.io"
	}
	return ""
}

func collection(res, ns string) string {
	g := groupOf(res)
	if g == "" {
		return path(res, ns)
	}
	p := "/apis/" + g + "/v1"
	if ns != "" {
		p += "/namespaces/" + ns
	}
	return p + "/" + res
}

// metaJSON renders an object of res with only its metadata.
func metaJSON(res, ns, name string, rv int64) []byte {
	meta := map[string]string{"name": name, "namespace": ns}
	if rv > 0 {
		meta["resourceVersion"] = strconv.FormatInt(rv, 10)
	}
	kind := res
	if k, ok := kinds[res]; ok {
		kind = k.kind
	}
	b, _ := json.Marshal(map[string]any{"kind": kind, "apiVersion": "v1", "metadata": meta})
	return b
}
