package policy_test

import (
	"testing"

	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/policy"
)

// watchDetectors is the needs of the two watch detectors, whose probes
// the tables of these tests exercise (and the golden files show); the
// tests of cmd/auditlens check every detector of detectors.Default().
func watchDetectors() []policy.DetectorNeeds {
	wl, rg := watchloop.New(watchloop.Config{}), watchloop.NewRegression(watchloop.RegressionConfig{})
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
