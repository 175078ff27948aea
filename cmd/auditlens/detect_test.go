package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
)

// runCLI runs the auditlens command line in a child process (the engine
// holds one data path per process) and returns its output and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "AUDITLENS_TEST_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running auditlens %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// genScenarioLog writes a scenario's audit log with `auditlens gen`.
func genScenarioLog(t *testing.T, dir, name string, extra ...string) string {
	t.Helper()
	path := filepath.Join(dir, name+".log")
	if _, stderr, code := runCLI(t, append([]string{"gen", "--scenario", name, "--out", path}, extra...)...); code != 0 {
		t.Fatalf("gen --scenario %s: exit %d: %s", name, code, stderr)
	}
	return path
}

func decodeFindings(t *testing.T, out string) []detect.Finding {
	t.Helper()
	var fs []detect.Finding
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("output is not a JSON array of findings: %v\n%s", err, out)
	}
	return fs
}

func countByDetector(fs []detect.Finding) map[string]int {
	n := map[string]int{}
	for _, f := range fs {
		n[f.Detector]++
	}
	return n
}

func TestScan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	incident := genScenarioLog(t, dir, "seed-incident")
	// A directory holding a gzipped log.
	healthy := filepath.Join(dir, "logs")
	if err := os.Mkdir(healthy, 0o755); err != nil {
		t.Fatal(err)
	}
	genScenarioLog(t, dir, "healthy-controller-manager", "--scale", "real", "--out", filepath.Join(healthy, "healthy.log.gz"))
	// Detector parameters from --config: a loop needs 1000 restarts.
	strict := filepath.Join(dir, "strict.yaml")
	if err := os.WriteFile(strict, []byte("detectors:\n  watch-loop:\n    min_restarts: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("detectors:\n  watch-loop:\n    min_restart: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		check    func(t *testing.T, stdout string)
		detector map[string]int
	}{
		{name: "incident, json", args: []string{"--format", "json", incident}, code: 1,
			detector: map[string]int{watchloop.Name: 1, watchloop.RegressionName: 4}},
		{name: "incident, text", args: []string{incident}, code: 1, check: func(t *testing.T, out string) {
			for _, want := range []string{"5 findings: 1 critical, 3 warning, 1 info.", "CRITICAL  watch-loop", "resourceVersion 1200",
				"objects (3): endpoints default/api, endpoints payments/billing, endpoints web/frontend"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
		}},
		{name: "incident, markdown", args: []string{"--format", "markdown", "--cluster", "prod", incident}, code: 1, check: func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "# auditlens findings\n") || !strings.Contains(out, "| cluster | `prod` |") {
				t.Errorf("output:\n%.400s", out)
			}
		}},
		{name: "parameters from --config", args: []string{"--format", "json", "--config", strict, incident}, code: 1,
			detector: map[string]int{watchloop.RegressionName: 4}},
		{name: "a parameter misspelt", args: []string{"--config", typo, incident}, code: 2},
		{name: "healthy directory", args: []string{"--format", "json", healthy}, code: 0, detector: map[string]int{}},
		{name: "healthy, text", args: []string{healthy}, code: 0, check: func(t *testing.T, out string) {
			if out != "No findings.\n" {
				t.Errorf("output %q", out)
			}
		}},
		{name: "no files", args: []string{}, code: 2},
		{name: "bad format", args: []string{"--format", "yaml", incident}, code: 2},
		{name: "missing file", args: []string{filepath.Join(dir, "nope.log")}, code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			stdout, stderr, code := runCLI(t, append([]string{"scan", "--tmp", tmp}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%.2000s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if tc.detector != nil {
				if got := countByDetector(decodeFindings(t, stdout)); len(got) != len(tc.detector) || !equalCounts(got, tc.detector) {
					t.Errorf("findings by detector %v, want %v", got, tc.detector)
				}
			}
			if tc.check != nil {
				tc.check(t, stdout)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("the throwaway store was left behind: %v", left)
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// TestImportDetectAndServe: import runs the detectors over what it
// imported, a second import finds the same incidents (nothing new),
// `detect` finds them over a time range, and serve's continuous
// evaluation finds them for the findings API.
func TestImportDetectAndServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	// The incident ends a minute ago, so that serve's window (ending now) holds it.
	start := time.Now().UTC().Add(-4 * time.Minute).Truncate(time.Second)
	log := genScenarioLog(t, dir, "seed-incident", "--start", start.Format(time.RFC3339))
	data := filepath.Join(dir, "data")
	storeURL := "chdb://" + filepath.Join(data, "clickhouse")

	stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", "prod", "--progress", "never", log)
	if code != 0 || !strings.Contains(stdout, "detectors: 5 findings (5 new, 0 updated)") || !strings.Contains(stdout, "CRITICAL watch-loop") {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, "import", "--store", storeURL, "--cluster", "prod", "--progress", "never", log)
	if code != 0 || !strings.Contains(stdout, "detectors: 5 findings (0 new, 0 updated)") {
		t.Fatalf("second import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, "import", "--store", storeURL, "--cluster", "other", "--no-detect", "--progress", "never", log)
	if code != 0 || strings.Contains(stdout, "detectors:") {
		t.Fatalf("import --no-detect: exit %d\n%s", code, stdout)
	}

	stdout, stderr, code = runCLI(t, "detect", "--store", storeURL, "--since", "10m", "--cluster", "prod", "--format", "json")
	if code != 0 {
		t.Fatalf("detect: exit %d\n%s", code, stderr)
	}
	fs := decodeFindings(t, stdout)
	if got := countByDetector(fs); got[watchloop.Name] != 1 || got[watchloop.RegressionName] != 4 {
		t.Fatalf("detect found %v", got)
	}
	var loopID string
	for _, f := range fs {
		if f.Detector == watchloop.Name {
			loopID = f.ID
		}
	}
	if _, stderr, code := runCLI(t, "detect", "--store", storeURL, "--since", "nonsense"); code != 2 || !strings.Contains(stderr, "since") {
		t.Errorf("detect --since nonsense: exit %d: %s", code, stderr)
	}

	// serve evaluates continuously: the cluster imported with
	// --no-detect gets its findings from serve alone.
	s := startServe(t, "--data", data, "--detect-interval", "2s", "--detect-window", "30m")
	var served []detect.Finding
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := s.getBody("/api/v1/findings?detector=watch-loop&cluster=other&since=1h")
		if code != http.StatusOK {
			t.Fatalf("GET findings: %d %s", code, body)
		}
		served = decodeFindings(t, body)
		if len(served) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(served) != 1 || served[0].Cluster != "other" || served[0].Subjects.ResourceVersion != "1200" {
		t.Fatalf("serve's findings for cluster other: %+v\nlogs:\n%s", served, s.logs.String())
	}
	for _, tc := range []struct {
		path string
		code int
		ids  []string
	}{
		{"/api/v1/findings?cluster=prod&detector=watch-loop", 200, []string{loopID}},
		{"/api/v1/findings?cluster=prod,other&detector=watch-loop&severity=critical", 200, []string{loopID, served[0].ID}},
		{"/api/v1/findings?cluster=prod&until=" + start.Add(-time.Hour).Format(time.RFC3339), 200, nil},
		{"/api/v1/findings?cluster=nowhere", 200, nil},
		{"/api/v1/findings?since=yesterday", 400, nil},
		{"/api/v1/findings?severity=fatal", 400, nil},
		{"/api/v1/findings/" + loopID, 200, []string{loopID}},
		{"/api/v1/findings/watch-loop-00000000000000000000", 404, nil},
	} {
		code, body := s.getBody(tc.path)
		if code != tc.code {
			t.Errorf("GET %s: %d, want %d: %s", tc.path, code, tc.code, body)
			continue
		}
		if code != 200 {
			continue
		}
		var ids []string
		if strings.HasPrefix(body, "[") {
			for _, f := range decodeFindings(t, body) {
				ids = append(ids, f.ID)
			}
		} else {
			var f detect.Finding
			if err := json.Unmarshal([]byte(body), &f); err != nil {
				t.Fatal(err)
			}
			ids = []string{f.ID}
		}
		slices.Sort(ids)
		want := slices.Clone(tc.ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("GET %s: %v, want %v", tc.path, ids, want)
		}
	}
	s.stop()
	if !strings.Contains(s.logs.String(), "detectors running") {
		t.Errorf("serve did not log its detectors:\n%s", s.logs.String())
	}
}

func (s *server) getBody(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get(s.base + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}
