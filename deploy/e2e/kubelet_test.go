package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Fake kubelets: each plays the part of a kubelet the apiserver sees (what a
// node's kubelet sends, not what it does on the node). It registers its
// Node, creates its Lease in kube-node-lease and renews it every 10 s the
// way the kubelet's lease controller does (PUT with the resourceVersion it
// holds; on 409 Conflict a GET and another PUT), posts node status now and
// then, keeps an informer on its own Node and on the Pods bound to it, marks
// those Pods Running and finishes deleting the ones the cluster deletes.
//
// A kubelet can be cut off from the apiserver (stop) and reconnected
// (resume): while cut off it sends nothing, as the seed-004 kubelets whose
// one HTTP/2 connection hung behind a load balancer; on reconnect it renews
// its Lease, posts its status and relists (see run).

// kubeletIDs are the fake kubelets' identities: system:node:<name> in group
// system:nodes, with the user agent of a real 1.37.2 kubelet, each
// connecting from its own loopback address as nodes do from their own
// hosts. The apiserver authorizes with RBAC alone (no Node authorizer),
// whose bootstrap policy grants the group system:nodes nothing since 1.8,
// so they are in system:masters too.
var kubeletIDs = func() []identity {
	var out []identity
	for i := 1; i <= 10; i++ {
		name := fmt.Sprintf("worker-%02d", i)
		out = append(out, identity{token: name + "-token", user: "system:node:" + name, uid: "uid-" + name,
			groups:    []string{"system:nodes", "system:masters"},
			userAgent: "kubelet/v1.37.2 (linux/amd64) kubernetes/unknown", sourceIP: fmt.Sprintf("127.0.2.%d", i)})
	}
	return out
}()

// nodeName is the Node a kubelet identity stands for.
func nodeName(id identity) string { return id.user[len("system:node:"):] }

// kubeletConfig is how a fleet of kubelets behaves.
type kubeletConfig struct {
	// LeaseDuration is the Lease's spec.leaseDurationSeconds (kubelet
	// default 40 s); the Lease is renewed every quarter of it (10 s), with
	// the lease controller's 4 % jitter.
	LeaseDuration time.Duration
	// StatusMin, StatusMax bound the interval at which each kubelet posts
	// its node status; each kubelet draws its own interval from them.
	// (A 1.37 kubelet posts status every 10 s when it changes and at least
	// every 5 min; with nothing changing, a real fleet posts at intervals
	// anywhere in that range.)
	StatusMin, StatusMax time.Duration
	// WatchMin is client-go's minimum watch timeout (5 min): each watch
	// asks for a random timeout between it and twice it.
	WatchMin time.Duration
	// Seed seeds the kubelets' random draws (status intervals, jitter).
	Seed uint64
}

func (c kubeletConfig) withDefaults() kubeletConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 40 * time.Second
	}
	if c.StatusMin == 0 {
		c.StatusMin, c.StatusMax = 20*time.Second, 60*time.Second
	}
	if c.WatchMin == 0 {
		c.WatchMin = 5 * time.Minute
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return c
}

// fleet is a set of fake kubelets running for one scenario.
type fleet struct {
	d        *driver
	cfg      kubeletConfig
	kubelets []*kubelet
}

// startKubelets starts a kubelet for each identity; each registers its Node
// and Lease within the first renewal interval. waitRegistered waits until
// all have.
func startKubelets(d *driver, ids []identity, cfg kubeletConfig) *fleet {
	cfg = cfg.withDefaults()
	f := &fleet{d: d, cfg: cfg}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for _, id := range ids {
		k := &kubelet{d: d, a: d.c.actor(id), name: nodeName(id), cfg: cfg,
			statusEvery: cfg.StatusMin + time.Duration(rng.Int64N(int64(cfg.StatusMax-cfg.StatusMin)+1)),
			rng:         rand.New(rand.NewPCG(cfg.Seed, rng.Uint64())),
			up:          true, registered: make(chan struct{}), wake: make(chan struct{})}
		k.conn, k.cut = context.WithCancel(d.ctx)
		f.kubelets = append(f.kubelets, k)
		// Nodes boot at different moments: each kubelet starts within one
		// renewal interval, so that their renewals do not all fall in the
		// same second.
		delay := time.Duration(rng.Int64N(int64(cfg.LeaseDuration / 4)))
		d.background(id.user, func(ctx context.Context) error {
			sleepCtx(ctx, delay)
			return k.run(ctx)
		})
	}
	return f
}

func (f *fleet) names() []string {
	var out []string
	for _, k := range f.kubelets {
		out = append(out, k.name)
	}
	return out
}

func (f *fleet) get(name string) *kubelet {
	for _, k := range f.kubelets {
		if k.name == name {
			return k
		}
	}
	f.d.t.Fatalf("no kubelet of node %s", name)
	return nil
}

// waitRegistered waits until every kubelet has registered its Node and
// Lease and posted a Ready status.
func (f *fleet) waitRegistered(timeout time.Duration) {
	f.d.t.Helper()
	deadline := time.After(timeout)
	for _, k := range f.kubelets {
		select {
		case <-k.registered:
		case <-deadline:
			f.d.t.Fatalf("kubelet %s did not register within %s", k.name, timeout)
		case <-f.d.ctx.Done():
			return
		}
	}
}

// stop cuts the named kubelets off the apiserver, all at the same moment.
func (f *fleet) stop(names ...string) {
	for _, n := range names {
		f.get(n).stop()
	}
}

// resume reconnects the named kubelets, all at the same moment.
func (f *fleet) resume(names ...string) {
	for _, n := range names {
		f.get(n).resume()
	}
}

// kubelet is one fake kubelet.
type kubelet struct {
	d           *driver
	a           *actor
	name        string
	cfg         kubeletConfig
	statusEvery time.Duration
	rng         *rand.Rand // used by the kubelet's own goroutine only

	registered chan struct{} // closed once Node and Lease exist

	mu   sync.Mutex
	up   bool
	conn context.Context // the current connection; cancelled by stop
	cut  context.CancelFunc
	wake chan struct{} // closed by resume
	// lease is the Lease as last read or written: what the next PUT sends.
	lease map[string]any
	// renewals, statusPosts count successful heartbeats; conflicts counts
	// 409 answers to lease PUTs.
	renewals, statusPosts, conflicts int
	lastRenewal                      time.Time
	podIPs                           int // Pod IPs handed out
}

func (k *kubelet) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.up {
		return
	}
	k.up = false
	k.cut()
}

func (k *kubelet) resume() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.up {
		return
	}
	k.up = true
	k.conn, k.cut = context.WithCancel(k.d.ctx)
	close(k.wake)
	k.wake = make(chan struct{})
}

// connection waits until the kubelet is connected and returns the
// connection's context; false when the scenario ends.
func (k *kubelet) connection(ctx context.Context) (context.Context, bool) {
	for {
		k.mu.Lock()
		up, conn, wake := k.up, k.conn, k.wake
		k.mu.Unlock()
		if up {
			return conn, true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// renewed reports how many times the kubelet renewed its Lease and when
// it last did.
func (k *kubelet) renewed() (int, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewals, k.lastRenewal
}

// run is the kubelet's life: a session per connection.
//
// Each session (re)registers when needed, renews the Lease and posts status
// at once, then heartbeats until the connection is cut. Its informers of
// the Node and the Pods outlive a cut, as the seed's kubelets' watches did
// on their hung connection: the apiserver keeps streaming into a watch
// nobody reads, and the kubelet makes no new request. On reconnect the
// kubelet closes them and relists: the seed's kubelets were cut off for
// ~15 min, far longer than the watch cache keeps history, so resuming their
// watches would have got 410 Gone and a relist anyway.
func (k *kubelet) run(ctx context.Context) error {
	stopInformers := func() {}
	defer func() { stopInformers() }()
	for ctx.Err() == nil {
		conn, ok := k.connection(ctx)
		if !ok {
			return nil
		}
		if err := k.register(conn); err != nil {
			return err
		}
		select {
		case <-k.registered:
		default:
			// The apiserver did not answer in time: try again.
			sleepCtx(conn, time.Second)
			continue
		}
		stopInformers()
		stopInformers = k.startInformers(ctx)
		if err := k.heartbeat(conn); err != nil && conn.Err() == nil {
			return err
		}
	}
	return nil
}

// startInformers starts the informers of the Node and of its Pods; the
// function returned stops them and waits until they have.
func (k *kubelet) startInformers(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, inf := range []func(context.Context) error{k.nodeInformer, k.podInformer} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := inf(ctx); err != nil && ctx.Err() == nil {
				k.d.fail(fmt.Errorf("%s: %w", k.a.id.user, err))
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// connected tells whether the kubelet is connected; waitConnected blocks
// while it is cut off, until ctx ends (false).
func (k *kubelet) connected() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.up
}

func (k *kubelet) waitConnected(ctx context.Context) bool {
	if k.connected() {
		return true
	}
	<-ctx.Done()
	return false
}

// register creates the Node (or finds it), posts a Ready status and
// creates the Lease (or reads it), as the kubelet does at start.
func (k *kubelet) register(conn context.Context) error {
	select {
	case <-k.registered:
		return nil
	default:
	}
	code, body, err := k.send(conn, http.MethodPost, "/api/v1/nodes", "", fakeNode(k.name))
	switch {
	case err != nil:
		return k.retryable(conn, err)
	case code == http.StatusConflict:
	case code != http.StatusCreated:
		return fmt.Errorf("registering node %s: %d %s", k.name, code, bytes.TrimSpace(body))
	}
	if err := k.postStatus(conn); err != nil {
		return err
	}
	if err := k.readLease(conn); err != nil {
		return err
	}
	if k.lease == nil {
		code, body, err := k.send(conn, http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "", kubeletLease(k.name, k.cfg.LeaseDuration))
		if err != nil {
			return k.retryable(conn, err)
		}
		if code != http.StatusCreated {
			return fmt.Errorf("creating lease %s: %d %s", k.name, code, bytes.TrimSpace(body))
		}
		if err := k.holdLease(body); err != nil {
			return err
		}
	}
	close(k.registered)
	return nil
}

// heartbeat renews the Lease every quarter of its duration (with 4 %
// jitter) and posts node status every statusEvery, both at once when the
// connection is new.
func (k *kubelet) heartbeat(conn context.Context) error {
	renewEvery := k.cfg.LeaseDuration / 4
	nextRenew, nextStatus := time.Now(), time.Now()
	for {
		now := time.Now()
		if !now.Before(nextRenew) {
			if err := k.renewLease(conn); err != nil {
				return err
			}
			nextRenew = time.Now().Add(renewEvery + time.Duration(k.rng.Float64()*0.04*float64(renewEvery)))
		}
		if !now.Before(nextStatus) {
			if err := k.postStatus(conn); err != nil {
				return err
			}
			nextStatus = time.Now().Add(k.statusEvery)
		}
		wait := time.Until(nextRenew)
		if s := time.Until(nextStatus); s < wait {
			wait = s
		}
		select {
		case <-time.After(wait):
		case <-conn.Done():
			return nil
		}
	}
}

const leasesPath = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"

// renewLease PUTs the held Lease with a new renewTime; on 409 it reads the
// Lease again and retries, up to five times as the lease controller does.
func (k *kubelet) renewLease(conn context.Context) error {
	for try := 0; try < 5; try++ {
		k.mu.Lock()
		lease := k.lease
		k.mu.Unlock()
		spec, _ := lease["spec"].(map[string]any)
		spec["renewTime"] = microTime(time.Now())
		code, body, err := k.send(conn, http.MethodPut, leasesPath+k.name, "", lease)
		if err != nil {
			return k.retryable(conn, err)
		}
		switch code {
		case http.StatusOK:
			if err := k.holdLease(body); err != nil {
				return err
			}
			k.mu.Lock()
			k.renewals++
			k.lastRenewal = time.Now()
			k.mu.Unlock()
			return nil
		case http.StatusConflict:
			k.mu.Lock()
			k.conflicts++
			k.mu.Unlock()
			if err := k.readLease(conn); err != nil {
				return err
			}
			if k.lease == nil {
				return fmt.Errorf("lease %s vanished", k.name)
			}
		default:
			if code >= 500 {
				return nil // the next renewal retries
			}
			return fmt.Errorf("renewing lease %s: %d %s", k.name, code, bytes.TrimSpace(body))
		}
	}
	return nil
}

// readLease GETs the Lease into k.lease (nil when it does not exist).
func (k *kubelet) readLease(conn context.Context) error {
	code, body, err := k.send(conn, http.MethodGet, leasesPath+k.name, "", nil)
	if err != nil {
		return k.retryable(conn, err)
	}
	switch code {
	case http.StatusOK:
		return k.holdLease(body)
	case http.StatusNotFound:
		k.mu.Lock()
		k.lease = nil
		k.mu.Unlock()
		return nil
	}
	return fmt.Errorf("reading lease %s: %d %s", k.name, code, bytes.TrimSpace(body))
}

func (k *kubelet) holdLease(body []byte) error {
	var l map[string]any
	if err := json.Unmarshal(body, &l); err != nil {
		return fmt.Errorf("lease %s: %w", k.name, err)
	}
	if _, ok := l["spec"].(map[string]any); !ok {
		return fmt.Errorf("lease %s has no spec: %s", k.name, body)
	}
	k.mu.Lock()
	k.lease = l
	k.mu.Unlock()
	return nil
}

// postStatus patches nodes/<name>/status with the kubelet's conditions,
// their lastHeartbeatTime now (a strategic merge patch, as the kubelet
// sends).
func (k *kubelet) postStatus(conn context.Context) error {
	code, body, err := k.send(conn, http.MethodPatch, "/api/v1/nodes/"+k.name+"/status", "application/strategic-merge-patch+json", kubeletStatus())
	if err != nil {
		return k.retryable(conn, err)
	}
	if code == http.StatusOK {
		k.mu.Lock()
		k.statusPosts++
		k.mu.Unlock()
		return nil
	}
	if code >= 500 {
		return nil
	}
	return fmt.Errorf("posting status of node %s: %d %s", k.name, code, bytes.TrimSpace(body))
}

// nodeInformer lists and watches the kubelet's own Node.
func (k *kubelet) nodeInformer(conn context.Context) error {
	sel := "metadata.name=" + k.name
	return k.inform(conn, "/api/v1/nodes", sel, func(string, kubeObject) error { return nil })
}

// podInformer lists and watches the Pods bound to the node: it marks new
// ones Running and deletes for good (grace period 0) the ones the cluster
// deleted, as a kubelet does once it has stopped their containers.
func (k *kubelet) podInformer(conn context.Context) error {
	return k.inform(conn, "/api/v1/pods", "spec.nodeName="+k.name, func(typ string, p kubeObject) error {
		switch {
		case typ == "DELETED":
			return nil
		case p.Metadata.DeletionTimestamp != "":
			return k.finishDeletion(conn, p)
		case p.Status.Phase == "Pending" || p.Status.Phase == "":
			return k.markRunning(conn, p)
		}
		return nil
	})
}

// inform runs the kubelet's informer of path with fieldSelector sel until
// the connection is cut.
func (k *kubelet) inform(ctx context.Context, path, sel string, handle func(typ string, p kubeObject) error) error {
	timeout := func() time.Duration { return k.cfg.WatchMin + time.Duration(k.watchJitter()*float64(k.cfg.WatchMin)) }
	// While cut off the kubelet reads nothing from its watches and makes
	// no new request.
	gated := func(typ string, p kubeObject) error {
		if !k.connected() {
			return nil
		}
		return handle(typ, p)
	}
	return inform(ctx, k.a, path, sel, informOptions{timeout: timeout, gate: k.waitConnected,
		retry: func(err error) error { return k.retryable(ctx, err) }}, gated)
}

// watchJitter draws client-go's watch timeout factor; informers run in
// goroutines of their own, so it locks.
func (k *kubelet) watchJitter() float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rng.Float64()
}

func (k *kubelet) markRunning(conn context.Context, p kubeObject) error {
	now := time.Now().UTC().Format(time.RFC3339)
	var conds []map[string]any
	for _, c := range []string{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"} {
		conds = append(conds, map[string]any{"type": c, "status": "True", "lastTransitionTime": now})
	}
	patch := map[string]any{"status": map[string]any{
		"phase": "Running", "conditions": conds, "startTime": now,
		"hostIP": k.a.id.sourceIP, "podIP": fmt.Sprintf("10.244.%s.%d", k.a.id.sourceIP[len("127.0.2."):], 2+k.nextPodIP()),
	}}
	code, body, err := k.send(conn, http.MethodPatch, "/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name+"/status",
		"application/strategic-merge-patch+json", patch)
	if err != nil {
		return k.retryable(conn, err)
	}
	if code != http.StatusOK && code != http.StatusNotFound && code != http.StatusConflict {
		return fmt.Errorf("marking pod %s/%s running: %d %s", p.Metadata.Namespace, p.Metadata.Name, code, bytes.TrimSpace(body))
	}
	return nil
}

func (k *kubelet) nextPodIP() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.podIPs++
	return k.podIPs % 250
}

// finishDeletion deletes a terminating pod with grace period 0 and its UID
// as precondition, as the kubelet's status manager does.
func (k *kubelet) finishDeletion(conn context.Context, p kubeObject) error {
	opts := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
		"preconditions": map[string]any{"uid": p.Metadata.UID}}
	code, body, err := k.send(conn, http.MethodDelete, "/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name, "", opts)
	if err != nil {
		return k.retryable(conn, err)
	}
	if code != http.StatusOK && code != http.StatusNotFound && code != http.StatusConflict {
		return fmt.Errorf("deleting pod %s/%s: %d %s", p.Metadata.Namespace, p.Metadata.Name, code, bytes.TrimSpace(body))
	}
	return nil
}

// send makes one request of the kubelet on its connection, with a 10 s
// deadline (the lease controller's own timeout); contentType defaults to
// JSON.
func (k *kubelet) send(conn context.Context, method, path, contentType string, body any) (int, []byte, error) {
	return sendJSON(conn, k.a, 10*time.Second, method, path, contentType, body)
}

// retryable decides what a transport error means: nothing when the
// connection was cut on purpose or the apiserver did not answer in time (a
// real kubelet retries at its next tick), the error otherwise.
func (k *kubelet) retryable(conn context.Context, err error) error {
	if conn.Err() != nil || k.d.ctx.Err() != nil || transient(err) {
		return nil
	}
	return fmt.Errorf("%s: %w", k.a.id.user, err)
}

func kubeletLease(name string, duration time.Duration) map[string]any {
	return map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": name, "namespace": "kube-node-lease"},
		"spec": map[string]any{"holderIdentity": name, "leaseDurationSeconds": int(duration.Seconds()),
			"renewTime": microTime(time.Now())},
	}
}

// kubeletStatus is the node status a kubelet posts: its conditions with
// lastHeartbeatTime now, a strategic merge patch keyed by condition type.
func kubeletStatus() map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	resources := map[string]string{"cpu": "4", "memory": "16Gi", "pods": "110"}
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
			"lastHeartbeatTime": now}
	}
	return map[string]any{"status": map[string]any{
		"capacity": resources, "allocatable": resources,
		"conditions": []map[string]any{
			cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
		},
	}}
}
