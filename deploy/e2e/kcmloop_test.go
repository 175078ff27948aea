package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The kcm-watch-loop scenarios re-create the incident with the real
// kube-controller-manager: the fault proxy (faultproxy_test.go) between it
// and the real kube-apiserver does what the 1.7–1.9 watch cache did to
// Services watch streams, and the driver only plays the user (alice) who
// creates, deletes and re-creates Services. Nothing scripts a watch or an
// Endpoints write: the reflector, its restarts and the Endpoints churn are
// the real controller-manager's.

// legacyService is the early-created Service whose deletion triggers the
// loop.
const legacyService = "legacy"

// kcmLoopLive are the Services that predate the audit log; kcmLoopCreated
// are created during the scenario, after legacy, and some of them (chosen
// at random each run) are deleted and re-created: the expected victims.
var (
	kcmLoopLive    = []string{"frontend", "catalog"}
	kcmLoopCreated = []string{"cart", "checkout", "payments", "promo", "search"}
)

// kcmLoopRestarts is how many restarts of the controller-manager's Services
// watch after the trigger each run waits for, and (with the rewrite) after
// how many restarts each victim's Endpoints must have been deleted and
// re-created. A restart does not always churn every victim: the endpoints
// controller's worker deletes a victim's Endpoints only if it reads the
// Service from the informer's cache between the replayed DELETED and ADDED
// events, a race of milliseconds it usually (not always) wins.
const kcmLoopRestarts = 4

// kcmLoopChurnWithin bounds the delay from a watch restart to the churn of
// the Endpoints it causes.
const kcmLoopChurnWithin = 5 * time.Second

// kcmLoopPrelude creates, before auditing starts, namespace apps with the
// config writer's ConfigMap and the live Services. Their Endpoints are left
// to the real endpoints controller.
func kcmLoopPrelude(d *driver) {
	d.t.Helper()
	_, err := d.admin.create("", "namespaces", namespace("apps"))
	d.must(err)
	_, err = d.writer.create("apps", "configmaps", configMap("app-config", map[string]string{"generation": "0"}))
	d.must(err)
	for _, name := range kcmLoopLive {
		_, err := d.alice.create("default", "services", service(name))
		d.must(err)
	}
}

func kcmWatchLoop(d *driver) expectation        { return kcmLoop(d, true) }
func kcmWatchLoopControl(d *driver) expectation { return kcmLoop(d, false) }

// kcmLoop drives the seed's trigger against the real controller-manager
// behind the fault proxy, rewriting DELETED events or (control) not.
func kcmLoop(d *driver, rewrite bool) expectation {
	px := startFaultProxy(d, rewrite)
	kcm := startControllerManager(d, px.base, "--kube-api-content-type=application/json")
	t0 := time.Now()
	d.configWriter()
	st := kcmLoopTrigger(d, px, t0)
	legacyRV, victims, others, trigger := st.legacyRV, st.victims, st.others, st.trigger

	// Let the proxy cut the controller-manager's Services watch
	// kcmLoopRestarts times; with the rewrite, wait for the churn after the
	// last restart too.
	restarts := func() []proxiedWatch {
		var out []proxiedWatch
		for _, w := range px.servicesWatches() {
			if w.Start.After(trigger) {
				out = append(out, w)
			}
		}
		return out
	}
	if rewrite {
		// auditlens, over the webhook, finds the loop within a minute of
		// the third restart (serve evaluates every 5 s here).
		waitLoopFinding(d, px, restarts, legacyRV, t0)
	}
	d.waitFor(fmt.Sprintf("%d restarts of kube-controller-manager's Services watch", kcmLoopRestarts),
		time.Duration(kcmLoopRestarts+1)*px.maxCut+10*time.Second,
		func() bool { return len(restarts()) >= kcmLoopRestarts })
	if rewrite {
		// Each victim's Endpoints must have churned after kcmLoopRestarts
		// restarts; a restart in which a victim lost the race costs one
		// more restart.
		if !poll(2*px.maxCut+kcmLoopChurnWithin, 200*time.Millisecond, func() bool {
			counts := churnCounts(proxyWrites(px.endpointsWrites()), restartTimes(restarts()), victims)
			for _, v := range victims {
				if counts[v] < kcmLoopRestarts {
					return false
				}
			}
			return true
		}) {
			d.t.Errorf("the Endpoints of the victims %v churned after %v of %d restarts", victims,
				churnCounts(proxyWrites(px.endpointsWrites()), restartTimes(restarts()), victims), len(restarts()))
		}
	}
	// Let the last restart's churn window pass whole before the
	// controller-manager stops.
	d.sleep(kcmLoopChurnWithin + time.Second)
	rs := restarts()

	// Stop the controllers while the apiserver still sends to auditlens,
	// so that their watches' ends are delivered too.
	d.stop()
	if err := kcm.stop(30 * time.Second); err != nil {
		d.t.Errorf("kube-controller-manager: %v\n%s", err, kcm.logTail(30))
	}
	px.close()

	all := px.servicesWatches()
	writes := px.endpointsWrites()
	d.t.Logf("kube-controller-manager's Services watches through the fault proxy (rewrite %v; times from its start, legacy deleted at %.1fs):%s",
		rewrite, trigger.Sub(t0).Seconds(), describeWatches(all, t0))
	d.t.Logf("its Endpoints writes:%s", describeWrites(writes, t0))
	if n := px.opaqueResponses(); n > 0 {
		d.t.Errorf("%d Services responses were not JSON and passed unchanged (is --kube-api-content-type=application/json set?)", n)
	}
	for _, w := range all {
		if w.UserAgent != all[0].UserAgent {
			d.t.Errorf("Services watches by two user agents: %q and %q", all[0].UserAgent, w.UserAgent)
		}
	}

	notVictims := st.notVictims()
	st.checkRestarts(d, rs, writes, rewrite, t0)
	if len(all) == 0 {
		d.t.Fatal("no Services watch went through the fault proxy")
	}

	desc := fmt.Sprintf("the real kube-controller-manager behind a proxy that cuts its Services watches after 15-25 s and drops their bookmarks; "+
		"alice creates Service legacy, then %v, deletes them, creates %v, re-creates %v, then deletes legacy", victims, others, victims)
	if !rewrite {
		return expectation{
			Description: desc + "; DELETED events pass unchanged (control): the controller re-watches from the deletion's resourceVersion and nothing churns",
			Silent:      []string{"watch-loop", "watch-rv-regression"},
		}
	}
	return expectation{
		Description: desc + "; the proxy gives DELETED events the object's previous resourceVersion (1.7-1.9), so the controller re-watches " +
			"from legacy's stale one at every restart and its endpoints controller deletes and re-creates the victims' Endpoints",
		WatchLoop: &expectedFinding{
			User: kcmID.user, UserAgent: all[0].UserAgent, Resource: "services", ResourceVersion: legacyRV,
			Objects:    endpointsRefs(victims...),
			NotObjects: endpointsRefs(notVictims...),
			Iterations: kcmLoopRestarts,
		},
	}
}

// kcmLoopStory is what kcmLoopTrigger did: the seed of its random
// choices, legacy's resourceVersion, the victims (created, deleted and
// re-created after legacy) and the other Services, and when legacy went.
type kcmLoopStory struct {
	seed      uint64
	legacyRV  string
	victims   []string
	deleted   []string // the victims in the order of their deletion
	others    []string
	recreated []string // the victims in the order of their re-creation
	trigger   time.Time
}

// kcmLoopTrigger plays alice's part of the seed against the real
// controller-manager behind px, which started at t0: it waits for the
// Endpoints of the live Services, creates legacy, creates, deletes and
// re-creates the victims (2-3 of kcmLoopCreated, drawn at random) with the
// other Services created while the victims are gone, waits for a restart of
// the controller-manager's Services watch past all that, and deletes
// legacy.
func kcmLoopTrigger(d *driver, px *faultProxy, t0 time.Time) kcmLoopStory {
	d.t.Helper()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	pause := func(lo, hi time.Duration) { d.sleep(lo + time.Duration(rng.Int64N(int64(hi-lo)))) }

	d.waitEndpoints(2*time.Minute, kcmLoopLive...)
	d.t.Logf("the endpoints controller wrote the Endpoints of %v %.1fs after kube-controller-manager started", kcmLoopLive, time.Since(t0).Seconds())

	// Early-created: legacy.
	legacyRV, err := d.alice.create("default", "services", service(legacyService))
	d.must(err)
	d.waitEndpoints(time.Minute, legacyService)
	pause(time.Second, 3*time.Second)

	// The victims: created, deleted and re-created after legacy. The other
	// Services are created while the victims are gone, which puts their
	// ADDED events between the victims' DELETED and ADDED events in every
	// replay: the endpoints controller's workers race the informer through
	// that stretch of the replay (see kcmLoopRestarts). With the other
	// Services created before the victims' deletion instead, one restart
	// in four of a first run churned no victim.
	pool := slices.Clone(kcmLoopCreated)
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	k := 2 + rng.IntN(2)
	victims, others := pool[:k], pool[k:]
	createService := func(name string) {
		_, err := d.alice.create("default", "services", service(name))
		d.must(err)
		d.waitEndpoints(time.Minute, name)
		pause(200*time.Millisecond, time.Second)
	}
	for _, name := range victims {
		createService(name)
	}
	deleted := slices.Clone(victims)
	rng.Shuffle(len(deleted), func(i, j int) { deleted[i], deleted[j] = deleted[j], deleted[i] })
	for _, name := range deleted {
		d.must(d.alice.delete("default", "services", name))
		d.waitNoEndpoints(time.Minute, name)
		pause(200*time.Millisecond, time.Second)
	}
	for _, name := range others {
		createService(name)
	}
	recreated := slices.Clone(victims)
	rng.Shuffle(len(recreated), func(i, j int) { recreated[i], recreated[j] = recreated[j], recreated[i] })
	for _, name := range recreated {
		createService(name)
	}
	// As in the seed, the controller-manager has re-watched past legacy's
	// resourceVersion before legacy goes: wait for a restart after the
	// last re-creation (the proxy cuts every 15-25 s).
	recreatedAt := time.Now()
	d.waitFor("kube-controller-manager to restart its Services watch", px.maxCut+10*time.Second, func() bool {
		return slices.ContainsFunc(px.servicesWatches(), func(w proxiedWatch) bool { return w.Start.After(recreatedAt) })
	})
	pause(time.Second, 3*time.Second)

	// The trigger: delete the early-created Service.
	d.must(d.alice.delete("default", "services", legacyService))
	trigger := time.Now()
	d.waitNoEndpoints(time.Minute, legacyService)
	d.t.Logf("seed %d: legacy created at resourceVersion %s; victims %v created, deleted in order %v; %v created; victims re-created in order %v; legacy deleted %.1fs after kube-controller-manager started",
		seed, legacyRV, victims, deleted, others, recreated, trigger.Sub(t0).Seconds())
	return kcmLoopStory{seed: seed, legacyRV: legacyRV, victims: victims, deleted: deleted, others: others,
		recreated: recreated, trigger: trigger}
}

// notVictims are the Services whose Endpoints the loop must leave alone:
// legacy, the live ones and the others.
func (st kcmLoopStory) notVictims() []string {
	return slices.Concat([]string{legacyService}, kcmLoopLive, st.others)
}

// checkRestarts checks the mechanism live, from what the fault proxy saw:
// with the rewrite, every restart rs (the Services watches after the
// trigger) is from legacy's stale resourceVersion and is followed by churn
// of some victims' Endpoints, and no other Endpoints are deleted after the
// first restart; without it, every restart is past legacy's
// resourceVersion and no Endpoints are deleted after the first. Times are
// logged from t0.
func (st kcmLoopStory) checkRestarts(d *driver, rs []proxiedWatch, writes []endpointsWrite, rewrite bool, t0 time.Time) {
	d.t.Helper()
	legacyRV, victims, notVictims := st.legacyRV, st.victims, st.notVictims()
	pw := proxyWrites(writes)
	for i, r := range rs {
		if rewrite && r.RV != legacyRV {
			d.t.Errorf("restart %d after the trigger watched Services from %q, want legacy's stale %s", i+1, r.RV, legacyRV)
		}
		if !rewrite && !rvLess(legacyRV, r.RV) {
			d.t.Errorf("control: restart %d after the trigger watched Services from %q, not past legacy's %s", i+1, r.RV, legacyRV)
		}
		var next time.Time
		if i+1 < len(rs) {
			next = rs[i+1].Start
		}
		if delays, churned := churnAfter(pw, r.Start, next, victims); rewrite {
			d.t.Logf("restart %d at %.1fs from %s: Endpoints deleted→created %s", i+1, r.Start.Sub(t0).Seconds(), r.RV, delays)
			if len(churned) == 0 && !next.IsZero() {
				d.t.Errorf("restart %d at %.1fs: no Endpoints of %v deleted and re-created", i+1, r.Start.Sub(t0).Seconds(), victims)
			}
		}
	}
	if len(rs) > 0 {
		for _, w := range writes {
			if w.Method == "DELETE" && w.Code == 200 && w.At.After(rs[0].Start) && (!rewrite || slices.Contains(notVictims, w.Name)) {
				d.t.Errorf("Endpoints %s deleted at %.1fs, after the first restart (rewrite %v)", w.Name, w.At.Sub(t0).Seconds(), rewrite)
			}
		}
	}
}

// waitEndpoints waits until the Endpoints of every name exist.
func (d *driver) waitEndpoints(timeout time.Duration, names ...string) {
	d.t.Helper()
	d.waitFor("the endpoints controller to create Endpoints "+strings.Join(names, ", "), timeout, func() bool {
		for _, name := range names {
			if _, err := d.admin.get("default", "endpoints", name); err != nil {
				return false
			}
		}
		return true
	})
}

// waitNoEndpoints waits until the Endpoints of name are gone.
func (d *driver) waitNoEndpoints(timeout time.Duration, name string) {
	d.t.Helper()
	d.waitFor("the endpoints controller to delete Endpoints "+name, timeout, func() bool {
		_, err := d.admin.get("default", "endpoints", name)
		return err != nil
	})
}

// epWrite is an Endpoints write, from the proxy or the audit log.
type epWrite struct {
	At   time.Time
	Verb string // delete, create, ...
	Name string
	Code int
}

func proxyWrites(ws []endpointsWrite) []epWrite {
	var out []epWrite
	for _, w := range ws {
		verb := map[string]string{"DELETE": "delete", "POST": "create", "PUT": "update", "PATCH": "patch"}[w.Method]
		out = append(out, epWrite{At: w.At, Verb: verb, Name: w.Name, Code: w.Code})
	}
	return out
}

// churnAfter finds, for each name, the first successful delete of its
// Endpoints after start and the first successful create after that delete,
// both within kcmLoopChurnWithin of start and before next (when set). It
// describes the delays from start and returns the names that churned.
func churnAfter(ws []epWrite, start, next time.Time, names []string) (string, []string) {
	end := start.Add(kcmLoopChurnWithin)
	if !next.IsZero() && next.Before(end) {
		end = next
	}
	var parts, churned []string
	for _, name := range names {
		var del, cre time.Time
		for _, w := range ws {
			if w.Name != name || w.At.Before(start) || w.At.After(end) {
				continue
			}
			if del.IsZero() && w.Verb == "delete" && w.Code == 200 {
				del = w.At
			} else if !del.IsZero() && cre.IsZero() && w.Verb == "create" && w.Code == 201 && !w.At.Before(del) {
				cre = w.At
			}
		}
		if del.IsZero() || cre.IsZero() {
			parts = append(parts, name+" none")
			continue
		}
		churned = append(churned, name)
		parts = append(parts, fmt.Sprintf("%s +%dms→+%dms", name, del.Sub(start).Milliseconds(), cre.Sub(start).Milliseconds()))
	}
	return strings.Join(parts, ", "), churned
}

// churnCounts counts, for each name, after how many of the restarts its
// Endpoints churned.
func churnCounts(ws []epWrite, restarts []time.Time, names []string) map[string]int {
	counts := map[string]int{}
	for i, start := range restarts {
		var next time.Time
		if i+1 < len(restarts) {
			next = restarts[i+1]
		}
		_, churned := churnAfter(ws, start, next, names)
		for _, n := range churned {
			counts[n]++
		}
	}
	return counts
}

func restartTimes(ws []proxiedWatch) []time.Time {
	var out []time.Time
	for _, w := range ws {
		out = append(out, w.Start)
	}
	return out
}

func describeWrites(ws []endpointsWrite, t0 time.Time) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "\n  %.3fs %s %s %d", w.At.Sub(t0).Seconds(), w.Method, w.Name, w.Code)
	}
	return b.String()
}

// waitLoopFinding waits for the third restart of the controller-manager's
// Services watch (restarts lists them) and then, for up to a minute, for
// auditlens to hold a watch-loop finding from resourceVersion rv over the
// webhook; it fails the test when none comes.
func waitLoopFinding(d *driver, px *faultProxy, restarts func() []proxiedWatch, rv string, t0 time.Time) {
	d.t.Helper()
	d.waitFor("3 restarts of kube-controller-manager's Services watch", 4*px.maxCut+10*time.Second,
		func() bool { return len(restarts()) >= 3 })
	third := restarts()[2].Start
	var found *finding
	poll(time.Until(third.Add(time.Minute)), time.Second, func() bool {
		fs, err := d.recv.findings(d.c.name)
		if err != nil {
			return false
		}
		for i, f := range fs {
			if f.Detector == "watch-loop" && f.Subjects.ResourceVersion == rv {
				found = &fs[i]
				return true
			}
		}
		return false
	})
	if found == nil {
		d.t.Errorf("no watch-loop finding from resourceVersion %s within a minute of the third restart (at %.1fs)", rv, third.Sub(t0).Seconds())
	} else {
		d.t.Logf("auditlens found the loop %.1fs after the third restart (polled every second): %s", time.Since(third).Seconds(), found.Title)
	}
}
