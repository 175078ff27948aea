package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rv-rollback scenarios restore etcd from a snapshot under a running
// control plane, with the real etcd tools (etcdctl snapshot save, etcdutl
// snapshot restore) of the pinned etcd version: seed 003. The real
// kube-controller-manager and the fake kubelets keep running through the
// restore and reconnect by themselves to the kube-apiserver restarted on the
// same address; only the apiserver and etcd stop.
//
//   - rv-rollback: restored WITHOUT --bump-revision. etcd's revision goes
//     back to the snapshot's and new writes hand out resourceVersions that
//     were already handed out before.
//   - rv-rollback-bumped: restored with --bump-revision rollbackBump
//     --mark-compacted, as etcd documents: the revision jumps far above
//     anything handed out and every older one is compacted, so clients get
//     410 Gone and relist.
//
// What the audit log showed in the runs that recorded the fixtures is
// written down below rvRollback.

// etcdctl and etcdutl, set by setup (main_test.go) beside etcd.
var etcdctlBin, etcdutlBin string

// rollbackBump is the --bump-revision of rv-rollback-bumped: comfortably
// more than the revisions handed out since the snapshot (a few hundred).
const rollbackBump = 1000000

// Compressed cluster time.
const (
	// rollbackChanges is how long the cluster changes between the snapshot
	// and the restore (the seed's cluster: three days).
	rollbackChanges = 50 * time.Second
	// rollbackAfter is how long the cluster runs after the restore.
	rollbackAfter = 60 * time.Second
	// rollbackSoonAfter is when, after the restart, the driver reads
	// etcd's head again and alice starts repairing.
	rollbackSoonAfter = 20 * time.Second
	// rollbackWatchTimeout is the timeoutSeconds of the watching clients'
	// watches (client-go: 5-10 minutes).
	rollbackWatchTimeout = 20
)

// workerIDs are three more fake kubelets beside nodeIDs: six nodes renew
// their Leases in the rollback scenarios.
var workerIDs = func() []identity {
	var out []identity
	for i := 1; i <= 3; i++ {
		out = append(out, identity{token: fmt.Sprintf("worker-%d-token", i), user: fmt.Sprintf("system:node:worker-%d", i),
			uid: fmt.Sprintf("uid-worker-%d", i), groups: []string{"system:nodes", "system:masters"},
			userAgent: "kubelet/v1.37.2 (linux/amd64) kubernetes/unknown", sourceIP: fmt.Sprintf("127.0.3.%d", i)})
	}
	return out
}()

func init() { identities = append(identities, workerIDs...) }

// rollbackNodes are the kubelets of the rollback scenarios.
func rollbackNodes() []identity { return append(slices.Clone(nodeIDs), workerIDs...) }

// rollbackExpectation is the fixture's expectation: the common one and
// what the restore did, as etcd and the driver saw it.
type rollbackExpectation struct {
	expectation
	RVRollback *expectedRollback `json:"rv_rollback"`
}

// expectedRollback is the restore as the driver saw it. Revisions are
// etcd's (a resourceVersion is an etcd revision); times are the driver's
// clock, as the audit log's.
type expectedRollback struct {
	// Bump is the --bump-revision of the restore (0: none).
	Bump int64 `json:"bump"`
	// SnapshotRevision is the snapshot's revision (etcdutl snapshot status).
	SnapshotRevision int64 `json:"snapshot_revision"`
	// EtcdHeadBefore is etcd's revision once kube-apiserver had stopped
	// (etcdctl endpoint status): the head before the restore. No write
	// after the apiserver stopped, so no resourceVersion handed out ever
	// exceeded it.
	EtcdHeadBefore int64 `json:"etcd_head_before"`
	// EtcdHeadRestored is the restored etcd's revision before the
	// apiserver restarted: SnapshotRevision, plus Bump.
	EtcdHeadRestored int64 `json:"etcd_head_restored"`
	// EtcdHeadSoonAfter is etcd's revision rollbackSoonAfter after the
	// restarted apiserver was ready: the head shortly after the restore.
	EtcdHeadSoonAfter int64 `json:"etcd_head_soon_after"`
	// DriverMaxBefore is the highest resourceVersion the driver's writes
	// were answered before the restore among those whose responses the
	// audit policy records (Services; neither a ConfigMap's nor a Lease
	// update's response is recorded): the audit log shows a head at least
	// as high.
	DriverMaxBefore int64 `json:"driver_max_before"`
	// DriverFirstAfter is the first resourceVersion the driver's clients
	// were answered after the restart.
	DriverFirstAfter int64 `json:"driver_first_after"`
	// Snapshot is when the snapshot was taken; APIServerStopping when
	// kube-apiserver was sent SIGTERM (it serves on for a moment);
	// APIServerStopped when it had exited, so that every event it logged
	// was received before; Restarted when the restarted one was ready.
	Snapshot          time.Time `json:"snapshot"`
	APIServerStopping time.Time `json:"apiserver_stopping"`
	APIServerStopped  time.Time `json:"apiserver_stopped"`
	Restarted         time.Time `json:"restarted"`
	// LeaseConflicts counts the fake kubelets' Lease PUTs answered 409
	// after the restart, each followed by a re-GET and a retry.
	LeaseConflicts int `json:"lease_conflicts"`
	// StaleWatches counts the watching clients' watches started after the
	// restart from a resourceVersion above the head.
	StaleWatches int `json:"stale_watches"`
	// Severity is what an rv-rollback finding must say: critical without
	// bump; with bump at most info ("" is no finding).
	Severity string `json:"severity"`
	// FixtureSince: the fixture holds the events of the apiserver's log
	// from this time on (stageTimestamp); the cluster's bring-up before it
	// is left out. Zero: the whole log.
	FixtureSince time.Time `json:"fixture_since,omitzero"`
}

// TestRVRollback runs both restores, each on its own cluster sending to
// one auditlens serve, and checks the findings through serve's API and
// `auditlens scan` of the apiserver's own log.
func TestRVRollback(t *testing.T) {
	// The real-component tests wait on cluster time far more than they
	// compute (the whole package uses ~4 CPU-minutes in ~16 minutes of
	// scenarios): they run side by side (make test passes -parallel 4).
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "rollback")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t, dir)
	cases := []struct {
		name string
		bump int64
	}{{"rv-rollback", 0}, {"rv-rollback-bumped", rollbackBump}}
	var clusters []string
	for _, c := range cases {
		clusters = append(clusters, "e2e-"+c.name)
	}
	recv := startReceiverToken(t, ca, filepath.Join(dir, "auditlens"), clusters...)
	var results []*rollbackResult
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if res := runRollback(t, ca, filepath.Join(dir, c.name), recv, c.name, c.bump); res != nil {
				results = append(results, res)
			}
		})
	}
	for _, res := range results {
		t.Run(res.exp.Scenario+"/findings", func(t *testing.T) { checkRollbackFindings(t, res) })
		t.Run(res.exp.Scenario+"/scan", func(t *testing.T) { checkRollbackScan(t, res) })
	}
	if err := recv.proc.stop(60 * time.Second); err != nil {
		t.Errorf("auditlens serve: %v\n%s", err, recv.proc.logTail(30))
	}
}

type rollbackResult struct {
	exp      rollbackExpectation
	recv     *receiver
	auditLog string
	ended    time.Time
}

// runRollback runs one restore on its own cluster sending to recv, checks
// what the audit log shows and that serve stored it whole, and records the
// fixture when asked; nil when the scenario failed.
func runRollback(t *testing.T, ca *testCA, dir string, recv *receiver, name string, bump int64) *rollbackResult {
	start := time.Now()
	cluster := "e2e-" + name
	// Without it, stopping kube-apiserver waits 60 s (its request timeout)
	// for the open watches to end; with it, 2 s after the requests in
	// flight have drained (meanwhile new requests get 429 Retry-After), as
	// many production control planes are set up.
	c := startClusterWith(t, ca, dir, cluster, recv.forCluster(cluster), nil, "--shutdown-send-retry-after=true")
	d := newDriver(t, c)
	d.recv = recv
	exp := rvRollback(d, bump)
	d.stop()
	exp.Scenario, exp.Cluster = name, cluster
	finalStop := time.Now()
	c.stop(t)
	stops := [][2]time.Time{{exp.RVRollback.APIServerStopping, exp.RVRollback.APIServerStopped}, {finalStop, time.Now()}}
	t.Logf("scenario %s ran for %s (cluster start to stop)", name, time.Since(start).Round(100*time.Millisecond))
	if t.Failed() {
		return nil
	}
	rollbackObserve(t, c.auditLog, exp)
	checkRollbackEvents(t, recv, c, stops)
	if updateFixtures && !t.Failed() {
		saveRollbackFixture(t, name, c.auditLog, exp)
	}
	return &rollbackResult{exp: exp, recv: recv, auditLog: c.auditLog, ended: time.Now()}
}

// rvRollback runs one scenario: the cluster at work, a snapshot, changes,
// the restore (with bump when bump > 0), and the cluster at work again.
func rvRollback(d *driver, bump int64) rollbackExpectation {
	t := d.t
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	rec := &rvRecorder{}

	// The cluster: the controllers scenario's objects, three more nodes,
	// and the real controller-manager.
	controllersPrelude(d)
	for _, id := range workerIDs {
		_, err := d.admin.call(http.MethodPost, "/api/v1/nodes", fakeNode(nodeName(id)), http.StatusCreated)
		d.must(err)
		kubelet := d.c.actor(id)
		_, err = kubelet.call(http.MethodPatch, "/api/v1/nodes/"+nodeName(id)+"/status", nodeStatus(), http.StatusOK)
		d.must(err)
		_, err = kubelet.call(http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", nodeLease(nodeName(id)), http.StatusCreated)
		d.must(err)
	}
	kcm := startControllerManager(d, d.c.base)
	var kubelets []*fakeKubelet
	for i, id := range rollbackNodes() {
		// Every 2-10 s, a different interval per node (kubelets: 10 s).
		k := &fakeKubelet{a: d.c.actor(id), node: nodeName(id), every: []time.Duration{2, 3, 4, 5, 7, 10}[i%6] * time.Second, rec: rec}
		kubelets = append(kubelets, k)
		d.background(id.user, k.run)
	}
	w := &patientWriter{d: d, rec: rec}
	d.background("config writer", w.run)
	var watchers []*patientReflector
	for _, r := range []struct {
		a    *actor
		path string
	}{{d.proxy, "/api/v1/services"}, {d.proxy, "/api/v1/endpoints"}, {d.reloader, "/api/v1/namespaces/apps/configmaps"}} {
		pr := &patientReflector{a: r.a, path: r.path, rec: rec}
		watchers = append(watchers, pr)
		d.background(r.a.id.user+" watching "+r.path, pr.run)
	}
	d.waitEndpoints(2*time.Minute, liveServices...)
	d.sleep(5 * time.Second)

	// The snapshot, taken from the running etcd as a backup job does.
	etcdURL := procArg(d.c.etcd, "--advertise-client-urls")
	snap := filepath.Join(d.c.dir, "snapshot.db")
	runTool(t, etcdctlBin, "--endpoints", etcdURL, "snapshot", "save", snap)
	snapRev := snapshotRevision(t, snap)
	snapAt := time.Now()
	t.Logf("snapshot %s at revision %d (etcd head %d)", snap, snapRev, etcdRevision(t, etcdURL))

	// Changes after the snapshot: Services created and deleted, a
	// Deployment scaled, ConfigMaps (the writer), Leases (the kubelets).
	must := func(rv string, err error) {
		d.t.Helper()
		d.must(err)
		rec.seeLogged(rv)
	}
	steps := []func(){
		func() { must(d.alice.create("default", "services", service("promo"))) },
		func() {
			_, err := d.alice.call(http.MethodPost, "/apis/apps/v1/namespaces/default/deployments", deployment("promo", 2), http.StatusCreated)
			d.must(err)
		},
		func() { d.must(d.alice.delete("default", "services", "catalog")) },
		func() {
			_, err := d.alice.call(http.MethodPatch, "/apis/apps/v1/namespaces/default/deployments/frontend",
				map[string]any{"spec": map[string]any{"replicas": 3}}, http.StatusOK)
			d.must(err)
		},
		func() { must(d.alice.create("default", "services", service("search"))) },
		func() {
			// A ConfigMap's response is not recorded (deploy/audit-policy.yaml
			// keeps ConfigMaps at Metadata: their data may be credentials).
			rv, err := d.alice.create("default", "configmaps", configMap("release-notes", map[string]string{"version": "2.4.0"}))
			d.must(err)
			rec.see(rv)
		},
		func() { d.must(d.alice.delete("default", "services", "cart")) },
		func() { must(d.alice.create("default", "services", service("cart"))) },
	}
	for _, step := range steps {
		d.sleep(time.Duration(2+rng.IntN(4)) * time.Second)
		step()
	}
	d.sleep(time.Until(snapAt.Add(rollbackChanges)))

	// The restore: stop kube-apiserver (nothing writes any more), read
	// etcd's head, stop etcd, restore the snapshot into a new data
	// directory, start etcd on it and the apiserver again on the same
	// address. The controller-manager and the kubelets keep running.
	stopping := time.Now()
	d.must(d.c.apiserver.stop(90 * time.Second))
	stopped := time.Now()
	headBefore := etcdRevision(t, etcdURL)
	maxBefore, maxLogged := rec.max()
	d.must(d.c.etcd.stop(30 * time.Second))
	restored := filepath.Join(d.c.dir, "etcd-restored")
	peerURL := procArg(d.c.etcd, "--initial-advertise-peer-urls")
	args := []string{"snapshot", "restore", snap, "--data-dir", restored, "--name", procArg(d.c.etcd, "--name"),
		"--initial-cluster", procArg(d.c.etcd, "--initial-cluster"), "--initial-advertise-peer-urls", peerURL}
	if bump > 0 {
		args = append(args, "--bump-revision", strconv.FormatInt(bump, 10), "--mark-compacted")
	}
	runTool(t, etcdutlBin, args...)
	etcdArgs := slices.Clone(d.c.etcd.cmd.Args[1:])
	etcdArgs[slices.Index(etcdArgs, "--data-dir")+1] = restored
	d.c.etcd = startProc(t, d.c.dir, "etcd", etcdBin, etcdArgs...)
	waitEtcd(t, d.c.etcd, etcdURL)
	headRestored := etcdRevision(t, etcdURL)
	rec.markRestart(headRestored)
	d.c.apiserver = startProc(t, d.c.dir, "kube-apiserver", kubeAPIServerBin, d.c.apiserver.cmd.Args[1:]...)
	waitAPIServer(d)
	restarted := time.Now()
	t.Logf("restore (bump %d): apiserver stopped at etcd revision %d (the driver was answered up to %d, %d in the audit log); restored etcd at revision %d; apiserver exited %.1fs after SIGTERM and was ready again %.1fs after",
		bump, headBefore, maxBefore, maxLogged, headRestored, stopped.Sub(stopping).Seconds(), restarted.Sub(stopping).Seconds())
	if bump == 0 && headRestored != snapRev || bump > 0 && headRestored != snapRev+bump {
		t.Errorf("restored etcd at revision %d, want the snapshot's %d + bump %d", headRestored, snapRev, bump)
	}
	if maxBefore > headBefore || maxLogged <= snapRev {
		t.Errorf("the driver was answered resourceVersions up to %d (%d in the audit log) before the restore, etcd's head was %d, the snapshot's %d",
			maxBefore, maxLogged, headBefore, snapRev)
	}

	// After the restore the users carry on: alice looks for what she made
	// since the snapshot, re-creates what is gone and scales frontend
	// again, as the seed's users rolled their Deployments back to what
	// etcd held.
	d.sleep(5 * time.Second)
	for _, name := range []string{"promo", "search", "catalog"} {
		code, _, err := d.alice.raw(http.MethodGet, "/api/v1/namespaces/default/services/"+name, nil)
		t.Logf("after the restore alice GETs Service %s: %d %v", name, code, err)
	}
	d.sleep(time.Until(restarted.Add(rollbackSoonAfter)))
	headSoonAfter := etcdRevision(t, etcdURL)
	must(d.alice.create("default", "services", service("promo")))
	_, err := d.alice.call(http.MethodPost, "/apis/apps/v1/namespaces/default/deployments", deployment("promo", 2), http.StatusCreated)
	d.must(err)
	d.sleep(time.Until(restarted.Add(30 * time.Second)))
	_, err = d.alice.call(http.MethodPatch, "/apis/apps/v1/namespaces/default/deployments/frontend",
		map[string]any{"spec": map[string]any{"replicas": 2}}, http.StatusOK)
	d.must(err)
	d.sleep(time.Until(restarted.Add(rollbackAfter)))
	for _, name := range []string{"promo", "frontend"} {
		code, _, _ := d.alice.raw(http.MethodGet, "/api/v1/namespaces/default/endpoints/"+name, nil)
		t.Logf("at the end: GET Endpoints %s: %d; %d ReplicaSets and %d Pods of %s", name, code,
			countItems(d.alice, "/apis/apps/v1/namespaces/default/replicasets?labelSelector=app%3D"+name),
			countItems(d.alice, "/api/v1/namespaces/default/pods?labelSelector=app%3D"+name), name)
	}

	d.stop()
	if err := kcm.stop(30 * time.Second); err != nil {
		t.Errorf("kube-controller-manager: %v\n%s", err, kcm.logTail(30))
	}
	conflicts := 0
	for _, k := range kubelets {
		for _, r := range k.renewals() {
			if r.code == http.StatusConflict && r.at.After(stopping) {
				conflicts++
			}
		}
		t.Logf("kubelet %s (every %s): %s", k.node, k.every, describeRenewals(k.renewals(), stopping))
	}
	stale := 0
	for _, pr := range watchers {
		t.Logf("%s watching %s: %s", pr.a.id.user, pr.path, describeWatchesRB(pr.watches(), stopping))
		for _, w := range pr.watches() {
			if w.start.After(stopping) && w.aboveHead {
				stale++
			}
		}
	}
	fails := w.failures()
	t.Logf("config writer: %d writes failed while the apiserver was away or after the restore:%s", len(fails), strings.Join(fails[:min(len(fails), 8)], ""))
	first := rec.firstAfter()
	exp := rollbackExpectation{RVRollback: &expectedRollback{
		Bump: bump, SnapshotRevision: snapRev, EtcdHeadBefore: headBefore, EtcdHeadRestored: headRestored, EtcdHeadSoonAfter: headSoonAfter,
		DriverMaxBefore: maxLogged, DriverFirstAfter: first, Snapshot: snapAt,
		APIServerStopping: stopping, APIServerStopped: stopped, Restarted: restarted,
		LeaseConflicts: conflicts, StaleWatches: stale,
	}}
	desc := fmt.Sprintf("the real kube-controller-manager, six fake kubelets renewing Leases every 2-10 s and clients watching Services, Endpoints and ConfigMaps; "+
		"etcdctl snapshot save at revision %d, %s of changes (Services created and deleted, a Deployment scaled, ConfigMaps, Leases) up to revision %d, "+
		"then kube-apiserver and etcd stopped, ", snapRev, rollbackChanges, headBefore)
	if bump == 0 {
		exp.Description = desc + fmt.Sprintf("etcdutl snapshot restore WITHOUT --bump-revision (etcd back at revision %d) and the apiserver restarted on the same address; "+
			"%d Lease PUTs got 409, %d watches started from resourceVersions above the head", headRestored, conflicts, stale)
		exp.RVRollback.Severity = "critical"
		if conflicts == 0 {
			t.Errorf("no Lease PUT got 409 after a restore without bump")
		}
		if first >= maxBefore {
			t.Errorf("the first resourceVersion after the restore, %d, is not below the %d seen before", first, maxBefore)
		}
	} else {
		exp.Description = desc + fmt.Sprintf("etcdutl snapshot restore --bump-revision %d --mark-compacted (etcd at revision %d) and the apiserver restarted on the same address; "+
			"clients relist after 410 Gone", bump, headRestored)
		exp.Silent = nil
		if first <= maxBefore {
			t.Errorf("the first resourceVersion after the bumped restore, %d, is not above the %d seen before", first, maxBefore)
		}
	}
	t.Logf("seed %d", seed)
	return exp
}

// What the apiserver's audit log showed in the runs that recorded the
// fixtures (etcd 3.6.16, kube-apiserver and kube-controller-manager
// 1.37.2; rollbackObserve logs the same view for every run and checks the
// parts that held in every run; the numbers vary a little from run to
// run). The apiserver exited 2 s after SIGTERM and was ready again 6-9 s
// after it; times below are from then.
//
// Without --bump-revision (fixtures/rv-rollback): snapshot at revision
// 364, etcd's head 669 when the apiserver had exited (667 the highest
// write response in the audit log), etcd restored at 364.
//   - The head in write responses fell from 667 to 367-368 and took 55 s to
//     pass 667 again; every resourceVersion in between was handed out twice.
//   - The controller-manager reconnected within 0.1 s. Its 61 reflectors
//     resumed from the resourceVersions they held: the 52 below the restored
//     head (idle resources, 245-317) ended within 0.1 s (a 410 inside a 200)
//     and relisted with watch-lists; the 9 above it (pods 449, replicasets
//     454, deployments 455, ipaddresses 516, services 517, endpointslices
//     518, endpoints 519, configmaps 667, leases 669) got 200 and stayed
//     open, silent, until the controller-manager stopped 61 s later. The
//     watching clients (kube-proxy, a config reloader) did the same: 200,
//     timed out after their 20 s with no event, re-watched from the same
//     resourceVersion, and got events again only once the head passed it
//     (the events between the restored head and it never came).
//   - Every kubelet's first Lease PUT got 409 with the resourceVersion it
//     held (631-663); its re-GET read 241-362 (the Leases' revisions in the
//     snapshot, below the restored head), and the retry with that one
//     succeeded. So a successful update's objectRef.resourceVersion after
//     the restore can be far below the head (241 against 364).
//   - From 36 s after the restart the node lifecycle controller logged, for
//     every node, "Update health of Node from Controller error, Skipping -
//     no pods will be evicted": "read version: 639 is not as new as written
//     version: 536 for group resource leases" (its Lease informer held the
//     post-snapshot Leases; the resourceVersions no longer order them).
//   - alice's Services promo and search and the scale of frontend to 3 were
//     gone; Service catalog, deleted after the snapshot, was back. 20 s
//     after the restart she re-created Service promo (at resourceVersion
//     478, below the 517 the controller-manager's Services watch waited
//     for: no Endpoints were ever made for it) and Deployment promo (above
//     the 455 of its Deployments watch: it got a ReplicaSet and 2 Pods; in
//     another run it landed below and got nothing). She scaled frontend to
//     2: the deployment controller's updates of its ReplicaSet got 409
//     thirteen times (its cache held the post-snapshot object) and frontend
//     stayed at 1 Pod.
//
// With --bump-revision 1000000 --mark-compacted (rv-rollback-bumped):
// snapshot at 364, head 669, etcd restored at 1000364.
//   - The head in write responses jumped from 669 to 1000372.
//   - Every watch resumed from an old resourceVersion (the controller-
//     manager's 61 reflectors, 245-669, and the watching clients) ended
//     within 0.1 s with code 200 (the 410 is inside the stream); the
//     clients listed again and watched from 1000364 on.
//   - The kubelets' first Lease PUT got 409 as well (their Leases'
//     revisions in the snapshot differ from the ones they held); the
//     re-GET read 241-362, below the old head, and the retry carrying it
//     succeeded with 1000367-1000373.
//   - The controllers reconciled to the snapshot's state within seconds:
//     ReplicaSet updates got 409 ×7 and 404 ×5 while their caches refilled,
//     the replicaset controller created 12 Pods (some for promo's ReplicaSet,
//     gone from etcd but still in its cache for a moment; 38 in another run)
//     and the garbage collector deleted 7. alice's re-created promo got its
//     ReplicaSet, 2 Pods and Endpoints, frontend its 2 Pods.

// countItems is the number of items of a list, -1 when it cannot be read.
func countItems(a *actor, path string) int {
	code, body, err := a.raw(http.MethodGet, path, nil)
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &l) != nil {
		return -1
	}
	return len(l.Items)
}

// procArg returns the value after flag in p's arguments.
func procArg(p *proc, flag string) string {
	args := p.cmd.Args
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// runTool runs an etcd tool and returns its stdout.
func runTool(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := runCapture(cmd)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(bin), err)
	}
	return out
}

func snapshotRevision(t *testing.T, path string) int64 {
	t.Helper()
	var st struct {
		Revision int64 `json:"revision"`
	}
	out := runTool(t, etcdutlBin, "snapshot", "status", path, "-w", "json")
	if err := json.Unmarshal([]byte(lastLine(out)), &st); err != nil || st.Revision == 0 {
		t.Fatalf("etcdutl snapshot status: %v: %s", err, out)
	}
	return st.Revision
}

// etcdRevision is etcd's current revision (etcdctl endpoint status).
func etcdRevision(t *testing.T, endpoint string) int64 {
	t.Helper()
	var st []struct {
		Status struct {
			Header struct {
				Revision int64 `json:"revision"`
			} `json:"header"`
		} `json:"Status"`
	}
	out := runTool(t, etcdctlBin, "--endpoints", endpoint, "endpoint", "status", "-w", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 || st[0].Status.Header.Revision == 0 {
		t.Fatalf("etcdctl endpoint status: %v: %s", err, out)
	}
	return st[0].Status.Header.Revision
}

func waitEtcd(t *testing.T, p *proc, url string) {
	t.Helper()
	if !poll(30*time.Second, 100*time.Millisecond, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `"health":"true"`)
	}) {
		t.Fatalf("etcd did not become healthy on %s:\n%s", url, p.logTail(30))
	}
}

// waitAPIServer waits until the restarted apiserver is ready.
func waitAPIServer(d *driver) {
	d.t.Helper()
	p := d.c.apiserver
	if !poll(120*time.Second, 250*time.Millisecond, func() bool {
		if p.exited() {
			return true
		}
		code, body, err := d.admin.raw("GET", "/readyz", nil)
		return err == nil && code == 200 && strings.TrimSpace(string(body)) == "ok"
	}) || p.exited() {
		d.t.Fatalf("the restarted kube-apiserver did not become ready on %s:\n%s", d.c.base, p.logTail(40))
	}
}

// rvRecorder keeps the resourceVersions the driver's clients were
// answered, before and after the restart.
type rvRecorder struct {
	mu        sync.Mutex
	restarted bool
	maxBefore int64
	// maxLogged is the highest before the restart that a write's response
	// recorded in the audit log showed.
	maxLogged int64
	first     int64
	maxAfter  int64
}

// seeLogged records the resourceVersion of a write whose response the
// audit policy records (Services: RequestResponse).
func (r *rvRecorder) seeLogged(rv string) {
	r.see(rv)
	n, _ := strconv.ParseInt(rv, 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.restarted {
		r.maxLogged = max(r.maxLogged, n)
	}
}

func (r *rvRecorder) see(rv string) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.restarted {
		r.maxBefore = max(r.maxBefore, n)
		return
	}
	if r.first == 0 {
		r.first = n
	}
	r.maxAfter = max(r.maxAfter, n)
}

// markRestart starts the record after the restart, at etcd's head.
func (r *rvRecorder) markRestart(head int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarted = true
	r.maxAfter = head
}

// max returns the highest resourceVersion answered before the restart, and
// the highest the audit log records.
func (r *rvRecorder) max() (all, logged int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxBefore, r.maxLogged
}

func (r *rvRecorder) firstAfter() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// fakeKubelet renews its node's Lease as the kubelet does: PUT of the
// whole Lease with the resourceVersion it holds; on 409 it GETs the Lease
// and tries again at once. While the apiserver is away it retries every
// second.
type fakeKubelet struct {
	a     *actor
	node  string
	every time.Duration
	rec   *rvRecorder

	mu  sync.Mutex
	log []renewal
}

type renewal struct {
	at     time.Time
	held   string // the resourceVersion PUT
	code   int    // 0: no answer
	got    string // the resourceVersion answered (200), or re-read (409)
	errMsg string
}

func (k *fakeKubelet) path() string {
	return "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + k.node
}

func (k *fakeKubelet) record(r renewal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = append(k.log, r)
}

func (k *fakeKubelet) renewals() []renewal {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.log)
}

// getLease reads the Lease, retrying while the apiserver is away.
func (k *fakeKubelet) getLease(ctx context.Context) (map[string]any, string) {
	for ctx.Err() == nil {
		code, body, err := k.a.raw(http.MethodGet, k.path(), nil)
		if err == nil && code == http.StatusOK {
			var lease map[string]any
			if json.Unmarshal(body, &lease) == nil {
				return lease, leaseRV(lease)
			}
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return nil, ""
}

func leaseRV(lease map[string]any) string {
	md, _ := lease["metadata"].(map[string]any)
	rv, _ := md["resourceVersion"].(string)
	return rv
}

func (k *fakeKubelet) run(ctx context.Context) error {
	lease, rv := k.getLease(ctx)
	next := time.Now().Add(k.every)
	for ctx.Err() == nil {
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return nil
		}
		spec, _ := lease["spec"].(map[string]any)
		spec["renewTime"] = microTime(time.Now())
		body, _ := json.Marshal(lease)
		at := time.Now()
		code, resp, err := k.a.raw(http.MethodPut, k.path(), body)
		switch {
		case err != nil:
			k.record(renewal{at: at, held: rv, errMsg: err.Error()})
			next = time.Now().Add(time.Second)
			continue
		case code == http.StatusOK:
			held := rv
			var got map[string]any
			if json.Unmarshal(resp, &got) == nil {
				lease, rv = got, leaseRV(got)
			}
			k.record(renewal{at: at, held: held, code: code, got: rv})
			k.rec.see(rv)
			next = time.Now().Add(k.every)
		case code == http.StatusConflict:
			held := rv
			lease, rv = k.getLease(ctx)
			k.record(renewal{at: at, held: held, code: code, got: rv})
			next = time.Now() // retry at once with what was read
		default:
			k.record(renewal{at: at, held: rv, code: code, errMsg: string(bytes.TrimSpace(resp))})
			lease, rv = k.getLease(ctx)
			next = time.Now().Add(time.Second)
		}
	}
	return nil
}

// describeRenewals summarises a kubelet's renewals from the apiserver's
// stop on: the PUTs left unanswered while it was away, then every answer
// up to the second successful renewal, with the resourceVersions held and
// got.
func describeRenewals(rs []renewal, from time.Time) string {
	var b strings.Builder
	lastOK, down, ok := "", 0, 0
	for _, r := range rs {
		switch {
		case r.at.Before(from):
			if r.code == http.StatusOK {
				lastOK = r.got
			}
		case r.code == 0:
			down++
		case ok < 2:
			if r.code == http.StatusOK {
				ok++
			}
			fmt.Fprintf(&b, " +%.1fs PUT rv=%s → %d (got %s)", r.at.Sub(from).Seconds(), r.held, r.code, r.got)
		}
	}
	return fmt.Sprintf("last renewal before the stop at rv %s; %d PUTs unanswered;%s", lastOK, down, b.String())
}

// patientWriter is the config writer of driver.configWriter, carrying on
// through the restore: a failed write is recorded, not fatal.
type patientWriter struct {
	d   *driver
	rec *rvRecorder

	mu   sync.Mutex
	errs []string
}

func (w *patientWriter) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, "\n  "+err.Error())
}

func (w *patientWriter) failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errs)
}

func (w *patientWriter) run(ctx context.Context) error {
	d := w.d
	for i := 1; ctx.Err() == nil; i++ {
		rv, err := d.writer.patch("apps", "configmaps", "app-config", map[string]any{"data": map[string]string{"generation": strconv.Itoa(i)}})
		if err != nil {
			w.fail(err)
		} else {
			w.rec.see(rv) // ConfigMaps: Metadata, the response not recorded
		}
		if i%5 == 0 {
			name := fmt.Sprintf("job-%d", i/5)
			rv, err := d.writer.create("apps", "configmaps", configMap(name, map[string]string{"run": name}))
			if err != nil {
				w.fail(err)
			} else {
				w.rec.see(rv)
			}
			if i > 5 {
				if err := d.writer.delete("apps", "configmaps", fmt.Sprintf("job-%d", i/5-1)); err != nil {
					w.fail(err)
				}
			}
		}
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return nil
}

// patientReflector lists and watches like client-go's reflector and,
// unlike driver.reflect, survives the apiserver going away: a failed
// request is retried after a second from the resourceVersion it held, and
// a 410 Gone (or "too large resource version") in the stream makes it
// list again.
type patientReflector struct {
	a    *actor
	path string
	rec  *rvRecorder

	mu sync.Mutex
	ws []rbWatch
}

// rbWatch is one watch as the client saw it.
type rbWatch struct {
	start, end time.Time
	rv         string // requested
	aboveHead  bool   // after the restart, from above the highest resourceVersion answered since
	events     int
	last       string // resourceVersion of the last event
	how        string // how it ended: timeout, gone, too large, error …, failed
	status     int
}

func (r *patientReflector) watches() []rbWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ws)
}

func (r *patientReflector) run(ctx context.Context) error {
	relist := true
	rv := ""
	for ctx.Err() == nil {
		if relist {
			got, err := r.a.list(ctx, r.path)
			if err != nil {
				sleepCtx(ctx, time.Second)
				continue
			}
			rv, relist = got, false
			r.rec.see(rv)
		}
		w := r.watch(ctx, rv)
		r.mu.Lock()
		r.ws = append(r.ws, w)
		r.mu.Unlock()
		if w.last != "" {
			rv = w.last
		}
		switch w.how {
		case "gone", "too large":
			relist = true
		case "failed":
			sleepCtx(ctx, time.Second)
		}
	}
	return nil
}

func (r *patientReflector) watch(ctx context.Context, rv string) (w rbWatch) {
	w = rbWatch{start: time.Now(), rv: rv}
	r.rec.mu.Lock()
	if n, _ := strconv.ParseInt(rv, 10, 64); r.rec.restarted && r.rec.maxAfter != 0 {
		w.aboveHead = n > r.rec.maxAfter
	}
	r.rec.mu.Unlock()
	q := url.Values{"watch": {"true"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {strconv.Itoa(rollbackWatchTimeout)}}
	resp, err := r.a.request(ctx, http.MethodGet, r.path+"?"+q.Encode(), nil, "")
	defer func() { w.end = time.Now() }()
	if err != nil {
		w.how = "failed"
		return w
	}
	defer resp.Body.Close()
	w.status = resp.StatusCode
	if resp.StatusCode != 200 {
		w.how = "failed"
		return w
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Code    int    `json:"code"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				w.how = "timeout"
			} else {
				w.how = "failed"
			}
			return w
		}
		if ev.Type == "ERROR" {
			switch {
			case ev.Object.Code == http.StatusGone:
				w.how = "gone"
			case strings.Contains(ev.Object.Message, "too large"):
				w.how = "too large"
			default:
				w.how = fmt.Sprintf("error %d %s", ev.Object.Code, ev.Object.Message)
			}
			return w
		}
		w.events++
		if v := ev.Object.Metadata.ResourceVersion; v != "" {
			w.last = v
			if ev.Type != "BOOKMARK" {
				r.rec.see(v)
			}
		}
	}
}

func describeWatchesRB(ws []rbWatch, from time.Time) string {
	var b strings.Builder
	for _, w := range ws {
		if w.end.Before(from.Add(-30 * time.Second)) {
			continue
		}
		above := ""
		if w.aboveHead {
			above = " ABOVE HEAD"
		}
		fmt.Fprintf(&b, "\n  %+.1fs from %s%s: %d %s after %.1fs, %d events, last %s", w.start.Sub(from).Seconds(), w.rv, above,
			w.status, w.how, w.end.Sub(w.start).Seconds(), w.events, w.last)
	}
	return b.String()
}
