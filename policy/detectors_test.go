package policy_test

import (
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/policy"
)

// watchDetectors is the needs of the two watch detectors, whose probes
// the tables of these tests exercise (and the golden files show); the
// tests of cmd/auditlens check every detector of detect.Default().
func watchDetectors() []policy.DetectorNeeds {
	wl, rg := detect.NewWatchLoop(detect.WatchLoopConfig{}), detect.NewRegression(detect.RegressionConfig{})
	return []policy.DetectorNeeds{{Detector: wl.Name(), Needs: wl.Needs()}, {Detector: rg.Name(), Needs: rg.Needs()}}
}

const header = "apiVersion: audit.k8s.io/v1\nkind: Policy\n"

func mustParse(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("parsing:\n%s\n%v", src, err)
	}
	return p
}
