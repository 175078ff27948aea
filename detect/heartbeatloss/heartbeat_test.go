package heartbeatloss_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
)

// TestHeartbeatLossScenarios holds the heartbeat-loss detector to every
// scenario's truth at both time scales: one finding per wave with its
// nodes, start, returns and evictions; an information finding titled as an
// audit-feed gap for a silent feed; nothing for the controls and for every
// other scenario (whose background traffic holds kubelets too).
func TestHeartbeatLossScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	for _, sc := range scenario.All() {
		for _, scale := range scenario.Scales {
			t.Run(sc.Name+"/"+scale.Name, func(t *testing.T) {
				tr, w := detecttest.ImportScenario(t, st, sc, scale)
				got := detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, w)
				checkHeartbeat(t, tr.Want.HeartbeatWaves, got)
			})
		}
	}
}

func checkHeartbeat(t *testing.T, want []scenario.HeartbeatWave, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s %s", f.Severity, f.Title)
		}
		t.Fatalf("%d heartbeat-loss findings, want %d", len(got), len(want))
	}
	for i, w := range want {
		f := got[i]
		if f.Detector != heartbeatloss.Name {
			t.Errorf("detector %s", f.Detector)
		}
		if w.Unconfirmed {
			if f.Severity != detect.Info || !strings.Contains(f.Title, "did not react") {
				t.Errorf("nodes of a lost apiserver feed reported as %s %q", f.Severity, f.Title)
			}
			var nodes []string
			for _, o := range f.Objects {
				nodes = append(nodes, o.Name)
			}
			if !slices.Equal(nodes, w.Nodes) || !f.FirstSeen.Equal(w.Start) {
				t.Errorf("nodes %v from %s, want %v from %s", nodes, f.FirstSeen, w.Nodes, w.Start)
			}
			continue
		}
		if w.FeedGap {
			if f.Severity != detect.Info || !strings.HasPrefix(f.Title, "Audit feed gap") {
				t.Errorf("feed silence reported as %s %q", f.Severity, f.Title)
			}
			if f.FirstSeen.Before(w.Start.Add(-time.Second)) || f.LastSeen.After(w.Until.Add(time.Second)) {
				t.Errorf("feed gap [%s, %s], the feed was silent over [%s, %s)", f.FirstSeen, f.LastSeen, w.Start, w.Until)
			}
			continue
		}
		var nodes, pods []string
		for _, o := range f.Objects {
			switch o.Resource {
			case "nodes":
				nodes = append(nodes, o.Name)
			case "pods":
				pods = append(pods, o.Namespace+"/"+o.Name)
			default:
				t.Errorf("object %v", o)
			}
		}
		if !slices.Equal(nodes, w.Nodes) {
			t.Errorf("nodes %v, want %v", nodes, w.Nodes)
		}
		if !slices.Equal(pods, w.Evicted) {
			t.Errorf("evicted pods %v, want %v", pods, w.Evicted)
		}
		s := f.Subjects
		if s.NodesLost != len(w.Nodes) || s.NodesSeen != w.Seen || s.PodsEvicted != len(w.Evicted) {
			t.Errorf("subjects: %d of %d nodes lost, %d pods evicted; want %d of %d, %d", s.NodesLost, s.NodesSeen, s.PodsEvicted,
				len(w.Nodes), w.Seen, len(w.Evicted))
		}
		if !f.FirstSeen.Equal(w.Start) {
			t.Errorf("first seen %s, want the first lost node's last heartbeat %s", f.FirstSeen, w.Start)
		}
		wantSev := detect.Warning
		if len(w.Evicted) > 0 {
			wantSev = detect.Critical
		}
		if f.Severity != wantSev {
			t.Errorf("severity %s, want %s", f.Severity, wantSev)
		}
		last, back := map[string]bool{}, map[string]time.Time{}
		roles := map[string]int{}
		for _, e := range f.Evidence {
			roles[e.Role]++
			switch e.Role {
			case heartbeatloss.RoleLastHeartbeat:
				last[e.Name] = true
			case heartbeatloss.RoleHeartbeatResumed:
				back[e.Name] = e.Time
			case heartbeatloss.RoleNotReady, heartbeatloss.RoleTaint:
				if !slices.Contains(w.Nodes, e.Name) {
					t.Errorf("%s evidence for %s, not a lost node", e.Role, e.Name)
				}
			case detect.RoleRelist:
				if e.Verb != "list" || !slices.Contains(w.Nodes, strings.TrimPrefix(e.User, "system:node:")) {
					t.Errorf("relist evidence %+v", e)
				}
			case heartbeatloss.RoleEviction:
			default:
				t.Errorf("evidence role %q", e.Role)
			}
		}
		if len(last) != len(w.Nodes) {
			t.Errorf("last heartbeats of %d nodes, want %d", len(last), len(w.Nodes))
		}
		for n, bt := range w.Back {
			if got, ok := back[n]; !ok || !got.Equal(bt.Truncate(time.Microsecond)) {
				t.Errorf("%s back at %s, want %s", n, got, bt)
			}
		}
		if len(back) != len(w.Back) {
			t.Errorf("%d nodes back, want %d", len(back), len(w.Back))
		}
		if w.NotReady && roles[heartbeatloss.RoleNotReady] == 0 {
			t.Errorf("no not-ready evidence")
		}
		if len(w.Back) > 0 && roles[detect.RoleRelist] == 0 {
			t.Errorf("no relist evidence")
		}
		for _, s := range []string{"48638", "--node-monitor-grace-period", "--unhealthy-zone-threshold", "load balancer"} {
			if !strings.Contains(f.Summary+f.Remediation, s) {
				t.Errorf("summary and remediation do not mention %q", s)
			}
		}
	}
}

// TestHeartbeatLossGolden pins the findings of a wave with evictions and
// of a silent feed (compressed traces) as the API and `scan --format json`
// show them.
func TestHeartbeatLossGolden(t *testing.T) {
	st := detecttest.Engine(t)
	var all []detect.Finding
	for _, name := range []string{"heartbeat-loss-partial-evictions", "heartbeat-feed-silent"} {
		sc, _ := scenario.ByName(name)
		tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
		cluster := "golden-" + name
		w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
		all = append(all, detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, w)...)
	}
	detect.SortFindings(all)
	var buf bytes.Buffer
	if err := detect.Render(&buf, "json", all); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "heartbeat-loss.golden.json")
	if detecttest.Updating() {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("findings differ from %s (run with -update after checking); got:\n%s", path, buf.Bytes())
	}
}
