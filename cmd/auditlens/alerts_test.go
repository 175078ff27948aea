package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/alert"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/testkit/amtest"
)

// startAlertmanager runs the pinned Alertmanager (deploy/e2e/build.sh) on
// 127.0.0.1 with one receiver that sends nowhere, and returns its URL.
// Skips like the end-to-end tests do with -short or AUDITLENS_E2E=skip.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("the real Alertmanager does not run with -short")
	case os.Getenv("AUDITLENS_E2E") == "skip":
		t.Skip("AUDITLENS_E2E=skip")
	}
	out, err := exec.Command("bash", "../../deploy/e2e/build.sh", "alertmanager").Output()
	if err != nil {
		t.Fatalf("building alertmanager with deploy/e2e/build.sh (needs Go and the module proxy; about a minute when not cached): %v", err)
	}
	return amtest.Start(t, filepath.Join(strings.TrimSpace(string(out)), "alertmanager"), t.TempDir())
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func amAlerts(t *testing.T, base, findingID string) []amtest.Alert {
	t.Helper()
	as, err := amtest.Alerts(base, fmt.Sprintf("finding_id=%q", findingID))
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// loopSource replays findings found in a recorded watch loop as if they
// were happening now: while the loop runs each one is last seen at the
// time of asking; once stopped, its last_seen stays where it was.
type loopSource struct {
	mu      sync.Mutex
	fs      []detect.Finding
	stopped bool
}

func (s *loopSource) List(_ context.Context, f detect.ListFilter) ([]detect.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []detect.Finding
	for i := range s.fs {
		if !s.stopped {
			span := s.fs[i].LastSeen.Sub(s.fs[i].FirstSeen)
			s.fs[i].LastSeen = time.Now().UTC()
			s.fs[i].FirstSeen = s.fs[i].LastSeen.Add(-span)
		}
		if !s.fs[i].LastSeen.Before(f.Since) {
			out = append(out, s.fs[i])
		}
	}
	return out, nil
}

func (s *loopSource) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// TestAlertsRealAlertmanager: the findings of the real watch loop the
// fixture kcm-watch-loop.log recorded (kube-controller-manager against a
// kube-apiserver) reach a real Alertmanager through its v2 API, firing
// with the finding's labels and annotations, and are resolved there once
// the loop is no longer seen.
func TestAlertsRealAlertmanager(t *testing.T) {
	t.Parallel()
	base := startAlertmanager(t)
	stdout, stderr, code := runCLI(t, "scan", "--format", "json", "--cluster", "e2e", "../../deploy/e2e/fixtures/kcm-watch-loop.log")
	if code != 0 && code != 1 {
		t.Fatalf("scan: exit %d: %s", code, stderr)
	}
	src := &loopSource{fs: decodeFindings(t, stdout)}
	var loop detect.Finding
	for _, f := range src.fs {
		if f.Detector == "watch-loop" {
			loop = f
		}
	}
	if loop.ID == "" {
		t.Fatalf("the fixture gave no watch-loop finding: %s", stdout)
	}
	// repeat 10s puts an active alert's endsAt 30s ahead: the alert going
	// away within a few seconds of the loop stopping is our resolve, not
	// Alertmanager expiring it.
	cfg, err := alert.Parse([]byte(`
alerts:
  ui_url: http://auditlens.example.com
  resolve_after: 2s
  repeat: 10s
  interval: 200ms
  routes:
  - name: oncall
    min_severity: warning
    detectors: [watch-loop]
    alertmanager: {url: ` + base + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := alert.NewNotifier(cfg, src, alert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var firing []amtest.Alert
	waitFor(t, 15*time.Second, "the watch-loop alert to fire", func() bool {
		firing = amAlerts(t, base, loop.ID)
		return len(firing) == 1 && firing[0].Status.State == "active"
	})
	a := firing[0]
	want := map[string]string{"alertname": "watch-loop", "cluster": "e2e", "severity": string(loop.Severity), "finding_id": loop.ID}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	if a.Annotations["summary"] != loop.Title || a.Annotations["remediation"] != loop.Remediation || a.Annotations["description"] != loop.Summary {
		t.Errorf("annotations %v, want the finding's title, summary and remediation", a.Annotations)
	}
	if link := "http://auditlens.example.com/findings/" + loop.ID; a.GeneratorURL != link {
		t.Errorf("generatorURL %q, want %q", a.GeneratorURL, link)
	}
	if until := time.Until(a.EndsAt); until < 20*time.Second {
		t.Errorf("active alert ends in %s, want about 3 repeats (30s)", until)
	}
	t.Logf("firing in Alertmanager: %v, ends %s", a.Labels, a.EndsAt.Format(time.RFC3339))

	src.stop()
	stopped := time.Now()
	waitFor(t, 10*time.Second, "the watch-loop alert to resolve", func() bool {
		return len(amAlerts(t, base, loop.ID)) == 0
	})
	t.Logf("resolved in Alertmanager %s after the loop stopped", time.Since(stopped).Round(100*time.Millisecond))
}

// TestAlertsServe: serve, given an alerts: route in --config, pushes the
// watch-loop finding imported from the recorded real watch loop to the
// real Alertmanager and counts it in auditlens_findings_active; once serve
// stops re-sending, Alertmanager ends the alert by itself at the endsAt it
// was given (three repeats ahead).
func TestAlertsServe(t *testing.T) {
	t.Parallel()
	base := startAlertmanager(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	stdout, stderr, code := runCLI(t, "import", "--store", "chdb://"+filepath.Join(data, "clickhouse"), "--cluster", "e2e",
		"--progress", "never", "../../deploy/e2e/fixtures/kcm-watch-loop.log")
	if code != 0 || !strings.Contains(stdout, "CRITICAL watch-loop") {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	loopID := regexp.MustCompile(`\[(watch-loop-[0-9a-f]+)\]`).FindStringSubmatch(stdout)
	if loopID == nil {
		t.Fatalf("import named no watch-loop finding:\n%s", stdout)
	}
	// The recording is from the past: a resolve_after of a century keeps
	// its finding active.
	cfg := filepath.Join(dir, "auditlens.yaml")
	if err := os.WriteFile(cfg, []byte(`reports: []
alerts:
  resolve_after: 876000h
  repeat: 1s
  interval: 200ms
  ui_url: http://auditlens.example.com
  routes:
  - name: oncall
    min_severity: critical
    alertmanager:
      url: `+base+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--data", data, "--detect=false", "--config", cfg)
	waitFor(t, 15*time.Second, "the watch-loop alert to fire", func() bool {
		as := amAlerts(t, base, loopID[1])
		return len(as) == 1 && as[0].Status.State == "active" && as[0].Labels["alertname"] == "watch-loop" && as[0].Labels["cluster"] == "e2e"
	})
	code, body := s.getBody("/metrics")
	if gauge := `auditlens_findings_active{cluster="e2e",detector="watch-loop",severity="critical"} 1`; code != http.StatusOK || !strings.Contains(body, gauge) {
		t.Errorf("/metrics: %d, want %s in:\n%s", code, gauge, grepLines(body, "auditlens_findings_active"))
	}
	if !strings.Contains(body, `auditlens_alert_deliveries_total{kind="alertmanager",outcome="ok",route="oncall"}`) {
		t.Errorf("/metrics counts no ok alertmanager delivery:\n%s", grepLines(body, "auditlens_alert"))
	}
	s.stop()
	stopped := time.Now()
	// What was sent is kept for the next start.
	if b, err := os.ReadFile(filepath.Join(data, "alerts-sent.json")); err != nil || !strings.Contains(string(b), loopID[1]) {
		t.Errorf("alerts-sent.json after a stop: %v %.200s", err, b)
	}
	waitFor(t, 15*time.Second, "Alertmanager to end the alert serve no longer sends", func() bool {
		return len(amAlerts(t, base, loopID[1])) == 0
	})
	t.Logf("Alertmanager ended the alert %s after serve stopped", time.Since(stopped).Round(100*time.Millisecond))
}

func TestAlertsServeBadConfig(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "auditlens.yaml")
	if err := os.WriteFile(cfg, []byte("alerts:\n  routes:\n  - name: oncall\n    min_severity: loud\n    alertmanager: {url: http://127.0.0.1:9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--config", cfg)
	if code != 2 || !strings.Contains(stderr, "line 4: min_severity") {
		t.Errorf("serve with a bad alerts config: exit %d, want 2 and the line at fault:\n%s", code, stderr)
	}
}
