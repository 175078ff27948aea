package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// trimFixture drops from a saved fixture the apiserver's own start-up
// requests (system:apiserver, before any other client's first request):
// its RBAC bootstrap, its informers' first watches. Nothing after that is
// dropped, its own Lease renewals included.
func trimFixture(t *testing.T, name string) {
	t.Helper()
	p := filepath.Join(fixtureDir, name+".log")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	var first time.Time
	for _, line := range lines {
		var e struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(line, &e) == nil && e.User.Username != "system:apiserver" && e.User.Username != "" {
			if first.IsZero() || e.RequestReceivedTimestamp.Before(first) {
				first = e.RequestReceivedTimestamp
			}
		}
	}
	var out bytes.Buffer
	kept := 0
	for _, line := range lines {
		var e struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if e.User.Username == "system:apiserver" && e.RequestReceivedTimestamp.Before(first) {
			continue
		}
		out.Write(line)
		kept++
	}
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("trimmed %s to %d bytes, %d of %d events (the apiserver's start-up before %s dropped)", p, out.Len(), kept, len(lines), first.Format(time.RFC3339))
}

// TestHeartbeatFixtures proves each heartbeat scenario on its recorded audit
// log, from the raw events and nothing of auditlens: every kubelet renews
// its Lease at its interval until the cut; in the wave and the one-node
// control the stopped kubelets send nothing until they resume while the
// others keep renewing, the controller-manager's node controller marks the
// stopped Nodes (and only them) NotReady and taints them, its taint
// eviction controller deletes their Pods, and on reconnect each stopped
// kubelet renews and relists its Pods; in the silent-feed control nothing
// at all is logged while the apiserver is frozen. It is fast and runs with
// -short.
func TestHeartbeatFixtures(t *testing.T) {
	if updateFixtures {
		t.Skip("AUDITLENS_E2E_UPDATE=1 rewrites the fixtures in this run; check them in the next")
	}
	for _, sc := range heartbeatScenarios {
		t.Run(sc.name, func(t *testing.T) {
			events := readRawEvents(t, filepath.Join(fixtureDir, sc.name+".log"))
			exp := readExpectation(t, sc.name)
			if exp.Heartbeat == nil {
				t.Fatalf("%s.json has no heartbeat truth", sc.name)
			}
			checkHeartbeatFixture(t, events, exp.Heartbeat)
		})
	}
}

func checkHeartbeatFixture(t *testing.T, events []rawEvent, h *heartbeatTruth) {
	cut := h.StoppedAt
	if cut.IsZero() {
		cut = h.FrozenFrom
	}
	back := h.ResumedAt
	if back.IsZero() {
		back = h.FrozenTo
	}
	if cut.IsZero() || back.IsZero() {
		t.Fatalf("truth has no cut (%v) or return (%v)", cut, back)
	}
	renewals := map[string][]time.Time{} // node → successful Lease updates by its kubelet
	for _, e := range events {
		if e.Verb == "update" && e.resource() == "leases" && e.namespace() == "kube-node-lease" && e.code() == 200 &&
			e.User.Username == "system:node:"+e.name() {
			renewals[e.name()] = append(renewals[e.name()], e.StageTimestamp)
		}
	}
	for _, n := range h.Nodes {
		var before, during []time.Time
		for _, at := range renewals[n] {
			switch {
			case at.Before(cut):
				before = append(before, at)
			case at.Before(back):
				during = append(during, at)
			}
		}
		if len(before) < hbWarmup {
			t.Errorf("node %s renewed its Lease %d times before the cut, want at least %d", n, len(before), hbWarmup)
		}
		var gaps []float64
		for i := 1; i < len(before); i++ {
			gaps = append(gaps, before[i].Sub(before[i-1]).Seconds())
		}
		for _, g := range gaps {
			if g < h.LeaseIntervalSeconds*0.9 || g > h.LeaseIntervalSeconds*1.3 {
				t.Errorf("node %s: Lease renewals %.1fs apart before the cut, want about %.0fs: %v", n, g, h.LeaseIntervalSeconds, gaps)
				break
			}
		}
		stopped := slices.Contains(h.Stopped, n)
		frozen := !h.FrozenFrom.IsZero()
		switch {
		case stopped || frozen:
			if len(during) > 0 {
				t.Errorf("node %s (stopped %v, frozen %v) renewed its Lease during the outage at %v", n, stopped, frozen, during)
			}
		default:
			if want := int(back.Sub(cut).Seconds()/h.LeaseIntervalSeconds) - 1; len(during) < want {
				t.Errorf("node %s kept running but renewed its Lease %d times during the outage, want at least %d", n, len(during), want)
			}
		}
	}

	// Nothing at all by the stopped kubelets during the outage; after it,
	// each renews and relists its Pods.
	for _, n := range h.Stopped {
		user := "system:node:" + n
		var relisted, renewed bool
		for _, e := range events {
			if e.User.Username != user {
				continue
			}
			at := e.StageTimestamp
			if at.After(cut.Add(time.Second)) && at.Before(back) && e.Verb != "watch" {
				t.Errorf("kubelet %s %s %s at %s, during its outage", n, e.Verb, e.RequestURI, at.Format(time.StampMilli))
			}
			if at.After(back) {
				switch {
				case e.Verb == "list" && e.resource() == "pods" && strings.Contains(e.RequestURI, "spec.nodeName%3D"+n):
					relisted = true
				case e.Verb == "update" && e.resource() == "leases" && e.code() == 200:
					renewed = true
				}
			}
		}
		if !relisted || !renewed {
			t.Errorf("kubelet %s after reconnecting: relisted its Pods %v, renewed its Lease %v", n, relisted, renewed)
		}
	}

	// The controller-manager's consequences.
	const kcm = "system:kube-controller-manager"
	marked := map[string]bool{} // nodes/status updates by the node controller
	// Pods deleted by the taint eviction controller, which uses the node
	// controller's client (and user agent).
	evicted := map[string]bool{}
	for _, e := range events {
		if e.User.Username != kcm || e.code() != 200 || e.StageTimestamp.Before(cut) {
			continue
		}
		switch {
		case e.resource() == "nodes" && e.Verb == "update" && strings.HasSuffix(e.UserAgent, "/node-controller") && strings.HasSuffix(e.RequestURI, "/status"):
			marked[e.name()] = true
		case e.resource() == "pods" && e.Verb == "delete" && strings.HasSuffix(e.UserAgent, "/node-controller"):
			evicted[e.namespace()+"/"+e.name()] = true
		}
	}
	if !slices.Equal(keys(marked), h.Stopped) && h.FrozenFrom.IsZero() {
		t.Errorf("the node controller updated the status of %v after the cut, want the stopped %v", keys(marked), h.Stopped)
	}
	if !slices.Equal(keys(evicted), keys(h.Evicted)) {
		t.Errorf("the taint eviction controller deleted %v, the observer saw %v evicted", keys(evicted), keys(h.Evicted))
	}
	// Each stopped Node's three Pods, and the replacements the scheduler
	// put on a stopped Node it still saw Ready.
	if want := hbReplicas / hbNodes * len(h.Stopped); len(evicted) < want {
		t.Errorf("%d Pods evicted from %d stopped Nodes, want at least %d", len(evicted), len(h.Stopped), want)
	}
	// After a freeze the controller-manager may find a Lease it has not
	// seen renewed for longer than its grace period, before the kubelet's
	// next renewal reaches it: it marks that Node NotReady and evicts its
	// Pods, though no kubelet stopped.
	for key, del := range h.Evicted {
		if h.FrozenFrom.IsZero() && !slices.Contains(h.Stopped, del.Node) {
			t.Errorf("Pod %s evicted from %s, which did not stop", key, del.Node)
		}
	}

	// A frozen apiserver logs nothing at all while it is stopped.
	if !h.FrozenFrom.IsZero() {
		for _, e := range events {
			if e.StageTimestamp.After(h.FrozenFrom.Add(time.Second)) && e.StageTimestamp.Before(h.FrozenTo) {
				t.Errorf("event %s (%s %s by %s) at %s, while the apiserver was frozen", e.AuditID, e.Verb, e.RequestURI, e.User.Username, e.StageTimestamp.Format(time.StampMilli))
			}
		}
	}
	t.Logf("%d events; renewals per node %v; after the cut the node controller marked %v, the taint eviction controller deleted %d Pods",
		len(events), countsOf(renewals), keys(marked), len(evicted))
}

func countsOf(m map[string][]time.Time) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

func (e rawEvent) namespace() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Namespace
}
