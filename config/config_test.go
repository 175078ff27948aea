package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
)

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auditlens.yaml")
	doc := `
reports:
- name: daily
  schedule: "0 6 * * *"
  time_zone: Europe/Berlin
  min_severity: warning
  outputs: {dir: /tmp/reports}
alerts:
  resolve_after: 20m
  routes:
  - name: oncall
    alertmanager: {url: "http://alertmanager:9093"}
detectors:
  heartbeat-loss:
    floor: 45s
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	f, warnings, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %v", warnings)
	}
	if len(f.Reports) != 1 || f.Reports[0].TimeZone != "Europe/Berlin" || f.Reports[0].MinSeverity != detect.Warning {
		t.Errorf("reports %+v", f.Reports)
	}
	if f.Alerts.ResolveAfter != 20*time.Minute || len(f.Alerts.Routes) != 1 {
		t.Errorf("alerts %+v", f.Alerts)
	}
	if f.Detectors.HeartbeatLoss.Floor != 45*time.Second {
		t.Errorf("detectors %+v", f.Detectors)
	}
}

// The reports' camel-case keys of earlier releases still work, each with
// a warning that names its line and its new name.
func TestOldKeys(t *testing.T) {
	f, warnings, err := Parse([]byte(`reports:
- name: daily
  schedule: "0 6 * * *"
  timeZone: Europe/Berlin
  minSeverity: critical
  gapAfter: 20m
  feedLookback: 72h
`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Reports[0]
	if s.TimeZone != "Europe/Berlin" || s.MinSeverity != detect.Critical || time.Duration(s.GapAfter) != 20*time.Minute || time.Duration(s.FeedLookback) != 72*time.Hour {
		t.Errorf("report %+v", s)
	}
	want := []string{
		"line 4: reports: timeZone is now called time_zone",
		"line 5: reports: minSeverity is now called min_severity",
		"line 6: reports: gapAfter is now called gap_after",
		"line 7: reports: feedLookback is now called feed_lookback",
	}
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(warnings[i], w) {
			t.Errorf("warning %q, want %q", warnings[i], w)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"reprts: []\n", `line 1: unknown section "reprts"`},
		{"- a\n", "line 1: want a mapping with the sections"},
		{"reports: {name: a}\n", "line 1: reports: want a list of reports"},
		{"reports:\n- name: a\n  schedule: '0 6 * * *'\n  shedule: x\n", `line 2: reports: `},
		{"reports:\n- name: a\n  schedule: '0 6 * * *'\n  timeZone: UTC\n  time_zone: UTC\n", `line 2: reports: `},
		{"alerts:\n  resolve_afte: 1m\n", "line 2"},
		{"detectors:\n  watch-loop:\n    min_restart: 3\n", `line 3: detectors: watch-loop has no parameter "min_restart"`},
		{"alerts: {}\nalerts: {}\n", "line 2: section alerts is there twice"},
		{"reports: [\n", "yaml"},
	} {
		_, _, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.doc, err, tc.want)
		}
	}
	for _, empty := range []string{"", "# nothing\n", "reports:\nalerts:\ndetectors:\n"} {
		if _, _, err := Parse([]byte(empty)); err != nil {
			t.Errorf("%q: %v", empty, err)
		}
	}
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "reading the configuration") {
		t.Errorf("missing file: %v", err)
	}
}
