package docs

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/detect/detectors"
)

// TestDetectorParameters holds each detector's page to the parameters the
// configuration file can set: its Parameters section names every key of
// detectors.<name> and no key the detector does not have.
func TestDetectorParameters(t *testing.T) {
	keyRE := regexp.MustCompile("`([a-z][a-z_]*)`")
	var cfg detectors.Config
	for _, d := range detectors.Default() {
		name := d.Name()
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile("detectors/" + name + ".md")
			if err != nil {
				t.Fatal(err)
			}
			_, sec, ok := strings.Cut(string(b), "\n## Parameters\n")
			if !ok {
				t.Fatalf("detectors/%s.md has no Parameters section", name)
			}
			if i := strings.Index(sec, "\n## "); i >= 0 {
				sec = sec[:i]
			}
			want := cfg.Params(name)
			var named []string
			for _, m := range keyRE.FindAllStringSubmatch(sec, -1) {
				named = append(named, m[1])
			}
			for _, k := range want {
				if !slices.Contains(named, k) {
					t.Errorf("detectors/%s.md: parameter %s is not documented", name, k)
				}
			}
			for _, k := range named {
				if strings.Contains(k, "_") && !slices.Contains(want, k) {
					t.Errorf("detectors/%s.md documents %s, which %s has not (it has %v)", name, k, name, want)
				}
			}
		})
	}
}
