package detectors_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/relist"

	"go.yaml.in/yaml/v3"
)

func parseDetectors(t *testing.T, doc string) (detectors.Config, error) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	if len(root.Content) == 0 {
		return detectors.ParseConfig(nil)
	}
	return detectors.ParseConfig(root.Content[0])
}

func TestParseConfig(t *testing.T) {
	c, err := parseDetectors(t, `
heartbeat-loss:
  floor: 45s
  min_nodes: 3
  warn_share: 0.5
  lifecycle_users: [system:kube-controller-manager]
watch-loop:
  resources: [services]
  min_restarts: 4
rv-rollback:
  min_drop: 500
relist-herd:
  look_back: 10m
`)
	if err != nil {
		t.Fatal(err)
	}
	hb := c.HeartbeatLoss
	if hb.Floor != 45*time.Second || hb.MinNodes != 3 || hb.WarnShare != 0.5 || !slices.Equal(hb.LifecycleUsers, []string{"system:kube-controller-manager"}) {
		t.Errorf("heartbeat-loss %+v", hb)
	}
	if !slices.Equal(c.WatchLoop.Resources, []string{"services"}) || c.WatchLoop.MinRestarts != 4 {
		t.Errorf("watch-loop %+v", c.WatchLoop)
	}
	if c.RVRollback.MinDrop != 500 || c.RelistHerd.LookBack != 10*time.Minute {
		t.Errorf("rv-rollback %+v, relist-herd %+v", c.RVRollback, c.RelistHerd)
	}
	// What is not set stays zero: the detector's default.
	if hb.IntervalFactor != 0 || c.RelistLoop.MinTurns != 0 {
		t.Errorf("unset parameters set: %v %v", hb.IntervalFactor, c.RelistLoop.MinTurns)
	}
	if got := len(c.Detectors()); got != len(detectors.Default()) {
		t.Errorf("%d detectors, want %d", got, len(detectors.Default()))
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"heartbeat-los:\n  floor: 1m\n", `line 1: detectors: unknown detector "heartbeat-los"`},
		{"heartbeat-loss:\n  flor: 1m\n", `line 2: detectors: heartbeat-loss has no parameter "flor"`},
		{"heartbeat-loss:\n  floor: 30\n", `line 2: detectors: heartbeat-loss: floor: want a duration`},
		{"heartbeat-loss:\n  min_nodes: two\n", `line 2: detectors: heartbeat-loss: min_nodes: want a whole number`},
		{"heartbeat-loss:\n  min_nodes: -1\n", `min_nodes -1 is negative`},
		{"heartbeat-loss:\n  settle: -5s\n", `settle -5s is negative`},
		{"heartbeat-loss:\n  warn_share: 2\n", `WarnShare 2 is a share of nodes, at most 1`},
		{"heartbeat-loss:\n  lifecycle_users: x\n", `lifecycle_users: want a list of strings`},
		{"heartbeat-loss:\n  floor: 1m\n  floor: 2m\n", `line 3: detectors: heartbeat-loss: floor is set twice`},
		{"rv-rollback:\n  min_drop: -3\n", `min_drop: want a whole number, not negative`},
		{"- watch-loop\n", `line 1: detectors: want a mapping`},
		{"watch-loop: [a]\n", `line 1: detectors: watch-loop: want a mapping of parameters`},
	} {
		_, err := parseDetectors(t, tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.doc, err, tc.want)
		}
	}
	if _, err := parseDetectors(t, ""); err != nil {
		t.Errorf("no section: %v", err)
	}
}

func TestParamKeys(t *testing.T) {
	var c detectors.Config
	got := c.Params(heartbeatloss.Name)
	for _, want := range []string{"lookback", "min_heartbeats", "interval_factor", "floor", "silence_min", "warn_share", "react_within", "lifecycle_users", "max_evidence"} {
		if !slices.Contains(got, want) {
			t.Errorf("heartbeat-loss parameters %v lack %s", got, want)
		}
	}
	if got := c.Params(relist.HerdName); !slices.Contains(got, "look_back") || !slices.Contains(got, "link_before") {
		t.Errorf("relist-herd parameters %v", got)
	}
	if c.Params("nope") != nil {
		t.Error("parameters of an unknown detector")
	}
}
