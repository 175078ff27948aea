package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSoak runs the busy cluster's load over and over, at real time scale,
// for AUDITLENS_SOAK (a duration: `make soak` gives 3h; unset, the test is
// skipped): serve at its default intervals (batches of up to a second,
// an evaluation every minute over the last hour), the controller-manager's
// own 5–10 minute watch restarts (the fault proxy in front of it cuts
// nothing sooner than 11 minutes), and Node monitoring at its defaults.
// Every minute it samples serve's resident memory, its spool and the
// findings it holds. Two thirds of the way in (or at
// AUDITLENS_SOAK_TRIGGER, a duration from the start), the load's namespaces
// stay and the loop is triggered (soakTrigger): the fault proxy starts
// rewriting DELETED events (the 1.7-1.9 bug) and a user deletes an old
// Service. From then on Pods, ConfigMaps and Jobs churn as before, and
// now and then one of the load's Services is deleted, which moves the
// loop's resume point: the loop must be found, name its victims and stay
// one finding to the end; nothing else may be found. After the first
// hour serve's memory may grow by at most 10 % (the median of each later
// half-hour against the first hour's second half: see rssGrowth). The
// samples go to AUDITLENS_SOAK_OUT (soak.csv and soak.svg; default: the
// test's temporary directory).
func TestSoak(t *testing.T) {
	total, err := time.ParseDuration(os.Getenv("AUDITLENS_SOAK"))
	if err != nil || total <= 0 {
		t.Skip("AUDITLENS_SOAK is not a duration: the soak runs with make soak")
	}
	prepare(t)
	dir := filepath.Join(tempRoot, "soak")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("AUDITLENS_SOAK_OUT")
	if out == "" {
		out = filepath.Join(dir, "out")
	}
	ca := newCA(t, dir)
	const cluster = "e2e-soak"
	recv := startReceiverTokenArgs(t, ca, filepath.Join(dir, "auditlens"), []string{cluster},
		[]string{"--detect-interval=1m", "--batch-wait=1s"})
	c := startClusterWith(t, ca, dir, cluster, recv.forCluster(cluster), nil, busyAPIServerFlags(ca)...)
	d := newDriver(t, c)
	d.recv = recv

	px := startFaultProxy(d, false)
	px.minCut, px.maxCut = 11*time.Minute, 12*time.Minute
	b := startBusy(d, px.base, "--kube-api-content-type=application/json",
		"--node-monitor-period=5s", "--node-monitor-grace-period=50s", "--unhealthy-zone-threshold=0.55", "--node-eviction-rate=0.1")
	start := time.Now()

	// The Service whose deletion starts the loop lives in a namespace of
	// its own, which the load never deletes.
	_, err = d.admin.create("", "namespaces", namespace("soak"))
	d.must(err)

	var (
		mu  sync.Mutex
		rec soakRecord
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		var prev soakCounters
		last := time.Now()
		for {
			now := time.Now()
			if lost, paused := hostPause(now.Round(0).Sub(last.Round(0)), now.Sub(last), 15*time.Second); paused {
				p := soakPause{At: time.Since(start), From: last.Round(0), To: now.Round(0), Lost: lost}
				mu.Lock()
				rec.Pauses = append(rec.Pauses, p)
				mu.Unlock()
				t.Logf("soak %s: the host stood still: %s of wall time passed without monotonic time, between %s and %s",
					fmtMinutes(p.At), lost.Round(time.Second), p.From.Format(time.TimeOnly), p.To.Format(time.TimeOnly))
			}
			last = now
			s, err := sampleSoak(recv, cluster, time.Since(start), &prev)
			if err != nil {
				t.Logf("soak sample: %v", err)
			} else {
				mu.Lock()
				rec.Samples = append(rec.Samples, s)
				if rec.Trigger > 0 && rec.FoundAt == 0 && s.Loops > 0 {
					rec.FoundAt = s.At
				}
				mu.Unlock()
				t.Logf("soak %s: RSS %.0f MiB, spool %.0f KiB, %.0f events stored, %d findings (%d watch-loop), evaluation %.1fs, last %.0fs ago",
					fmtMinutes(s.At), float64(s.RSS)/(1<<20), s.SpoolBytes/1024, s.Stored, s.Findings, s.Loops, s.EvalSeconds, s.SinceEval)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	triggerAt := total * 2 / 3
	if v := os.Getenv("AUDITLENS_SOAK_TRIGGER"); v != "" {
		if triggerAt, err = time.ParseDuration(v); err != nil || triggerAt <= 0 || triggerAt >= total {
			t.Fatalf("AUDITLENS_SOAK_TRIGGER=%q is not a duration within AUDITLENS_SOAK=%s", v, total)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	rounds := 0
	var (
		l          *load
		victims    []*workload
		legacyRV   string
		drift      []string // the Services deleted after the trigger
		triggerRVs int      // Services watches through the proxy before the trigger
	)
	for time.Since(start) < total && !t.Failed() {
		rounds++
		if legacyRV != "" {
			// After the trigger the namespaces stay, as a team's
			// do: Pods, ConfigMaps and Jobs churn, no Service is
			// created, and now and then one is deleted, which moves
			// the loop's resume point (see soakTrigger).
			if rng.Float64() < 0.4 {
				d.sleep(time.Duration(rng.Int64N(int64(time.Minute))))
				if w := randomService(rng, l); w != nil {
					l.removeService(w)
					drift = append(drift, w.namespace+"/"+w.name)
					t.Logf("soak %s: Service %s/%s deleted while the loop runs", fmtMinutes(time.Since(start)), w.namespace, w.name)
				}
			}
			l.rescale(5 * time.Minute)
			l.update(5 * time.Minute)
			// Every Job of the load, the trigger's round removed them.
			var jobs []*workload
			for _, w := range l.workloads {
				if w.kind == "jobs" && w.created {
					jobs = append(jobs, w)
				}
			}
			l.remove(l.workloadsOf("jobs"), 5*time.Minute)
			l.recreate(jobs, 5*time.Minute)
			continue
		}
		cfg := busyLoad
		cfg.Seed = uint64(rounds)
		l = newLoad(d, b.obs, cfg, len(b.nodes))
		l.create(5 * time.Minute)
		l.scale(5 * time.Minute)
		l.update(5 * time.Minute)
		l.remove(l.workloadsOf("statefulsets", "jobs"), 5*time.Minute)
		if time.Since(start) >= triggerAt {
			triggerRVs = len(px.servicesWatches())
			victims, legacyRV = soakTrigger(d, px, l, rng)
			mu.Lock()
			rec.Trigger = time.Since(start)
			mu.Unlock()
			t.Logf("soak %s: the fault proxy rewrites DELETED events; soak/%s (resourceVersion %s) deleted; victims %v",
				fmtMinutes(rec.Trigger), legacyService, legacyRV, victims)
			continue
		}
		l.deleteNamespaces(5 * time.Minute)
	}
	close(stop)
	<-sampled
	b.stop()
	d.stop()
	c.stop(t)

	mu.Lock()
	defer mu.Unlock()
	if err := rec.save(out, fmt.Sprintf("auditlens serve over %s of the busy cluster's load (%d rounds)", total.Round(time.Minute), rounds)); err != nil {
		t.Error(err)
	}
	t.Logf("soak: %d rounds of the load, samples in %s", rounds, out)
	fs, err := recv.findings(cluster)
	if err != nil {
		t.Fatal(err)
	}
	loops := 0
	for _, f := range fs {
		switch {
		case f.Detector == "watch-loop":
			loops++
		case f.Detector == "watch-rv-regression" && f.Severity == "info":
			// part of the loop
		case f.Detector == "heartbeat-loss" && f.Severity == "info" && strings.HasPrefix(f.Title, "Audit feed gap") &&
			rec.explains(f.FirstSeen, f.LastSeen, time.Minute):
			// the host stood still: so did the apiserver, rightly reported
			t.Logf("%s over [%s, %s], a pause of the host", f.Title, f.FirstSeen.Format(time.TimeOnly), f.LastSeen.Format(time.TimeOnly))
		default:
			t.Errorf("unexpected %s %s finding: %s", f.Severity, f.Detector, f.Title)
		}
	}
	if rec.Trigger > 0 {
		var after []proxiedWatch
		if ws := px.servicesWatches(); len(ws) > triggerRVs {
			after = ws[triggerRVs:]
		}
		t.Logf("kube-controller-manager's Services watches from the trigger on (times from the soak's start; legacy's resourceVersion %s; Services deleted since: %v):%s",
			legacyRV, drift, describeWatches(after, start))
	}
	for _, f := range fs {
		if f.Detector != "watch-loop" {
			continue
		}
		t.Logf("watch-loop finding %s: %s, [%s, %s], %d restarts, stale resourceVersions %+v, %d objects",
			f.ID, f.Title, f.FirstSeen.Format(time.TimeOnly), f.LastSeen.Format(time.TimeOnly), f.Subjects.WatchRestarts, f.Subjects.StaleRVs, len(f.Objects))
		// The victims are what the controller-manager churned while it
		// looped, read from the apiserver's own log: whether a replay
		// churns a re-applied Service depends on the endpoints
		// controller's queue folding its DELETED and ADDED, which the
		// test does not decide.
		churned, written := endpointsWrites(t, c.auditLog, kcmID.user, f.FirstSeen)
		t.Logf("Endpoints the controller-manager deleted and created again from %s on: %v (the trigger re-applied %v)",
			f.FirstSeen.Format(time.TimeOnly), churned, victims)
		if len(churned) == 0 {
			t.Error("the controller-manager churned no Endpoints while the loop ran")
		}
		for _, key := range churned {
			if !slices.ContainsFunc(f.Objects, func(o findingObject) bool {
				return o.Resource == "endpoints" && o.Namespace+"/"+o.Name == key
			}) {
				t.Errorf("the loop's finding does not name the Endpoints %s, which the controller-manager deleted and created again", key)
			}
		}
		for _, o := range f.Objects {
			if key := o.Namespace + "/" + o.Name; o.Resource == "endpoints" && !written[key] {
				t.Errorf("the loop's finding names the Endpoints %s, which the controller-manager neither deleted nor created while it looped", key)
			}
		}
	}
	if rec.Trigger > 0 && loops != 1 {
		t.Errorf("%d watch-loop findings, want the one loop", loops)
	}
	if rec.Trigger > 0 && rec.FoundAt == 0 {
		t.Error("the loop was never found")
	} else if rec.Trigger > 0 {
		t.Logf("the loop was found %s after its trigger", rec.FoundAt-rec.Trigger)
	}
	if base, level, peak, g := rec.rssGrowth(); base > 0 {
		t.Logf("serve's RSS: median %.0f MiB in the first hour's second half, at most %.0f MiB in a later half-hour (%+.1f %%); peak after the first hour %.0f MiB",
			float64(base)/(1<<20), float64(level)/(1<<20), 100*g, float64(peak)/(1<<20))
		if g > 0.10 {
			t.Errorf("serve's RSS grew %.1f %% after the first hour, more than 10 %%", 100*g)
		}
	}
}

// soakTrigger starts the loop amid the load l, whose namespaces stay from
// now on. The apiserver's watch cache keeps the last hundred or so
// Services events (more while they come fast): a watch from a
// resourceVersion older than that is refused as expired and the
// reflector lists afresh, which ends a loop before it starts. So the
// Service whose deletion starts it is created now, as the Service of an
// old release is in a cluster whose Services change seldom: user alice
// creates legacy, a user re-applies two or three of the load's Services
// (deleted and created again: the victims, whose DELETED and ADDED events
// every replay from legacy's resourceVersion holds), the fault proxy
// starts giving DELETED events the object's previous resourceVersion
// (the 1.7-1.9 bug) and alice deletes legacy. It returns the victims and
// legacy's resourceVersion.
func soakTrigger(d *driver, px *faultProxy, l *load, rng *rand.Rand) ([]*workload, string) {
	d.t.Helper()
	legacyRV, err := d.alice.create("soak", "services", service(legacyService))
	d.must(err)
	pool := l.workloadsOf("deployments")
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	victims := pool[:2+rng.IntN(2)]
	for _, v := range victims {
		l.deleteService(v)
	}
	for _, v := range victims {
		d.waitNoEndpointsIn(time.Minute, v.namespace, v.name)
	}
	for _, v := range victims {
		l.createService(v)
	}
	for _, v := range victims {
		d.waitEndpointsIn(time.Minute, v.namespace, v.name)
	}
	px.setRewrite(true)
	d.must(d.alice.delete("soak", "services", legacyService))
	return victims, legacyRV
}

// randomService returns a Deployment of l that still has its Service, or
// nil when none has.
func randomService(rng *rand.Rand, l *load) *workload {
	var ws []*workload
	for _, w := range l.workloadsOf("deployments") {
		if w.service {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	return ws[rng.IntN(len(ws))]
}

// endpointsWrites reads, from the audit log at path, the Endpoints
// (namespace/name) that user deleted and then created again at or after
// since (churned), and every Endpoints it deleted or created from then on
// (written).
func endpointsWrites(t *testing.T, path, user string, since time.Time) (churned []string, written map[string]bool) {
	t.Helper()
	written = map[string]bool{}
	deleted := map[string]bool{}
	eachRawEvent(t, path, func(e rawEvent) {
		if e.Stage != "ResponseComplete" || e.User.Username != user || e.resource() != "endpoints" || e.StageTimestamp.Before(since) {
			return
		}
		key := e.namespace() + "/" + e.name()
		switch {
		case e.Verb == "delete" && e.code() == 200:
			deleted[key], written[key] = true, true
		case e.Verb == "create" && e.code() == 201:
			written[key] = true
			if deleted[key] && !slices.Contains(churned, key) {
				churned = append(churned, key)
			}
		}
	})
	slices.Sort(churned)
	return churned, written
}

// soakCounters are the cumulative detector metrics at the last sample:
// a sample reports what changed since.
type soakCounters struct{ runSeconds, rounds float64 }

// sampleSoak reads one minute's sample from serve.
func sampleSoak(recv *receiver, cluster string, at time.Duration, prev *soakCounters) (soakSample, error) {
	s := soakSample{At: at}
	var err error
	if s.RSS, err = rssOf(recv.proc.cmd.Process.Pid); err != nil {
		return s, err
	}
	m, err := recv.metrics()
	if err != nil {
		return s, err
	}
	s.SpoolBytes, s.Stored = m.sum("auditlens_spool_bytes"), m.sum("auditlens_events_stored_total")
	// One evaluation round runs every detector once; watch-loop's runs
	// count the rounds.
	cur := soakCounters{runSeconds: m.sum("auditlens_detector_run_seconds_sum"),
		rounds: m.sum(`auditlens_detector_run_seconds_count{detector="watch-loop"`)}
	if d := cur.rounds - prev.rounds; d > 0 {
		s.EvalSeconds = (cur.runSeconds - prev.runSeconds) / d
	}
	*prev = cur
	now := float64(time.Now().UnixNano()) / 1e9
	for k, v := range m {
		if strings.HasPrefix(k, "auditlens_detector_last_success_timestamp_seconds") && v > 0 {
			s.SinceEval = max(s.SinceEval, now-v)
		}
	}
	fs, err := recv.findings(cluster)
	if err != nil {
		return s, err
	}
	s.Findings = len(fs)
	for _, f := range fs {
		if f.Detector == "watch-loop" {
			s.Loops++
		}
	}
	return s, nil
}
