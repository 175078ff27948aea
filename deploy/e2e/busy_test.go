package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The busy cluster: etcd, kube-apiserver, the real kube-controller-manager
// and kube-scheduler, and busyNodes kubemark hollow nodes (hollow_test.go),
// running a workload of our own after SIG Scalability's load test
// (load_test.go).

// busyNodes is how many hollow nodes the busy cluster runs.
const busyNodes = 10

// busyAPIServerFlags: kubelets authenticate with client certificates of
// the test CA and are authorized by the Node authorizer, with
// NodeRestriction admission, as in a real cluster.
func busyAPIServerFlags(ca *testCA) []string {
	return []string{
		"--client-ca-file=" + ca.pemPath,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
	}
}

// busyCluster is the control plane and the nodes of one busy scenario.
type busyCluster struct {
	d         *driver
	kcm       *proc
	scheduler *proc
	nodes     []*hollowNode
	obs       *observer
	ready     time.Time // when every node was Ready
}

// busyNodeNames are the hollow nodes' names.
func busyNodeNames() []string {
	var out []string
	for i := 1; i <= busyNodes; i++ {
		out = append(out, "hollow-"+twoDigits(i))
	}
	return out
}

func twoDigits(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// startBusy starts the controller-manager against kcmServer (the apiserver,
// or a proxy in front of it) with extra flags, the scheduler, the observer
// and the hollow nodes, and waits until every node is Ready.
func startBusy(d *driver, kcmServer string, kcmFlags ...string) *busyCluster {
	d.t.Helper()
	start := time.Now()
	b := &busyCluster{d: d}
	b.obs = startObserver(d)
	b.kcm = startControllerManager(d, kcmServer, append(append([]string{}, hbControllerFlags...), kcmFlags...)...)
	b.scheduler = startKubeScheduler(d)
	b.nodes = startHollowNodes(d, busyNodeNames(), hollowConfig{proxy: true})
	waitNodesReady(d, b.obs, b.nodes, 2*time.Minute)
	b.ready = time.Now()
	d.t.Logf("busy cluster: %d hollow nodes Ready %.1fs after the controller-manager started", len(b.nodes), time.Since(start).Seconds())
	return b
}

// stop stops the nodes, the scheduler and the controller-manager, in that
// order, while the apiserver still sends to auditlens (so that their
// watches' ends are delivered too), then the driver's own actors.
func (b *busyCluster) stop() {
	t := b.d.t
	t.Helper()
	for _, n := range b.nodes {
		if n.stopped {
			if err := n.thaw(); err != nil {
				t.Error(err)
			}
		}
		for _, p := range []*proc{n.kubelet, n.proxy} {
			if p != nil {
				if err := p.stop(30 * time.Second); err != nil {
					t.Errorf("%s of node %s: %v\n%s", p.name, n.name, err, p.logTail(20))
				}
			}
		}
	}
	// kube-scheduler exits 1 on SIGTERM without leader election
	// ("finished without leader elect"): that is how it ends.
	_ = b.scheduler.stop(30 * time.Second)
	if err := b.kcm.stop(30 * time.Second); err != nil {
		t.Errorf("kube-controller-manager: %v\n%s", err, b.kcm.logTail(30))
	}
	b.d.stop()
}

// allDetectors are the detectors auditlens runs; a healthy busy cluster
// must leave every one of them silent.
var allDetectors = []string{"watch-loop", "watch-rv-regression", "relist-herd", "relist-loop", heartbeatLossName, "rv-rollback"}

// busyScenario is one run of the busy cluster: run starts it (startBusy),
// drives the load with or without a fault, stops it (b.stop) and says
// what the detectors must find.
type busyScenario struct {
	name string
	run  func(d *driver) expectation
}

var busyScenarios = []busyScenario{
	{"healthy", busyHealthy},
	{"heartbeat-wave", busyHeartbeatWave},
	{"watch-loop", busyWatchLoop},
}

// TestBusyCluster runs the load on the busy cluster, once healthy and once
// with each fault, each on its own cluster, one after the other, sending
// to one auditlens serve, and checks its findings and `auditlens scan`'s.
func TestBusyCluster(t *testing.T) {
	// Like the other real-component tests it waits on cluster time more
	// than it computes; make test passes -parallel 4.
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "busy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t, dir)
	var clusters []string
	for _, sc := range busyScenarios {
		clusters = append(clusters, "e2e-busy-"+sc.name)
	}
	recv := startReceiverToken(t, ca, filepath.Join(dir, "auditlens"), clusters...)
	for _, sc := range busyScenarios {
		t.Run(sc.name, func(t *testing.T) {
			start := time.Now()
			res := runBusyScenario(t, ca, filepath.Join(dir, sc.name), recv, sc)
			if res == nil {
				return
			}
			t.Run("findings", func(t *testing.T) { checkFindings(t, res) })
			t.Run("scan", func(t *testing.T) { checkScan(t, res) })
			if updateFixtures && !t.Failed() {
				saveFixtureGzip(t, res.exp.Scenario, res.auditLog, res.exp)
			}
			t.Logf("%s: %.0fs from the cluster's start to checked findings", sc.name, time.Since(start).Seconds())
		})
	}
	if err := recv.proc.stop(60 * time.Second); err != nil {
		t.Errorf("auditlens serve: %v\n%s", err, recv.proc.logTail(30))
	}
}

// runBusyScenario is runScenario for the busy cluster: its apiserver
// authenticates kubelets by certificate and authorizes them as nodes.
func runBusyScenario(t *testing.T, ca *testCA, dir string, recv *receiver, sc busyScenario) *scenarioResult {
	name := "e2e-busy-" + sc.name
	c := startClusterWith(t, ca, dir, name, recv.forCluster(name), nil, busyAPIServerFlags(ca)...)
	d := newDriver(t, c)
	d.recv = recv
	start := time.Now()
	exp := sc.run(d)
	d.stop()
	t.Logf("scenario ran for %s", time.Since(start).Round(100*time.Millisecond))
	exp.Scenario, exp.Cluster = "busy-"+sc.name, name
	c.stop(t)
	if t.Failed() {
		return nil
	}
	checkEvents(t, recv, c)
	if t.Failed() {
		return nil
	}
	return &scenarioResult{exp: exp, recv: recv, auditLog: c.auditLog, ended: time.Now()}
}

// busyRounds is how many times the healthy run plays the whole load. The
// second round re-creates the namespaces, Services and workloads of the
// first under the same names: Endpoints deleted and created again by a
// healthy controller, which watch-loop must tell from a loop.
const busyRounds = 2

// busyHealthy runs every wave of the load with nothing wrong: every
// detector must stay silent.
func busyHealthy(d *driver) expectation {
	b := startBusy(d, d.c.base)
	writes := 0
	var l *load
	for round := 1; round <= busyRounds; round++ {
		l = newLoad(d, b.obs, busyLoad, len(b.nodes))
		l.create(3 * time.Minute)
		l.scale(2 * time.Minute)
		l.update(3 * time.Minute)
		l.remove(l.workloadsOf("statefulsets", "jobs"), 2*time.Minute)
		l.deleteNamespaces(3 * time.Minute)
		writes += l.ops
	}
	b.stop()
	return expectation{
		Description: fmt.Sprintf("the real controller-manager and scheduler over %d kubemark hollow nodes; %s creates %d namespaces of "+
			"Deployments, StatefulSets, Jobs and a DaemonSet with their Services, ConfigMaps and Secrets, scales them, rolls them out "+
			"and deletes them, %d times under the same names (%d writes)", len(b.nodes), loadID.user, len(l.namespaces), busyRounds, writes),
		Silent: allDetectors,
	}
}
