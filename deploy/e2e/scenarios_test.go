package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Compressed cluster time: a controller's watch restarts every few seconds
// instead of every 5-10 minutes.
const (
	// watchTimeout is the timeoutSeconds of every watch, so each client
	// re-watches every watchTimeout seconds. The watch-loop detector counts
	// watches less than 5 s apart as one restart (a quick retry); 7 s keeps
	// a margin for a loaded machine.
	watchTimeout = 7
	// loopIterations is how many times the incident's controller re-watches
	// from its stale resourceVersion.
	loopIterations = 5
	// churnDelay is how long after a looping watch starts the endpoints
	// controller deletes and re-creates Endpoints (the replay's aftermath).
	churnDelay = 400 * time.Millisecond
)

// expectation is what a scenario's audit log must make the detectors say.
// It is also written beside the fixture (fixtures/<scenario>.json) so that
// unit tests over the fixture need not hard-code resourceVersions.
type expectation struct {
	Scenario    string `json:"scenario"`
	Cluster     string `json:"cluster"`
	Description string `json:"description"`
	// WatchLoop, when set, is the watch-loop finding the scenario must
	// yield; otherwise it must yield none.
	WatchLoop *expectedFinding `json:"watch_loop,omitempty"`
	// RVRegression, when set, is the watch-rv-regression finding the
	// scenario must yield.
	RVRegression *expectedFinding `json:"watch_rv_regression,omitempty"`
	// RelistLoop, when set, is the relist-loop finding the scenario must
	// yield (relistloop_test.go).
	RelistLoop *expectedFinding `json:"relist_loop,omitempty"`
	// Silent lists the detectors that must find nothing.
	Silent []string `json:"silent,omitempty"`
	// AtMostInfo lists the detectors that may report information but no
	// warning.
	AtMostInfo []string `json:"at_most_info,omitempty"`
	// Heartbeat is what a heartbeat scenario did (heartbeat_test.go).
	Heartbeat *heartbeatTruth `json:"heartbeat,omitempty"`
}

type expectedFinding struct {
	User            string `json:"user"`
	UserAgent       string `json:"user_agent"`
	Resource        string `json:"resource"`
	ResourceVersion string `json:"resource_version"`
	// Objects must all be among the finding's objects; NotObjects none.
	Objects    []objectRef `json:"objects,omitempty"`
	NotObjects []objectRef `json:"not_objects,omitempty"`
	// Iterations is how many looping watches the driver made.
	Iterations int `json:"iterations,omitempty"`
	// Only: the finding must be the only one of its detector about the
	// same user and resource (one loop, one finding).
	Only bool `json:"only,omitempty"`
	// PartOfLoop: the finding began the scenario's watch loop, so it is
	// information naming the watch-loop finding, not a warning of its own.
	PartOfLoop bool `json:"part_of_loop,omitempty"`
}

type objectRef struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func endpointsRefs(names ...string) []objectRef {
	var out []objectRef
	for _, n := range names {
		out = append(out, objectRef{Resource: "endpoints", Namespace: "default", Name: n})
	}
	return out
}

type scenario struct {
	name string
	// token: the apiserver authenticates to auditlens with a bearer token;
	// otherwise with a client certificate.
	token bool
	// prelude runs before auditing starts (see startCluster).
	prelude func(d *driver)
	run     func(d *driver) expectation
}

var scenarios = []scenario{
	{"seed-incident", false, prelude, seedIncident},
	{"healthy-recreate", true, prelude, healthyRecreate},
	{"idle-constant-rv", false, idlePrelude, idleConstantRV},
	{"rv-regression", true, prelude, rvRegression},
	{"real-controllers", true, controllersPrelude, realControllers},
	{"kcm-watch-loop", false, kcmLoopPrelude, kcmWatchLoop},
	{"kcm-watch-loop-control", true, kcmLoopPrelude, kcmWatchLoopControl},
	{"relist-loop", false, relistLoopPrelude, relistLoop},
}

// seedIncident replays seeds 000/001: create, delete, create Services, then
// delete the early-created one; kube-controller-manager's reflector resumes
// from the deleted object's old resourceVersion at every restart, and each
// restart is followed by Endpoints delete→create for live Services.
func seedIncident(d *driver) expectation {
	d.configWriter()
	d.reflect(d.proxy, "/api/v1/services", watchTimeout, true)
	d.reflect(d.proxy, "/api/v1/endpoints", watchTimeout, true)
	healthy, stopHealthy := d.reflect(d.kcm, "/api/v1/services", watchTimeout, true)
	d.sleep(time.Second)
	legacyRV := d.createService("legacy", 0)
	d.sleep(time.Second)

	// The trigger: create, delete, create; then delete the early-created
	// Service. With the bug the DELETE event carries legacy's old
	// resourceVersion, the last the controller's reflector receives.
	d.createService("promo", 10)
	d.sleep(500 * time.Millisecond)
	d.deleteService("promo")
	d.sleep(500 * time.Millisecond)
	d.createService("promo-v2", 11)
	// Let the healthy reflector restart past legacy's resourceVersion, as
	// the real one had long done, before legacy goes.
	d.sleep(time.Duration(watchTimeout)*time.Second + 500*time.Millisecond)
	d.deleteService("legacy")
	d.sleep(time.Second)
	stopHealthy()
	d.t.Logf("kube-controller-manager watched services from %v before the trigger; now from %s", healthy.watchRVs(), legacyRV)
	if rvs := healthy.watchRVs(); !rvLess(legacyRV, rvs[len(rvs)-1]) {
		d.t.Errorf("kube-controller-manager's last healthy watch was from %s, not past legacy's %s", rvs[len(rvs)-1], legacyRV)
	}

	// The loop: every restart replays the Service events since legacyRV,
	// the controller's cache drops live Services, and the endpoints
	// controller deletes their Endpoints and re-creates them.
	victims := []string{"cart", "checkout", "payments"}
	for i := 0; i < loopIterations && d.ctx.Err() == nil; i++ {
		_, err := d.kcm.watch(d.ctx, "/api/v1/services", legacyRV, watchTimeout, false, func() {
			d.background("endpoints churn", func(ctx context.Context) error {
				select {
				case <-time.After(churnDelay):
				case <-ctx.Done():
					return nil
				}
				return d.endpointsChurn(ctx, victims)
			})
		})
		if err != nil && err != errGone {
			d.must(err)
		}
	}
	d.sleep(time.Second)
	return expectation{
		Description: "kube-controller-manager re-watches services from the stale resourceVersion of deleted Service legacy; " +
			"each watch start is followed within a second by Endpoints delete→create for cart, checkout and payments",
		WatchLoop: &expectedFinding{
			User: kcmID.user, UserAgent: kcmID.userAgent, Resource: "services", ResourceVersion: legacyRV,
			Objects:    endpointsRefs(victims...),
			NotObjects: endpointsRefs("promo", "legacy", "frontend", "catalog"),
			Iterations: loopIterations,
		},
		// Resuming from legacy's resourceVersion is also a regression: how
		// the loop began.
		RVRegression: &expectedFinding{
			User: kcmID.user, UserAgent: kcmID.userAgent, Resource: "services", ResourceVersion: legacyRV, PartOfLoop: true,
		},
	}
}

// healthyRecreate: controllers whose watches advance, and a user deleting
// and re-creating Services; the endpoints pairs that follow are legitimate.
func healthyRecreate(d *driver) expectation {
	d.configWriter()
	d.reflect(d.proxy, "/api/v1/services", watchTimeout, true)
	d.reflect(d.proxy, "/api/v1/endpoints", watchTimeout, true)
	kcm, _ := d.reflect(d.kcm, "/api/v1/services", watchTimeout, true)
	d.reflect(d.kcm, "/api/v1/endpoints", watchTimeout, true)
	d.sleep(3 * time.Second)
	for i, name := range []string{"cart", "checkout", "cart"} {
		d.deleteService(name)
		d.sleep(2 * time.Second)
		d.createService(name, 20+i)
		d.sleep(4 * time.Second)
	}
	d.sleep(2 * watchTimeout * time.Second)
	d.t.Logf("kube-controller-manager watched services from %v", kcm.watchRVs())
	return expectation{
		Description: "healthy reflectors (kube-controller-manager, kube-proxy) with advancing resourceVersions; " +
			"alice deletes and re-creates Services cart, checkout and cart again, each followed by the endpoints pair",
		Silent: []string{"watch-loop", "watch-rv-regression"},
	}
}

// idleConstantRV: watchers of idle resources legitimately re-watch from the
// same resourceVersion while unrelated writes advance the cluster's.
func idlePrelude(d *driver) {
	prelude(d)
	_, err := d.admin.create("", "namespaces", namespace("quiet"))
	d.must(err)
	_, err = d.admin.create("quiet", "configmaps", configMap("feature-flags", map[string]string{"dark-mode": "off"}))
	d.must(err)
}

func idleConstantRV(d *driver) expectation {
	d.configWriter()
	// No bookmarks: with nothing changing, every restart asks for the same
	// resourceVersion.
	kcm, _ := d.reflect(d.kcm, "/api/v1/services", watchTimeout, false)
	d.reflect(d.proxy, "/api/v1/services", watchTimeout, false)
	reloader, _ := d.reflect(d.reloader, "/api/v1/namespaces/quiet/configmaps", watchTimeout, false)
	d.sleep(time.Duration(loopIterations*watchTimeout+2) * time.Second)
	for _, r := range []*reflector{kcm, reloader} {
		rvs := r.watchRVs()
		if len(rvs) < 3 || distinct(rvs) != 1 {
			d.t.Errorf("%s's watches of %s used resourceVersions %v, want one constant resourceVersion", r.a.id.user, r.path, rvs)
		}
	}
	return expectation{
		Description: "kube-controller-manager, kube-proxy and a config reloader re-watch idle Services and ConfigMaps " +
			"from a constant resourceVersion while another namespace's ConfigMaps churn; no Endpoints change",
		Silent: []string{"watch-loop", "watch-rv-regression"},
	}
}

// rvRegression: kube-proxy's reflector, advancing, receives a DELETE event
// carrying the deleted object's old resourceVersion (seed 001) and restarts
// from below a resourceVersion it already used.
func rvRegression(d *driver) expectation {
	legacyRV := d.createService("legacy", 0)
	d.configWriter()
	d.reflect(d.kcm, "/api/v1/services", watchTimeout, true)
	const short = 3 // seconds per kube-proxy watch
	var used []string
	rv, err := d.proxy.list(d.ctx, "/api/v1/services")
	d.must(err)
	watch := func(from string) string {
		used = append(used, from)
		next, err := d.proxy.watch(d.ctx, "/api/v1/services", from, short, false, nil)
		if err != nil && err != errGone {
			d.must(err)
		}
		return next
	}
	d.background("alice", func(ctx context.Context) error {
		for i, name := range []string{"promo", "promo-v2"} {
			select {
			case <-time.After(time.Duration(1+i*short) * time.Second):
			case <-ctx.Done():
				return nil
			}
			if _, err := d.alice.create("default", "services", service(name)); err != nil {
				return err
			}
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		rv = watch(rv)
	}
	d.deleteService("legacy")
	// The reflector took legacy's old resourceVersion from the DELETE event.
	rv = watch(legacyRV)
	for i := 0; i < 2; i++ {
		rv = watch(rv)
	}
	d.t.Logf("kube-proxy watched services from %v (legacy was created at %s)", used, legacyRV)
	if rvLess(used[2], used[0]) || !rvLess(legacyRV, used[2]) {
		d.t.Errorf("kube-proxy's watches %v do not advance and then regress to %s", used, legacyRV)
	}
	return expectation{
		Description: "kube-proxy's watches of services advance, then restart from deleted Service legacy's old resourceVersion",
		RVRegression: &expectedFinding{
			User: proxyID.user, UserAgent: proxyID.userAgent, Resource: "services", ResourceVersion: legacyRV,
		},
		Silent: []string{"watch-loop"},
	}
}

func distinct(s []string) int {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return len(m)
}

// rvLess compares resourceVersions as etcd revisions.
func rvLess(a, b string) bool {
	var x, y int64
	fmt.Sscan(a, &x)
	fmt.Sscan(b, &y)
	return x < y
}

// TestRealAPIServer runs every scenario against a real kube-apiserver whose
// audit webhook sends to auditlens: two receivers, one authenticating the
// apiserver by client certificate, one by bearer token.
func TestRealAPIServer(t *testing.T) {
	// The real-component tests wait on cluster time far more than they
	// compute (the whole package uses ~4 CPU-minutes in ~16 minutes of
	// scenarios): they run side by side (make test passes -parallel 4).
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t, dir)
	var tokenClusters []string
	for _, sc := range scenarios {
		if sc.token {
			tokenClusters = append(tokenClusters, clusterName(sc))
		}
	}
	mtls := startReceiverMTLS(t, ca, filepath.Join(dir, "auditlens-mtls"))
	token := startReceiverToken(t, ca, filepath.Join(dir, "auditlens-token"), tokenClusters...)

	// The findings checks run after every scenario, which gives the
	// receivers' detectors time to evaluate the earlier ones.
	var results []*scenarioResult
	for _, sc := range scenarios {
		recv := mtls
		if sc.token {
			recv = token
		}
		t.Run(sc.name, func(t *testing.T) {
			if res := runScenario(t, ca, filepath.Join(dir, sc.name), recv, sc); res != nil {
				results = append(results, res)
			}
		})
	}
	for _, res := range results {
		sc := res.exp.Scenario
		t.Run(sc+"/findings", func(t *testing.T) { checkFindings(t, res) })
		t.Run(sc+"/scan", func(t *testing.T) { checkScan(t, res) })
	}
	for _, r := range []*receiver{mtls, token} {
		if err := r.proc.stop(60 * time.Second); err != nil {
			t.Errorf("auditlens serve: %v\n%s", err, r.proc.logTail(30))
		}
	}
}

func clusterName(sc scenario) string { return "e2e-" + sc.name }

// runScenario runs sc on its own cluster and checks the events stored; it
// returns what the findings checks need, nil when the scenario failed.
func runScenario(t *testing.T, ca *testCA, dir string, recv *receiver, sc scenario) *scenarioResult {
	name := clusterName(sc)
	c := startCluster(t, ca, dir, name, recv.forCluster(name), func(c *cluster) {
		p := newDriver(t, c)
		sc.prelude(p)
		p.stop()
	})
	d := newDriver(t, c)
	d.recv = recv
	start := time.Now()
	exp := sc.run(d)
	d.stop()
	t.Logf("scenario ran for %s", time.Since(start).Round(100*time.Millisecond))
	exp.Scenario, exp.Cluster = sc.name, name
	// Stopping the apiserver flushes its audit webhook: afterwards the log
	// file is complete and every batch the apiserver meant to send is sent.
	c.stop(t)
	if t.Failed() {
		return nil
	}

	checkEvents(t, recv, c)
	if updateFixtures && !t.Failed() {
		saveFixture(t, sc.name, c.auditLog, exp)
	}
	return &scenarioResult{exp: exp, recv: recv, auditLog: c.auditLog, ended: time.Now()}
}

// scenarioResult is what the findings checks need of a scenario that ran.
type scenarioResult struct {
	exp      expectation
	recv     *receiver
	auditLog string
	ended    time.Time
}

// checkEvents asserts that auditlens stored exactly the events of the
// apiserver's own log file, by (auditID, stage): nothing lost, nothing
// duplicated, nothing invented — except the events the apiserver itself
// reports it did not send. At shutdown it stops its webhook backend before
// its own informers' watches end, logs their ResponseComplete to the file
// and drops them from the webhook ("Error in audit plugin 'buffered'
// affecting 1 audit events: audit backend shut down", then the event's
// "AUDIT: id=… stage=…"). Any other drop is an error.
func checkEvents(t *testing.T, recv *receiver, c *cluster) {
	t.Helper()
	checkEventsFrom(t, recv, c, "")
}

// checkEventsFrom is checkEvents of the events stored as sent by apiserver
// (the name its webhook identity gives it) of an HA control plane, c being
// that apiserver's cluster value (ha_test.go); "" compares every event of
// the cluster.
func checkEventsFrom(t *testing.T, recv *receiver, c *cluster, apiserver string) {
	t.Helper()
	want, err := fileKeys(c.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatalf("the apiserver wrote no audit events to %s", c.auditLog)
	}
	dropped, err := apiserverDrops(c.apiserver.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for k := range dropped {
		if want[k] == 0 {
			t.Errorf("the apiserver reports dropping %s/%s, which is not in its audit log", k.auditID, k.stage)
		}
		delete(want, k)
	}
	var diff string
	ok := poll(90*time.Second, 500*time.Millisecond, func() bool {
		stored, err := recv.storedKeysFrom(c.name, apiserver)
		if err != nil {
			diff = err.Error()
			return false
		}
		diff = diffKeys(want, stored)
		return diff == ""
	})
	if !ok {
		t.Errorf("events stored by auditlens differ from the apiserver's audit log: %s\nauditlens log:\n%s", diff, recv.proc.logTail(20))
		return
	}
	t.Logf("auditlens stored the %d events of the apiserver's audit log, each once (the apiserver dropped %d more at its shutdown)", len(want), len(dropped))
}

var (
	auditPluginErrorRE = regexp.MustCompile(`Error in audit plugin '([^']+)' affecting (\d+) audit events: (.*)`)
	auditDroppedRE     = regexp.MustCompile(`AUDIT: id="([^"]+)" stage="([^"]+)"`)
)

// apiserverDrops reads the events the apiserver logged as not sent by its
// webhook backend because the backend had shut down; any other audit
// plugin error is returned as an error.
func apiserverDrops(logPath string) (map[eventKey]int, error) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	dropped := map[eventKey]int{}
	announced := 0
	for _, line := range strings.Split(string(b), "\n") {
		if m := auditPluginErrorRE.FindStringSubmatch(line); m != nil {
			if m[3] != "audit backend shut down" {
				return nil, fmt.Errorf("the apiserver's audit plugin %s failed: %s", m[1], m[0])
			}
			n, _ := strconv.Atoi(m[2])
			announced += n
		} else if m := auditDroppedRE.FindStringSubmatch(line); m != nil {
			dropped[eventKey{m[1], m[2]}]++
		}
	}
	if len(dropped) != announced {
		return nil, fmt.Errorf("the apiserver log announces %d dropped audit events and lists %d", announced, len(dropped))
	}
	return dropped, nil
}
