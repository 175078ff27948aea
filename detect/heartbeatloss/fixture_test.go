package heartbeatloss_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/ingest"
)

// heartbeatFixture is what deploy/e2e records beside each heartbeat log
// of a real kube-apiserver and kube-controller-manager with fake kubelets.
type heartbeatFixture struct {
	Scenario  string `json:"scenario"`
	Heartbeat *struct {
		Nodes        []string             `json:"nodes"`
		Stopped      []string             `json:"stopped"`
		LastRenewals map[string]time.Time `json:"last_renewals"`
		Evicted      map[string]struct {
			Node string `json:"node"`
		} `json:"evicted"`
		FrozenFrom time.Time `json:"frozen_from"`
		FrozenTo   time.Time `json:"frozen_to"`
		Wave       bool      `json:"wave"`
	} `json:"heartbeat"`
}

// FixturesDir is where the end-to-end fixtures are (AUDITLENS_FIXTURES
// points elsewhere, to check logs not committed yet).
func FixturesDir() string {
	if d := os.Getenv("AUDITLENS_FIXTURES"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "deploy", "e2e", "fixtures")
}

// TestHeartbeatLossFixtures holds the detector to the logs of real
// control planes (deploy/e2e: kube-apiserver and kube-controller-manager
// 1.37 with fake kubelets): a wave of most nodes losing the apiserver is one
// critical finding with the stopped nodes and the evicted pods; one node
// lost is none; the apiserver frozen, so that nothing at all arrives, is
// an audit-feed gap, information only.
func TestHeartbeatLossFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(FixturesDir(), "heartbeat-*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no heartbeat fixtures in %s (deploy/e2e records them and they are committed): %v", FixturesDir(), err)
	}
	st := detecttest.Engine(t)
	for _, path := range paths {
		var fx heartbeatFixture
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &fx); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if fx.Heartbeat == nil {
			continue
		}
		hb := fx.Heartbeat
		t.Run(fx.Scenario, func(t *testing.T) {
			cluster := "fixture-" + fx.Scenario
			stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}),
				[]string{strings.TrimSuffix(path, ".json") + ".log"}, ingest.ImportConfig{Cluster: cluster})
			if err != nil || stats.Rejected != 0 {
				t.Fatalf("importing: %v (%d rejected)", err, stats.Rejected)
			}
			got := detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, detecttest.Span(stats, cluster))
			for _, f := range got {
				t.Logf("%s %.2f %s", f.Severity, f.Confidence, f.Title)
			}
			if !hb.Wave {
				for _, f := range got {
					if f.Severity != detect.Info {
						t.Errorf("%s finding where there is no wave: %s", f.Severity, f.Title)
					}
				}
				if !hb.FrozenFrom.IsZero() {
					if len(got) != 1 || !strings.HasPrefix(got[0].Title, "Audit feed gap") {
						t.Fatalf("%d findings, want one audit-feed gap", len(got))
					}
					f := got[0]
					if f.FirstSeen.Before(hb.FrozenFrom.Add(-2*time.Second)) || f.LastSeen.After(hb.FrozenTo.Add(2*time.Second)) {
						t.Errorf("feed gap [%s, %s], the apiserver was frozen over [%s, %s]", f.FirstSeen, f.LastSeen, hb.FrozenFrom, hb.FrozenTo)
					}
				} else if len(got) != 0 {
					t.Errorf("%d findings, want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d findings, want one wave", len(got))
			}
			f := got[0]
			var nodes, pods []string
			for _, o := range f.Objects {
				if o.Resource == "nodes" {
					nodes = append(nodes, o.Name)
				} else {
					pods = append(pods, o.Namespace+"/"+o.Name)
				}
			}
			stopped := slices.Sorted(slices.Values(hb.Stopped))
			evicted := slices.Sorted(func(yield func(string) bool) {
				for p := range hb.Evicted {
					if !yield(p) {
						return
					}
				}
			})
			if !slices.Equal(nodes, stopped) || !slices.Equal(pods, evicted) {
				t.Errorf("nodes %v and pods %v, want %v and %v", nodes, pods, stopped, evicted)
			}
			if f.Subjects.NodesLost != len(hb.Stopped) || f.Subjects.NodesSeen != len(hb.Nodes) {
				t.Errorf("%d of %d nodes lost, want %d of %d", f.Subjects.NodesLost, f.Subjects.NodesSeen, len(hb.Stopped), len(hb.Nodes))
			}
			want := detect.Warning
			if len(evicted) > 0 {
				want = detect.Critical
			}
			if f.Severity != want {
				t.Errorf("severity %s, want %s", f.Severity, want)
			}
			var first time.Time
			for _, r := range hb.LastRenewals {
				if first.IsZero() || r.Before(first) {
					first = r
				}
			}
			// The fake kubelet notes a renewal when the answer comes back.
			if d := first.Sub(f.FirstSeen); d < 0 || d > time.Second {
				t.Errorf("first seen %s, the first stopped node's last renewal %s", f.FirstSeen, first)
			}
			notReady := map[string]bool{}
			back := map[string]bool{}
			for _, e := range f.Evidence {
				switch e.Role {
				case heartbeatloss.RoleNotReady:
					notReady[e.Name] = true
				case heartbeatloss.RoleHeartbeatResumed:
					back[e.Name] = true
				}
			}
			if len(notReady) != len(stopped) || len(back) != len(stopped) {
				t.Errorf("%d nodes marked NotReady and %d back in the evidence, want %d", len(notReady), len(back), len(stopped))
			}
		})
	}
}

// TestHeartbeatLossSlowRestart holds the detector to a real restart of
// the only apiserver that took longer than the fixture's: the events of
// the rv-rollback-bumped log from the apiserver's exit on are moved later
// by 10–40 s, as when the restarted apiserver takes that much longer to
// serve (a CI machine under load took 20-30 s). Every node's heartbeats
// stop at the exit and resume at the restart, so a node renewing every 10 s
// that last renewed 9 s before the exit is silent for 9 s + the restart:
// past its 30 s threshold, but for all but 9 s of it nobody was served.
// That is the feed's gap (an information finding at most), never a wave
// of nodes lost "while the rest of the cluster went on". Before silences
// shorter than 30 s counted, a 24 s restart made a critical wave of 3 of
// the 6 nodes.
func TestHeartbeatLossSlowRestart(t *testing.T) {
	dir := detecttest.RollbackFixtures()
	var exp struct {
		RV struct {
			Stopped time.Time `json:"apiserver_stopped"`
		} `json:"rv_rollback"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "rv-rollback-bumped.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil || exp.RV.Stopped.IsZero() {
		t.Fatalf("rv-rollback-bumped.json: %v (no apiserver_stopped)", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "rv-rollback-bumped.log"))
	if err != nil {
		t.Fatal(err)
	}
	st := detecttest.Engine(t)
	for _, delay := range []time.Duration{10 * time.Second, 22 * time.Second, 26 * time.Second, 40 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(log, delayAfter(t, raw, exp.RV.Stopped, delay), 0o644); err != nil {
				t.Fatal(err)
			}
			cluster := "slow-restart-" + delay.String()
			stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}),
				[]string{log}, ingest.ImportConfig{Cluster: cluster})
			if err != nil || stats.Rejected != 0 {
				t.Fatalf("importing: %v (%d rejected)", err, stats.Rejected)
			}
			got := detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, detecttest.Span(stats, cluster))
			for _, f := range got {
				t.Logf("%s %.2f %s", f.Severity, f.Confidence, f.Title)
				if f.Severity != detect.Info || !strings.HasPrefix(f.Title, "Audit feed gap") {
					t.Errorf("%s finding %q, want at most an audit-feed gap", f.Severity, f.Title)
				}
			}
		})
	}
}

// delayAfter moves the request and stage times of the events received
// from at on by delay.
func delayAfter(t *testing.T, log []byte, at time.Time, delay time.Duration) []byte {
	t.Helper()
	var out []byte
	moved := 0
	for line := range strings.Lines(string(log)) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		received, err := time.Parse(time.RFC3339Nano, ev["requestReceivedTimestamp"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if !received.Before(at) {
			moved++
			for _, k := range []string{"requestReceivedTimestamp", "stageTimestamp"} {
				ts, err := time.Parse(time.RFC3339Nano, ev[k].(string))
				if err != nil {
					t.Fatal(err)
				}
				ev[k] = ts.Add(delay).UTC().Format("2006-01-02T15:04:05.000000Z")
			}
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), '\n')
	}
	if moved == 0 {
		t.Fatalf("no event received after %s", at)
	}
	return out
}
