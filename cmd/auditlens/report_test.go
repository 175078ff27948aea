package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/report"
)

// TestReportCommand imports the seed incident and builds reports over it
// with `auditlens report`: to stdout, to a directory in every format, and
// a later one that sees the incident resolved.
func TestReportCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	log := genScenarioLog(t, dir, "seed-incident")
	db := "chdb://" + filepath.Join(dir, "db")
	if _, stderr, code := runCLI(t, "import", "--store", db, "--cluster", "demo", "--no-detect", log); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	// Findings come from detect, as serve would store them.
	if _, stderr, code := runCLI(t, "detect", "--store", db, "--since", "2025-12-31T23:00:00Z", "--until", "2026-01-01T01:00:00Z"); code != 1 && code != 0 {
		t.Fatalf("detect: exit %d: %s", code, stderr)
	}

	out := filepath.Join(dir, "out")
	stdout, stderr, code := runCLI(t, "report", "--store", db, "--name", "hourly", "--window", "1h",
		"--until", "2026-01-01T00:30:00Z", "--format", "html,md,json", "--out", out)
	if code != 0 {
		t.Fatalf("report --out: exit %d: %s", code, stderr)
	}
	for _, ext := range []string{"html", "md", "json"} {
		path := filepath.Join(out, "hourly-20260101T0030Z."+ext)
		if !strings.Contains(stdout, path) {
			t.Errorf("stdout %q does not name %s", stdout, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "watch-loop") {
			t.Errorf("%s does not mention the watch-loop finding", path)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "hourly-20260101T0030Z.json"))
	var first report.Report
	if err := json.Unmarshal(b, &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Changes.New) != 5 || first.Changes.Previous != "" || len(first.Feed) != 1 || first.Feed[0].Cluster != "demo" {
		t.Errorf("first report: %d new, previous %q, feed %+v", len(first.Changes.New), first.Changes.Previous, first.Feed)
	}

	// An hour later the incident is over: the stored first report makes
	// its findings resolved.
	stdout, stderr, code = runCLI(t, "report", "--store", db, "--name", "hourly", "--window", "1h",
		"--until", "2026-01-01T01:30:00Z", "--format", "json")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	var second report.Report
	if err := json.Unmarshal([]byte(stdout), &second); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if second.Changes.Previous != first.ID || len(second.Changes.Resolved) != 5 || len(second.Changes.New)+len(second.Changes.Ongoing) != 0 {
		t.Errorf("second report changes: %+v", second.Changes)
	}

	for _, args := range [][]string{
		{"--format", "pdf"},
		{"--format", "md,json"}, // several formats need --out
		{"--window", "1m"},
		{"--severity", "fatal"},
		{"--until", "yesterday"},
	} {
		_, stderr, code := runCLI(t, append([]string{"report", "--store", db}, args...)...)
		if code != 2 || !strings.Contains(stderr, strings.TrimPrefix(args[0], "--")) {
			t.Errorf("report %v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestServeReportsConfig checks that serve refuses a bad --config before
// it opens anything.
func TestServeReportsConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "reports.yaml")
	if err := os.WriteFile(bad, []byte("reports:\n- name: daily\n  schedule: '0 25 * * *'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--config", bad)
	if code != 2 || !strings.Contains(stderr, "--config") || !strings.Contains(stderr, "hour") {
		t.Errorf("serve with a bad --config: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "clickhouse")); err == nil {
		t.Error("serve opened the store before checking --config")
	}
}

// serve --config runs the schedules: a report whose last stored run is
// days old is caught up at start, written to its directory, posted to its
// webhook, listed by the API and counted in /metrics.
func TestServeReportsSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	storeURL := "chdb://" + filepath.Join(data, "clickhouse")
	old := time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Minute)
	if _, stderr, code := runCLI(t, "report", "--store", storeURL, "--name", "daily", "--until", old.Format(time.RFC3339), "--format", "json"); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}

	posts := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posts <- b
	}))
	defer hook.Close()
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "reports.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`reports:
- name: daily
  schedule: "0 6 * * *"
  time_zone: UTC
  window: 24h
  outputs:
    dir: %s
    formats: [md, json]
    webhooks:
    - url: %s/hook
`, out, hook.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--data", data, "--config", cfg, "--detect=false")

	now := time.Now().UTC()
	slot := time.Date(now.Year(), now.Month(), now.Day(), 6, 0, 0, 0, time.UTC)
	if slot.After(now) {
		slot = slot.Add(-24 * time.Hour)
	}
	select {
	case body := <-posts:
		var r struct {
			Name      string    `json:"name"`
			WindowEnd time.Time `json:"window_end"`
		}
		if err := json.Unmarshal(body, &r); err != nil || r.Name != "daily" || !r.WindowEnd.Equal(slot) {
			t.Fatalf("webhook got %.300s (%v); want the daily report ending %s", body, err, slot)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no report posted\n%s", s.logs.String())
	}
	// The files are written before the webhook is posted.
	stamp := slot.Format("20060102T1504Z")
	for _, ext := range []string{".md", ".json"} {
		if _, err := os.Stat(filepath.Join(out, "daily-"+stamp+ext)); err != nil {
			t.Error(err)
		}
	}
	// Deliveries are recorded by a second save, after the webhook answered.
	var listed []map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := s.getBody("/api/v1/reports?name=daily")
		if code != 200 || json.Unmarshal([]byte(body), &listed) != nil {
			t.Fatalf("GET reports: %d %s", code, body)
		}
		_, metrics := s.getBody("/metrics")
		if len(listed) == 2 && strings.Contains(metrics, `auditlens_report_deliveries_total{kind="webhook",outcome="ok",report="daily"} 1`) {
			if !strings.Contains(metrics, `auditlens_report_runs_total{outcome="ok",report="daily"} 1`) {
				t.Errorf("metrics: no successful run counted")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports listed: %v; metrics:\n%s", listed, grepLines(metrics, "auditlens_report_"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func grepLines(text, substr string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
