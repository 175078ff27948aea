package e2e

import (
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

func TestBusyCluster(t *testing.T) {
	prepare(t)
	dir := filepath.Join(tempRoot, "busy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t, dir)
	name := "e2e-busy-healthy"
	recv := startReceiverToken(t, ca, filepath.Join(dir, "auditlens"), name)
	c := startClusterWith(t, ca, filepath.Join(dir, "healthy"), name, recv.forCluster(name), nil, busyAPIServerFlags(ca)...)
	d := newDriver(t, c)
	d.recv = recv
	b := startBusy(d, c.base)
	d.sleep(30 * time.Second)
	b.stop()
	c.stop(t)
	checkEvents(t, recv, c)
}
