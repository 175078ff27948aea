package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHAWatchLoop re-creates the kcm-watch-loop incident on an HA control
// plane: two kube-apiservers on one etcd, each sending its audit events to
// the same auditlens under its own webhook token (cluster e2e-ha,
// apiserver kube-apiserver-a or kube-apiserver-b) and writing its own audit
// log. The real kube-controller-manager reaches them through the fault
// proxy (the 1.7–1.9 watch cache of both apiservers: faultproxy_test.go)
// and, behind it, a TCP load balancer that sends every connection to
// apiserver A until, after two restarts of the loop through A, it fails
// over to B: it resets every connection it carries and sends new ones to
// B, from another source address, as the other node of an active/passive
// pair would. The controller-manager's reflector resumes from legacy's
// stale resourceVersion through B as it did through A.
//
// auditlens must raise one watch-loop finding for that reflector, whose
// evidence holds its watches as both apiservers logged them and every
// victim, from the webhook and from `scan` over both audit logs; each
// apiserver's events must be stored as its own. The control
// (ha-watch-loop-control) makes the same failover without the rewrite and
// must stay silent.
func TestHAWatchLoop(t *testing.T) {
	// It waits on cluster time far more than it computes: side by side
	// with the other real-component tests, as TestRealAPIServer is.
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "ha")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t, dir)
	runs := []struct {
		name    string
		rewrite bool
	}{{"ha-watch-loop", true}, {"ha-watch-loop-control", false}}
	var tokens []string
	for _, r := range runs {
		for _, api := range haAPIServers {
			tokens = append(tokens, "--webhook-token", haToken("e2e-"+r.name, api)+"=e2e-"+r.name+"/"+api)
		}
	}
	recv := startReceiverTokenArgs(t, ca, filepath.Join(dir, "auditlens"), nil, tokens)
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) { haWatchLoop(t, ca, filepath.Join(dir, r.name), recv, "e2e-"+r.name, r.rewrite) })
	}
	if err := recv.proc.stop(60 * time.Second); err != nil {
		t.Errorf("auditlens serve: %v\n%s", err, recv.proc.logTail(30))
	}
}

// haAPIServers name the two apiservers of the HA control plane, as their
// webhook tokens tell auditlens.
var haAPIServers = [2]string{"kube-apiserver-a", "kube-apiserver-b"}

func haToken(cluster, apiserver string) string { return "webhook-" + cluster + "-" + apiserver }

// haLBSource is the address the load balancer connects to each apiserver
// from: after the failover the controller-manager's requests reach the
// apiservers from another address, as through another node of the pair.
var haLBSource = [2]string{"127.0.10.1", "127.0.10.2"}

// haFailoverAfter is how long into the second restart's watch through A
// the load balancer fails over: more than the 5 s within which the
// watch-loop detector counts a re-watch as a quick retry of the same
// restart, less than the proxy's shortest cut (15 s).
const haFailoverAfter = 8 * time.Second

// haRestartsThroughB is how many restarts of the loop through B the run
// waits for, the first being the re-watch right after the failover; the
// control, which has no loop to prove, waits for the first cut after it.
const (
	haRestartsThroughB        = 3
	haControlRestartsThroughB = 2
)

func haWatchLoop(t *testing.T, ca *testCA, dir string, recv *receiver, name string, rewrite bool) {
	start := time.Now()
	sinks := [2]sink{recv.sink, recv.sink}
	for i, api := range haAPIServers {
		sinks[i].token = haToken(name, api)
	}
	a := startCluster(t, ca, filepath.Join(dir, "a"), name, sinks[0], func(c *cluster) {
		p := newDriver(t, c)
		kcmLoopPrelude(p)
		p.stop()
	})
	// B starts before the story, so that its watch cache holds every event
	// since legacy's creation, as a long-running apiserver's does.
	b := a.startPeer(t, filepath.Join(dir, "b"), sinks[1])
	lb := startLoadBalancer(t, []lbBackend{
		{name: haAPIServers[0], addr: hostPort(t, a.base), from: haLBSource[0]},
		{name: haAPIServers[1], addr: hostPort(t, b.base), from: haLBSource[1]},
	})

	// The users (alice, the config writer, the test's own reads) talk to A
	// directly; only the controller-manager goes through the load balancer.
	d := newDriver(t, a)
	d.recv = recv
	behind := *a
	behind.base = "https://" + lb.addr
	px := startFaultProxy(&driver{t: t, c: &behind}, rewrite)
	kcm := startControllerManager(d, px.base, "--kube-api-content-type=application/json")
	t0 := time.Now()
	d.configWriter()
	st := kcmLoopTrigger(d, px, t0)

	restarts := func() []proxiedWatch {
		var out []proxiedWatch
		for _, w := range px.servicesWatches() {
			if w.Start.After(st.trigger) {
				out = append(out, w)
			}
		}
		return out
	}
	d.waitFor("2 restarts of kube-controller-manager's Services watch through apiserver A", 3*px.maxCut+10*time.Second,
		func() bool { return len(restarts()) >= 2 })
	d.sleep(time.Until(restarts()[1].Start.Add(haFailoverAfter)))
	if n := len(restarts()); n != 2 {
		t.Errorf("%d restarts through A before the failover, want 2 (the second's watch ended before %s)", n, haFailoverAfter)
	}
	failover, reset := lb.failover(1)
	t.Logf("the load balancer failed over to %s at %.1fs, resetting %d connections to %s", haAPIServers[1], failover.Sub(t0).Seconds(), reset, haAPIServers[0])
	throughB := func() []proxiedWatch {
		var out []proxiedWatch
		for _, w := range restarts() {
			if w.Start.After(failover) {
				out = append(out, w)
			}
		}
		return out
	}
	d.waitFor("kube-controller-manager to re-watch Services through apiserver B", 15*time.Second,
		func() bool { return len(throughB()) >= 1 })
	t.Logf("kube-controller-manager re-watched Services %.0fms after the failover", throughB()[0].Start.Sub(failover).Seconds()*1000)
	wantB := haRestartsThroughB
	if !rewrite {
		wantB = haControlRestartsThroughB
	}
	d.waitFor(fmt.Sprintf("%d restarts of kube-controller-manager's Services watch through apiserver B", wantB),
		time.Duration(wantB)*px.maxCut+10*time.Second,
		func() bool { return len(throughB()) >= wantB })
	if rewrite {
		// Both apiservers' replays churn victims: each victim at least
		// once after a restart through A and once after one through B.
		if !poll(px.maxCut+kcmLoopChurnWithin, 200*time.Millisecond, func() bool {
			return len(haChurned(px, restarts(), failover, st.victims)) == 0
		}) {
			t.Errorf("victims without churn after restarts through each apiserver: %v", haChurned(px, restarts(), failover, st.victims))
		}
	}
	// Let the last restart's churn window pass whole before the
	// controller-manager stops.
	d.sleep(kcmLoopChurnWithin + time.Second)
	rs := restarts()

	d.stop()
	if err := kcm.stop(30 * time.Second); err != nil {
		t.Errorf("kube-controller-manager: %v\n%s", err, kcm.logTail(30))
	}
	px.close()
	lb.close()
	all := px.servicesWatches()
	t.Logf("kube-controller-manager's Services watches through the fault proxy (rewrite %v; times from its start, legacy deleted at %.1fs, failover at %.1fs):%s",
		rewrite, st.trigger.Sub(t0).Seconds(), failover.Sub(t0).Seconds(), describeWatches(all, t0))
	t.Logf("its Endpoints writes:%s", describeWrites(px.endpointsWrites(), t0))
	t.Logf("load balancer connections by apiserver: %v", lb.connections())
	if n := px.opaqueResponses(); n > 0 {
		t.Errorf("%d Services responses were not JSON and passed unchanged (is --kube-api-content-type=application/json set?)", n)
	}
	st.checkRestarts(d, rs, px.endpointsWrites(), rewrite, t0)
	if len(all) == 0 {
		t.Fatal("no Services watch went through the fault proxy")
	}

	// Stopping the apiservers flushes their webhooks.
	if err := b.apiserver.stop(90 * time.Second); err != nil {
		t.Errorf("%s: %v\n%s", haAPIServers[1], err, b.apiserver.logTail(30))
	}
	a.stop(t)
	t.Logf("the run took %s", time.Since(start).Round(100*time.Millisecond))
	if t.Failed() {
		return
	}
	// Each apiserver's events are stored as its own, and no event of the
	// cluster is stored without its apiserver.
	tagged := 0
	for i, c := range []*cluster{a, b} {
		checkEventsFrom(t, recv, c, haAPIServers[i])
		keys, err := recv.storedKeysFrom(name, haAPIServers[i])
		if err != nil {
			t.Fatal(err)
		}
		tagged += len(keys)
	}
	if all, err := recv.storedKeys(name); err != nil {
		t.Error(err)
	} else if len(all) != tagged {
		t.Errorf("auditlens stored %d events of cluster %s, of which %d as sent by %s or %s", len(all), name, tagged, haAPIServers[0], haAPIServers[1])
	}
	// Each apiserver saw the controller-manager's Services watches come
	// from its side of the load balancer.
	for i, api := range haAPIServers {
		ips, err := recv.values(url.Values{"cluster": {name}, "apiserver": {api}, "verb": {"watch"}, "resource": {"services"},
			"user": {kcmID.user}}, `.sourceIPs | join(",")`)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]bool{haLBSource[i]: true}; !maps.Equal(ips, want) {
			t.Errorf("kube-controller-manager's Services watches stored as served by %s came from %v, want %s", api, slices.Sorted(maps.Keys(ips)), haLBSource[i])
		}
	}

	exp := expectation{Scenario: strings.TrimPrefix(name, "e2e-"), Cluster: name}
	desc := fmt.Sprintf("the real kube-controller-manager behind the fault proxy and a load balancer that fails over from %s to %s "+
		"after two restarts of its Services watch; alice creates Service legacy, then %v, deletes them, creates %v, re-creates %v, then deletes legacy",
		haAPIServers[0], haAPIServers[1], st.victims, st.others, st.victims)
	if rewrite {
		exp.Description = desc + "; the controller re-watches from legacy's stale resourceVersion through both apiservers"
		exp.WatchLoop = &expectedFinding{
			User: kcmID.user, UserAgent: all[0].UserAgent, Resource: "services", ResourceVersion: st.legacyRV,
			Objects: endpointsRefs(st.victims...), NotObjects: endpointsRefs(st.notVictims()...),
		}
	} else {
		exp.Description = desc + "; DELETED events pass unchanged (control)"
		exp.Silent = []string{"watch-loop", "watch-rv-regression"}
	}
	res := &scenarioResult{exp: exp, recv: recv, ended: time.Now()}
	t.Run("findings", func(t *testing.T) {
		checkFindings(t, res)
		if !rewrite || t.Failed() {
			return
		}
		fs, err := recv.findings(name)
		if err != nil {
			t.Fatal(err)
		}
		checkHALoop(t, recv, name, fs, "over the webhook")
	})
	t.Run("scan", func(t *testing.T) {
		got := scanLogs(t, name, a.auditLog, b.auditLog)
		if problems := matchFindings(exp, got); len(problems) > 0 {
			t.Errorf("auditlens scan %s %s (%s):\n  %s\ngot %s", a.auditLog, b.auditLog, exp.Description, strings.Join(problems, "\n  "), describe(got))
		}
		if rewrite {
			checkHALoop(t, recv, name, got, "by scan")
		}
	})
}

// checkHALoop checks that fs hold exactly one watch-loop finding, about
// the controller-manager's Services reflector, whose evidence holds
// watches served by each apiserver (as the receiver stored them). how
// says where fs came from.
func checkHALoop(t *testing.T, recv *receiver, cluster string, fs []finding, how string) {
	t.Helper()
	var loops []finding
	for _, f := range fs {
		if f.Detector == "watch-loop" {
			loops = append(loops, f)
		}
	}
	if len(loops) != 1 {
		t.Errorf("%d watch-loop findings %s, want one for kube-controller-manager's Services reflector:%s", len(loops), how, describeHALoops(loops))
		return
	}
	f := loops[0]
	t.Logf("the watch-loop finding %s:%s", how, describeHALoops(loops))
	for i, api := range haAPIServers {
		ids, err := recv.auditIDs(url.Values{"cluster": {cluster}, "apiserver": {api}, "verb": {"watch"},
			"resource": {"services"}, "user": {kcmID.user}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range f.Evidence {
			if e.Role == "static-watch" && ids[e.AuditID] {
				n++
			}
		}
		// Two restarts through A, haRestartsThroughB through B.
		want := 2
		if i == 1 {
			want = haRestartsThroughB
		}
		if n < want {
			t.Errorf("the finding %s holds %d watches from the stale resourceVersion served by %s, want at least %d", how, n, api, want)
		} else {
			t.Logf("the finding %s holds %d watches from the stale resourceVersion served by %s", how, n, api)
		}
	}
}

func describeHALoops(fs []finding) string {
	var b strings.Builder
	for _, f := range fs {
		var stale []string
		for _, s := range f.Subjects.StaleRVs {
			stale = append(stale, fmt.Sprintf("%s×%d", s.RV, s.Restarts))
		}
		roles := map[string]int{}
		for _, e := range f.Evidence {
			roles[e.Role]++
		}
		fmt.Fprintf(&b, "\n  [%s] user=%q ua=%q source_ip=%q resource=%q stale_rvs=%v restarts=%d iterations=%d evidence=%v: %s",
			f.ID, f.Subjects.User, f.Subjects.UserAgent, f.Subjects.SourceIP, f.Subjects.Resource, stale,
			f.Subjects.WatchRestarts, f.Subjects.Iterations, roles, f.Title)
	}
	return b.String()
}

// haChurned lists the victims whose Endpoints did not churn after some
// restart rs through A (before failover) and after some through B.
func haChurned(px *faultProxy, rs []proxiedWatch, failover time.Time, victims []string) []string {
	ws := proxyWrites(px.endpointsWrites())
	churns := [2]map[string]bool{{}, {}}
	for i, r := range rs {
		var next time.Time
		if i+1 < len(rs) {
			next = rs[i+1].Start
		}
		side := 0
		if r.Start.After(failover) {
			side = 1
		}
		_, churned := churnAfter(ws, r.Start, next, victims)
		for _, v := range churned {
			churns[side][v] = true
		}
	}
	var missing []string
	for _, v := range victims {
		for side, api := range haAPIServers {
			if !churns[side][v] {
				missing = append(missing, v+" through "+api)
			}
		}
	}
	return missing
}

// auditIDs returns the audit IDs of the stored events q selects.
func (r *receiver) auditIDs(q url.Values) (map[string]bool, error) {
	return r.values(q, ".auditID")
}

// values returns the strings program (jq) gives for the stored events q
// selects.
func (r *receiver) values(q url.Values, program string) (map[string]bool, error) {
	q = maps.Clone(q)
	q.Set("limit", "100000")
	q.Set("jq", program)
	code, body, err := r.get("/api/v1/events?" + q.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /api/v1/events?%s: %d %s", q.Encode(), code, bytes.TrimSpace(body))
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var v string
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("GET /api/v1/events?%s: unexpected line %q", q.Encode(), sc.Text())
		}
		out[v] = true
	}
	return out, sc.Err()
}

// startPeer starts another kube-apiserver of c's control plane in dir: on
// c's etcd, with c's flags (serving certificate, token file, service
// account keys, --endpoint-reconciler-type=none: both advertise 127.0.0.1,
// which Endpoints validation refuses), auditing to dir/audit.log and to s
// as cluster c.name. The value returned shares c's credentials and names;
// stop its apiserver, not it (etcd is c's).
//
// The peer keeps no identity Lease (APIServerIdentity off, and with it
// UnknownVersionInteroperabilityProxy, which needs it and has nothing to
// do between apiservers of one version): the Lease's name hashes the host
// name, so two apiservers on one host would renew the same Lease and each
// get a 409 every 10 s, which apiservers on their own hosts never do.
func (c *cluster) startPeer(t *testing.T, dir string, s sink) *cluster {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := *c
	p.dir, p.auditLog, p.etcd = dir, filepath.Join(dir, "audit.log"), nil
	args := slices.Concat(c.apiserverArgs, []string{"--feature-gates=APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false"}, auditFlags(t, dir, p.auditLog, c.name, s))
	p.apiserver = p.startAPIServer(t, "kube-apiserver", args)
	return &p
}

func hostPort(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// loadBalancer is a TCP load balancer on 127.0.0.1 in front of an HA
// control plane, one backend active at a time: each connection it accepts
// goes to the active backend, dialled from that backend's source address.
// failover makes another backend active and resets every connection to
// the others, as the other node of an active/passive pair does: it knows
// nothing of them, and the clients' next packets are refused.
type loadBalancer struct {
	t        *testing.T
	ln       net.Listener
	addr     string
	backends []lbBackend

	mu     sync.Mutex
	active int
	closed bool
	conns  map[*lbConn]bool
	counts map[string]int // connections accepted, by backend
	wg     sync.WaitGroup
}

type lbBackend struct {
	name, addr string
	from       string // source address of its connections
}

// lbConn is one connection through the balancer: the client's and, once
// dialled, the backend's.
type lbConn struct {
	backend        int
	client, server net.Conn
	reset          bool
}

func startLoadBalancer(t *testing.T, backends []lbBackend) *loadBalancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &loadBalancer{t: t, ln: ln, addr: ln.Addr().String(), backends: backends,
		conns: map[*lbConn]bool{}, counts: map[string]int{}}
	lb.wg.Add(1)
	go lb.serve()
	t.Cleanup(lb.close)
	return lb
}

func (lb *loadBalancer) serve() {
	defer lb.wg.Done()
	for {
		c, err := lb.ln.Accept()
		if err != nil {
			return
		}
		lb.wg.Add(1)
		go lb.handle(c)
	}
}

func (lb *loadBalancer) handle(client net.Conn) {
	defer lb.wg.Done()
	lb.mu.Lock()
	if lb.closed {
		lb.mu.Unlock()
		client.Close()
		return
	}
	lc := &lbConn{backend: lb.active, client: client}
	be := lb.backends[lb.active]
	lb.conns[lc] = true
	lb.counts[be.name]++
	lb.mu.Unlock()
	defer func() {
		lb.mu.Lock()
		delete(lb.conns, lc)
		lb.mu.Unlock()
	}()

	dialer := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(be.from)}}
	server, err := dialer.Dial("tcp", be.addr)
	lb.mu.Lock()
	if err != nil || lc.reset {
		lb.mu.Unlock()
		if err != nil {
			lb.t.Logf("load balancer: dialling %s from %s: %v", be.name, be.from, err)
		} else {
			server.Close()
		}
		resetConn(client)
		return
	}
	lc.server = server
	lb.mu.Unlock()

	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// resetConn closes c with a TCP RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// failover makes backend i the active one and resets every connection to
// another; it returns when, and how many connections it reset.
func (lb *loadBalancer) failover(i int) (time.Time, int) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.active = i
	n := 0
	for lc := range lb.conns {
		if lc.backend == i || lc.reset {
			continue
		}
		lc.reset = true
		n++
		resetConn(lc.client)
		if lc.server != nil {
			resetConn(lc.server)
		}
	}
	return time.Now(), n
}

// connections returns how many connections went to each backend.
func (lb *loadBalancer) connections() map[string]int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return maps.Clone(lb.counts)
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (lb *loadBalancer) close() {
	lb.mu.Lock()
	if lb.closed {
		lb.mu.Unlock()
		return
	}
	lb.closed = true
	_ = lb.ln.Close()
	for lc := range lb.conns {
		lc.client.Close()
		if lc.server != nil {
			lc.server.Close()
		}
	}
	lb.mu.Unlock()
	lb.wg.Wait()
}
