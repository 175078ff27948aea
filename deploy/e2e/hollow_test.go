package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Hollow nodes: kubemark (k8s.io/kubernetes/cmd/kubemark) runs the real
// kubelet over a fake container runtime, a fake cAdvisor and stub volume
// and container managers (--morph=kubelet), and the real kube-proxy over
// a proxier that programs nothing (--morph=proxy). What the apiserver
// sees of a hollow node is what it sees of a real one: node registration,
// Lease renewals, status updates, Pod status writes, the Pod, Node,
// Service, EndpointSlice, ConfigMap and Secret informers.
//
// Each hollow kubelet authenticates with a client certificate for
// system:node:<name> in group system:nodes and is authorized by the Node
// authorizer (busyClusterFlags), as a real kubelet is.
//
// Listeners. The pinned kubemark hard-codes the kubelet server's bind
// address (pkg/kubemark/hollow_kubelet.go sets KubeletConfiguration.Address
// to 0.0.0.0, and exposes no flag for it); only its port can be chosen, so
// each kubelet gets a port below the ephemeral range that was free on
// every interface a moment ago (freePortAnyAddr).
// The read-only port is switched off (--kubelet-read-only-port=0). The
// kubelet serves plain HTTP there (kubemark passes no TLS options), and
// nothing in these tests connects to it. There is no healthz listener:
// kubemark calls kubelet's RunKubelet, not the run that starts it. The
// hollow kube-proxy serves nothing (no healthz or metrics address is set).
// The fake runtime's, pod-resources' and plugin sockets are Unix sockets.
//
// Files. kubemark puts the kubelet's root directory (pods, plugins,
// pod-resources socket) in a fresh /tmp/hollow-kubelet.* and the fake
// runtime's socket at /tmp/kubelet_remote_<random>.sock, both hard-coded
// to /tmp (test/utils.MakeTempDirOrDie, cri-client/pkg/fake), and removes
// neither when it is stopped. Each node records the ones its kubelet made
// from its log (the socket's path is logged at verbosity 4 of
// remote_runtime.go, hence --vmodule) and removes them when the test ends.
//
// The hollow kube-proxy authenticates as system:kube-proxy, which the
// bootstrap policy binds to system:node-proxier, as kube-proxy's own
// credentials do in a real cluster.

// hollowNode is one kubemark hollow node.
type hollowNode struct {
	name    string
	dir     string
	port    int // the kubelet server's port (on 0.0.0.0, see above)
	kubelet *proc
	proxy   *proc // nil without --morph=proxy
	stopped bool  // SIGSTOPped
	// leftovers are what the kubelet left in /tmp (see above).
	leftovers []string
}

// hollowConfig is how startHollowNodes starts the nodes.
type hollowConfig struct {
	// proxy also starts a hollow kube-proxy per node.
	proxy bool
	// maxPods is each kubelet's --max-pods (default 110).
	maxPods int
}

// startHollowNodes starts a hollow kubelet (and kube-proxy) for each name,
// each with its own node identity, directory and kubelet port, against the
// driver's apiserver. waitNodesReady waits until they are registered and
// Ready.
func startHollowNodes(d *driver, names []string, cfg hollowConfig) []*hollowNode {
	d.t.Helper()
	var out []*hollowNode
	for _, name := range names {
		dir := filepath.Join(d.c.dir, "nodes", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			d.t.Fatal(err)
		}
		n := &hollowNode{name: name, dir: dir, port: freePortAnyAddr(d.t)}
		// Registered before the processes start, so it runs after they
		// are stopped.
		d.t.Cleanup(n.removeLeftovers)
		cert, key := d.c.ca.issueUser(d.t, dir, "kubelet", "system:node:"+name, "system:nodes")
		kubeconfig := writeFile(d.t, dir, "kubelet.kubeconfig", certKubeconfig(d.c.base, d.c.caPath, cert, key))
		var env []string
		args := []string{"--morph=kubelet", "--name=" + name, "--kubeconfig=" + kubeconfig,
			fmt.Sprintf("--kubelet-port=%d", n.port), "--kubelet-read-only-port=0",
			// The fake image service, not the host's containerd.
			"--use-host-image-service=false",
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--node-labels=topology.kubernetes.io/zone=e2e",
			"--vmodule=remote_runtime=4",
		}
		if cfg.maxPods > 0 {
			args = append(args, fmt.Sprintf("--max-pods=%d", cfg.maxPods))
		}
		n.kubelet = startProcEnv(d.t, dir, "hollow-kubelet", kubemarkBin, env, args...)
		if cfg.proxy {
			cert, key := d.c.ca.issueUser(d.t, dir, "kube-proxy", "system:kube-proxy")
			kubeconfig := writeFile(d.t, dir, "kube-proxy.kubeconfig", certKubeconfig(d.c.base, d.c.caPath, cert, key))
			n.proxy = startProcEnv(d.t, dir, "hollow-proxy", kubemarkBin, env,
				"--morph=proxy", "--name="+name, "--kubeconfig="+kubeconfig)
		}
		out = append(out, n)
	}
	return out
}

// Hollow kubelets' ports come from below the kernel's ephemeral range
// (32768 and up on Linux): a port that the system hands out for ":0"
// binds and outgoing connections can be taken by another process between
// the check and the kubelet's bind (it happened: "bind: address already
// in use" failed a busy-cluster run). No port is handed out twice.
const (
	hollowPortLow  = 20000
	hollowPortHigh = 32000
)

var hollowPorts struct {
	sync.Mutex
	given map[int]bool
}

// freePortAnyAddr returns a TCP port below the ephemeral range that was
// free on every interface a moment ago and that no other hollow node of
// this test process got: the hollow kubelet binds its server on 0.0.0.0.
func freePortAnyAddr(t *testing.T) int {
	t.Helper()
	hollowPorts.Lock()
	defer hollowPorts.Unlock()
	if hollowPorts.given == nil {
		hollowPorts.given = map[int]bool{}
	}
	start := hollowPortLow + rand.IntN(hollowPortHigh-hollowPortLow)
	for i := range hollowPortHigh - hollowPortLow {
		port := hollowPortLow + (start-hollowPortLow+i)%(hollowPortHigh-hollowPortLow)
		if hollowPorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		hollowPorts.given[port] = true
		return port
	}
	t.Fatalf("no free port in [%d, %d)", hollowPortLow, hollowPortHigh)
	return 0
}

// certKubeconfig is a kubeconfig for server that authenticates with a
// client certificate.
func certKubeconfig(server, caPath, certPath, keyPath string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: node
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: node
current-context: e2e
`, server, caPath, certPath, keyPath))
}

// tokenKubeconfig is a kubeconfig for server that authenticates with a
// bearer token.
func tokenKubeconfig(server, caPath, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: user
current-context: e2e
`, server, caPath, token))
}

// waitNodesReady waits until the observer sees every node Ready and
// without taints (the controller-manager removes the not-ready taint a
// new Node carries once it sees the Node Ready).
func waitNodesReady(d *driver, obs *observer, nodes []*hollowNode, timeout time.Duration) {
	d.t.Helper()
	start := time.Now()
	if !poll(timeout, 250*time.Millisecond, func() bool {
		for _, n := range nodes {
			if n.kubelet.exited() {
				return true
			}
		}
		ok, count := obs.allSchedulable()
		return ok && count == len(nodes)
	}) {
		ok, count := obs.allSchedulable()
		d.t.Fatalf("%d hollow nodes are not all Ready and untainted after %s (%d Nodes seen, all schedulable %v)", len(nodes), timeout, count, ok)
	}
	for _, n := range nodes {
		if n.kubelet.exited() {
			d.t.Fatalf("hollow kubelet %s exited (%v):\n%s", n.name, n.kubelet.err, n.kubelet.logTail(30))
		}
	}
	d.t.Logf("%d hollow nodes Ready %.1fs after they started", len(nodes), time.Since(start).Seconds())
	for _, n := range nodes {
		n.findLeftovers()
	}
}

var (
	hollowRootRE   = regexp.MustCompile(`Using (/tmp/hollow-kubelet\.[0-9]+) as root dir`)
	hollowSocketRE = regexp.MustCompile(`"Connecting to runtime service" endpoint="unix://(/tmp/kubelet_remote_[0-9]+\.sock)"`)
)

// findLeftovers records the kubelet's root directory and the fake
// runtime's socket, which it made in /tmp, from its log.
func (n *hollowNode) findLeftovers() {
	b, err := os.ReadFile(n.kubelet.logPath)
	if err != nil {
		return
	}
	for _, re := range []*regexp.Regexp{hollowRootRE, hollowSocketRE} {
		if m := re.FindSubmatch(b); m != nil {
			n.leftovers = append(n.leftovers, string(m[1]))
		}
	}
}

func (n *hollowNode) removeLeftovers() {
	if os.Getenv("AUDITLENS_E2E_KEEP") != "" {
		return
	}
	for _, p := range n.leftovers {
		os.RemoveAll(p)
	}
}

// freeze stops (SIGSTOP) a hollow node's processes: its kubelet and proxy
// keep their connections but send and read nothing, as a node that hangs.
func (n *hollowNode) freeze() error {
	for _, p := range []*proc{n.kubelet, n.proxy} {
		if p == nil {
			continue
		}
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stopping %s of node %s: %w", p.name, n.name, err)
		}
	}
	n.stopped = true
	return nil
}

// thaw continues (SIGCONT) a frozen node.
func (n *hollowNode) thaw() error {
	for _, p := range []*proc{n.kubelet, n.proxy} {
		if p == nil {
			continue
		}
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("continuing %s of node %s: %w", p.name, n.name, err)
		}
	}
	n.stopped = false
	return nil
}

// startKubeScheduler starts the real kube-scheduler as
// system:kube-scheduler, serving nothing.
func startKubeScheduler(d *driver) *proc {
	d.t.Helper()
	kubeconfig := writeFile(d.t, d.c.dir, "scheduler.kubeconfig", tokenKubeconfig(d.c.base, d.c.caPath, schedulerID.token))
	return startProc(d.t, d.c.dir, "kube-scheduler", kubeSchedulerBin,
		"--kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--leader-elect=false")
}
