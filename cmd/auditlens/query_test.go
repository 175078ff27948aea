package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQueryAll: query --all streams every matching event, past the
// API's limit; a --limit above it says to use --all.
func TestQueryAll(t *testing.T) {
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "db")
	log := filepath.Join(dir, "audit.log")
	const n = 2500
	var b strings.Builder
	t0 := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	for i := range n {
		ts := t0.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)
		fmt.Fprintf(&b, `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"q-%d","stage":"ResponseComplete",`+
			`"requestURI":"/api/v1/pods","verb":"list","user":{"username":"u"},"objectRef":{"resource":"pods","apiVersion":"v1"},`+
			`"responseStatus":{"code":200},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n", i, ts, ts)
	}
	if err := os.WriteFile(log, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", "x", "--no-detect", "--progress", "never", log); code != 0 {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code := runCLI(t, "query", "--store", storeURL, "--since", "2026-11-29T10:00:00Z", "--until", "2026-11-29T12:00:00Z", "--all", "--jq", ".auditID")
	if lines := strings.Count(stdout, "\n"); code != 0 || lines != n || strings.Contains(stderr, "more match") {
		t.Errorf("query --all: exit %d, %d lines, stderr %s", code, lines, stderr)
	}
	_, stderr, code = runCLI(t, "query", "--store", storeURL, "--since", "2026-11-29T10:00:00Z", "--until", "2026-11-29T12:00:00Z")
	if code != 0 || !strings.Contains(stderr, "more match") {
		t.Errorf("query with the default limit: exit %d, stderr %s; want the note that more match", code, stderr)
	}
	if _, stderr, code := runCLI(t, "query", "--store", storeURL, "--limit", "200000"); code != 2 || !strings.Contains(stderr, "--all") {
		t.Errorf("query --limit 200000: exit %d %s; want a usage error naming --all", code, stderr)
	}
}
