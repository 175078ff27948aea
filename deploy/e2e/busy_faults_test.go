package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"time"
)

// The busy cluster's faults, each in the middle of the same load as the
// healthy run: a wave of hollow nodes that hang (heartbeat-loss), and the
// 1.7-1.9 watch cache's stale resourceVersion in front of the real
// controller-manager, triggered among the load's Service deletions
// (watch-loop).

const (
	// busyFrozen of the busyNodes hollow nodes hang at the same moment
	// for busyOutage.
	busyFrozen = 4
	busyOutage = 90 * time.Second
	// busyEvictAfter is the tolerationSeconds of the load's Pods for an
	// unreachable Node in the heartbeat scenario, so that the
	// controller-manager evicts them within the outage.
	busyEvictAfter = 10
	// busyLeaseEvery is how often a hollow kubelet renews its Lease (the
	// kubelet's default 40 s Lease, renewed every quarter).
	busyLeaseEvery = 10 * time.Second
)

// busyHeartbeatWave: while the load runs, busyFrozen hollow nodes hang
// (SIGSTOP of their kubelet and kube-proxy) at the same moment; the real
// controller-manager marks them NotReady, taints them and evicts their
// Pods, the ReplicaSets replace them elsewhere, and the load goes on
// (new ConfigMap generations, every Deployment and StatefulSet scaled up
// by a quarter). After busyOutage they continue (SIGCONT), finish the
// evicted Pods' deletion and are Ready again. heartbeat-loss must report
// one wave naming exactly the hung nodes and the evicted Pods.
func busyHeartbeatWave(d *driver) expectation {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	cfg := busyLoad
	cfg.Seed, cfg.EvictAfter = seed, busyEvictAfter
	b := startBusy(d, d.c.base)
	obs := b.obs
	l := newLoad(d, obs, cfg, len(b.nodes))
	l.create(3 * time.Minute)
	l.scale(2 * time.Minute)
	// heartbeat-loss learns each node's interval from its heartbeats:
	// hbWarmup renewals each before anything hangs.
	d.sleep(time.Until(b.ready.Add(hbWarmup * busyLeaseEvery)))

	nodes := slices.Clone(b.nodes)
	rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	frozen := nodes[:busyFrozen]
	var stopped []string
	podsBefore := map[string][]string{}
	for _, n := range frozen {
		stopped = append(stopped, n.name)
		podsBefore[n.name], _ = obs.podsOn(n.name)
	}
	sort.Strings(stopped)
	cut := time.Now()
	for _, n := range frozen {
		d.must(n.freeze())
	}
	d.t.Logf("seed %d: hollow nodes %v hung (SIGSTOP) %.1fs after they were Ready, running %d Pods", seed, stopped,
		cut.Sub(b.ready).Seconds(), func() int {
			n := 0
			for _, ps := range podsBefore {
				n += len(ps)
			}
			return n
		}())
	// The load goes on. Scaling up only: a scale-down could delete Pods
	// of the hung nodes, which are not evictions.
	l.updateConfigs()
	l.scaleBy(func() float64 { return 1.25 })
	d.waitFor("the controller-manager to mark the hung Nodes NotReady, taint them and evict their Pods", busyOutage-5*time.Second, func() bool {
		for _, n := range stopped {
			notReady, tainted, _ := obs.firstAfter(n, cut)
			pods, deleting := obs.podsOn(n)
			// The DaemonSet's Pod tolerates the taint and stays.
			if notReady.IsZero() || tainted.IsZero() || deleting < len(pods)-1 || deleting == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range stopped {
		notReady, tainted, _ := obs.firstAfter(n, cut)
		_, deleting := obs.podsOn(n)
		d.t.Logf("node %s: NotReady +%.1fs, tainted +%.1fs, %d Pods being evicted", n, notReady.Sub(cut).Seconds(), tainted.Sub(cut).Seconds(), deleting)
	}
	d.sleep(time.Until(cut.Add(busyOutage)))
	resumed := time.Now()
	for _, n := range frozen {
		d.must(n.thaw())
	}
	d.t.Logf("hollow nodes %v continued (SIGCONT) after %.1fs", stopped, resumed.Sub(cut).Seconds())
	d.waitFor("every Node Ready again", 2*time.Minute, func() bool {
		for _, n := range b.nodes {
			if !obs.nodeReady(n.name) {
				return false
			}
		}
		return true
	})
	l.waitSettled("recovery", resumed, 3*time.Minute)

	truth := &heartbeatTruth{Wave: true, Stopped: stopped, StoppedAt: cut, ResumedAt: resumed,
		LeaseIntervalSeconds: busyLeaseEvery.Seconds(),
		NotReady:             map[string]time.Time{}, Tainted: map[string]time.Time{}, Ready: map[string]time.Time{}}
	for _, n := range b.nodes {
		truth.Nodes = append(truth.Nodes, n.name)
		notReady, tainted, ready := obs.firstAfter(n.name, cut)
		if !notReady.IsZero() {
			truth.NotReady[n.name] = notReady
		}
		if !tainted.IsZero() {
			truth.Tainted[n.name] = tainted
		}
		if !ready.IsZero() {
			truth.Ready[n.name] = ready
		}
	}
	truth.Evicted = obs.evictedAfter(cut, stopped)
	d.t.Logf("after the cut: NotReady %v, tainted %v, %d Pods evicted", keys(truth.NotReady), keys(truth.Tainted), len(truth.Evicted))
	for _, n := range b.nodes {
		hung := slices.Contains(stopped, n.name)
		if _, ok := truth.NotReady[n.name]; ok != hung {
			d.t.Errorf("node %s (hung %v) went NotReady: %v", n.name, hung, ok)
		}
	}
	// Two more renewals after the recovery, so that the return is well
	// inside the log; then the load's last wave.
	d.sleep(2 * busyLeaseEvery)
	l.deleteNamespaces(3 * time.Minute)
	b.stop()
	return expectation{
		Description: fmt.Sprintf("the load on %d hollow nodes under the real controller-manager (grace %s); %v hang (SIGSTOP) at the same "+
			"moment for %s while the load goes on: NotReady, tainted, %d Pods evicted and replaced; then they continue",
			len(b.nodes), hbGrace, stopped, busyOutage, len(truth.Evicted)),
		Heartbeat: truth,
		Silent:    []string{"watch-loop", "watch-rv-regression"},
	}
}

// busyWatchLoop: the real controller-manager behind the fault proxy
// (faultproxy_test.go, as in the kcm-watch-loop scenario) while the load
// runs. A user re-creates the Services of a few Deployments (the
// victims) while another namespace is being deployed; later, in the
// first part of the delete wave, the Service created first (legacy) goes
// last. From then on every restart of the controller-manager's Services
// watch resumes from legacy's stale resourceVersion, the replay drops the
// victims from its informer's cache for a moment, and its endpoints
// controller deletes and re-creates their Endpoints. watch-loop must
// report one loop of the controller-manager's Services reflector, from
// legacy's resourceVersion, naming every victim.
func busyWatchLoop(d *driver) expectation {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5))
	px := startFaultProxy(d, true)
	b := startBusy(d, px.base, "--kube-api-content-type=application/json")
	t0 := time.Now()
	cfg := busyLoad
	cfg.Seed = seed
	l := newLoad(d, b.obs, cfg, len(b.nodes))
	early, last := l.namespaces[:len(l.namespaces)-1], l.namespaces[len(l.namespaces)-1]
	l.create(3*time.Minute, early...)
	legacy := l.find(early[0], "small-1")

	var pool []*workload
	for _, w := range l.workloadsOf("deployments") {
		if w != legacy {
			pool = append(pool, w)
		}
	}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	k := 2 + rng.IntN(2)
	victims, gone := pool[:k], pool[k:k+2]
	// The victims' Services are deleted, the last namespace's Services
	// created while they are gone, and the victims' re-created: in every
	// replay the other Services' ADDED events lie between a victim's
	// DELETED and ADDED, the stretch in which the endpoints controller's
	// worker sees the victim missing (see kcmLoopRestarts).
	for _, v := range victims {
		l.deleteService(v)
	}
	for _, v := range victims {
		d.waitNoEndpointsIn(time.Minute, v.namespace, v.name)
	}
	l.create(3*time.Minute, last)
	for _, v := range victims {
		l.createService(v)
	}
	recreatedAt := time.Now()
	for _, v := range victims {
		d.waitEndpointsIn(time.Minute, v.namespace, v.name)
	}
	l.scale(2 * time.Minute)
	// As in the incident, the controller-manager has re-watched past
	// legacy's resourceVersion before legacy goes.
	d.waitFor("kube-controller-manager to restart its Services watch", px.maxCut+10*time.Second, func() bool {
		return slices.ContainsFunc(px.servicesWatches(), func(w proxiedWatch) bool { return w.Start.After(recreatedAt) })
	})

	// The delete wave's first part: two Deployments, then legacy.
	o, err := d.admin.get(legacy.namespace, "services", legacy.name)
	d.must(err)
	legacyRV := o.Metadata.ResourceVersion
	l.remove(gone, 2*time.Minute)
	trigger := time.Now()
	l.remove([]*workload{legacy}, 2*time.Minute)
	d.t.Logf("seed %d: legacy %s/%s (resourceVersion %s) deleted %.1fs after the controller-manager started, after %v; victims %v",
		seed, legacy.namespace, legacy.name, legacyRV, trigger.Sub(t0).Seconds(), gone, victims)

	restarts := func() []proxiedWatch {
		var out []proxiedWatch
		for _, w := range px.servicesWatches() {
			if w.Start.After(trigger) {
				out = append(out, w)
			}
		}
		return out
	}
	waitLoopFinding(d, px, restarts, legacyRV, t0)
	d.waitFor(fmt.Sprintf("%d restarts of kube-controller-manager's Services watch", kcmLoopRestarts),
		time.Duration(kcmLoopRestarts+1)*px.maxCut+10*time.Second, func() bool { return len(restarts()) >= kcmLoopRestarts })
	var victimKeys []string
	for _, v := range victims {
		victimKeys = append(victimKeys, v.namespace+"/"+v.name)
	}
	// Endpoints writes named namespace/name.
	writes := func() []epWrite {
		ws := px.endpointsWrites()
		out := proxyWrites(ws)
		for i, w := range ws {
			out[i].Name = w.Namespace + "/" + w.Name
		}
		return out
	}
	if !poll(2*px.maxCut+kcmLoopChurnWithin, 200*time.Millisecond, func() bool {
		counts := churnCounts(writes(), restartTimes(restarts()), victimKeys)
		for _, v := range victimKeys {
			if counts[v] == 0 {
				return false
			}
		}
		return true
	}) {
		d.t.Errorf("the Endpoints of the victims %v churned after %v of %d restarts", victimKeys,
			churnCounts(writes(), restartTimes(restarts()), victimKeys), len(restarts()))
	}
	d.sleep(kcmLoopChurnWithin + time.Second)
	rs := restarts()
	for i, r := range rs {
		if r.RV != legacyRV {
			d.t.Errorf("restart %d after the trigger watched Services from %q, want legacy's stale %s", i+1, r.RV, legacyRV)
		}
	}
	d.t.Logf("Endpoints churn of the victims after %d restarts: %v", len(rs), churnCounts(writes(), restartTimes(rs), victimKeys))

	// The rest of the delete wave removes the load's other Services:
	// each DELETED event carries the deleted Service's old
	// resourceVersion, so the resume point drifts from legacy's to that
	// of the last one deleted, still far behind the store. Two more
	// restarts show the drift; it is the same loop.
	l.deleteNamespaces(3 * time.Minute)
	wave := time.Now()
	d.waitFor("two restarts of kube-controller-manager's Services watch after the delete wave", 2*px.maxCut+10*time.Second, func() bool {
		n := 0
		for _, w := range px.servicesWatches() {
			if w.Start.After(wave) {
				n++
			}
		}
		return n >= 2
	})
	var drift []string
	for _, w := range px.servicesWatches() {
		if w.Start.After(wave) {
			drift = append(drift, w.RV)
		}
	}
	d.t.Logf("after the delete wave the controller-manager resumed from %v (legacy's %s)", drift, legacyRV)
	all := px.servicesWatches()
	b.stop()
	px.close()
	d.t.Logf("kube-controller-manager's Services watches through the fault proxy (times from its start, legacy deleted at %.1fs):%s",
		trigger.Sub(t0).Seconds(), describeWatches(all, t0))
	if n := px.opaqueResponses(); n > 0 {
		d.t.Errorf("%d Services responses were not JSON and passed unchanged", n)
	}
	if len(all) == 0 {
		d.t.Fatal("no Services watch went through the fault proxy")
	}
	// The victims' Endpoints must be named, legacy's not (its creation
	// lies at the stale resourceVersion, outside every replay). The
	// Services deleted just before legacy may be named too, rightly:
	// created after legacy, each replay re-adds them for a moment, and
	// the endpoints controller creates their Endpoints and deletes them
	// again (seen in the audit log as create→delete by
	// kube-controller-manager at each restart).
	var objs []objectRef
	for _, v := range victims {
		objs = append(objs, objectRef{Resource: "endpoints", Namespace: v.namespace, Name: v.name})
	}
	notObjs := []objectRef{{Resource: "endpoints", Namespace: legacy.namespace, Name: legacy.name}}
	return expectation{
		Description: fmt.Sprintf("the load on %d hollow nodes, the real kube-controller-manager behind a proxy that cuts its Services watches "+
			"after 15-25 s, drops their bookmarks and gives DELETED events the object's previous resourceVersion (1.7-1.9); a user "+
			"re-creates the Services %v while namespace %s is deployed; the delete wave removes %v, then legacy %s/%s",
			len(b.nodes), victimKeys, last, gone, legacy.namespace, legacy.name),
		WatchLoop: &expectedFinding{
			User: kcmID.user, UserAgent: all[0].UserAgent, Resource: "services", ResourceVersion: legacyRV,
			Objects: objs, NotObjects: notObjs, Iterations: kcmLoopRestarts, Only: true,
		},
		// The loop's resume point drifts as the delete wave removes
		// more Services: the controller-manager's regressions to the
		// new stale resourceVersions are part of the one loop,
		// information naming it, never a warning of their own.
		AtMostInfo: []string{"watch-rv-regression"},
	}
}

// waitEndpointsIn and waitNoEndpointsIn are waitEndpoints and
// waitNoEndpoints in namespace ns.
func (d *driver) waitEndpointsIn(timeout time.Duration, ns, name string) {
	d.t.Helper()
	d.waitFor("the endpoints controller to create Endpoints "+ns+"/"+name, timeout, func() bool {
		code, _, err := d.admin.raw(http.MethodGet, collection(ns, "endpoints")+"/"+name, nil)
		return err == nil && code == http.StatusOK
	})
}

func (d *driver) waitNoEndpointsIn(timeout time.Duration, ns, name string) {
	d.t.Helper()
	d.waitFor("the endpoints controller to delete Endpoints "+ns+"/"+name, timeout, func() bool {
		code, _, err := d.admin.raw(http.MethodGet, collection(ns, "endpoints")+"/"+name, nil)
		return err == nil && code == http.StatusNotFound
	})
}
