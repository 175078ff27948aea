package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/internal/testkit/proctest"
)

// TestServeJQCrash sends serve a jq program that overflows the stack, the
// example of the query package: the query fails with an error that says
// so, serve lives on and answers the next query, and its jq workers are
// gone.
func TestServeJQCrash(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--batch-wait", "50ms")
	if code, resp := s.post("/audit/prod", list("audit.k8s.io/v1", event("a1", "ResponseComplete", "2026-11-29T10:00:00Z", ""))); code != 200 {
		t.Fatalf("posting an event: %d %v", code, resp)
	}
	s.waitEvents("/api/v1/events?cluster=prod", 1)

	code, body := s.get("/api/v1/events?cluster=prod&jq=" + url.QueryEscape(`reduce range(3e6) as $i (null; [.]) | tojson`))
	if code != 400 || !strings.Contains(strings.Join(body, ""), `event \"a1\"`) || len(body) != 1 ||
		!strings.Contains(strings.Join(body, ""), "jq program failed: the program crashed its jq worker process by recursing or nesting values too deeply") {
		t.Errorf("crashing program: %d %q", code, body)
	}
	if _, got := s.get("/api/v1/events?cluster=prod&jq=.auditID"); strings.Join(got, ",") != `"a1"` {
		t.Errorf("the query after the crash: %q", got)
	}
	if pids := proctest.Children(t, s.cmd.Process.Pid); len(pids) > 0 {
		t.Errorf("jq workers left behind: %v", pids)
	}
	s.stop()
}

func TestJQWorkerHidden(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"help"}, &out, &errs); code != 0 || strings.Contains(out.String(), "jq-worker") || !strings.Contains(out.String(), "serve") {
		t.Errorf("help: %d\n%s", code, out.String())
	}
	if code := run(t.Context(), []string{"jq-worker", "extra"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "jq-worker takes no arguments") {
		t.Errorf("jq-worker with an argument: %d %q", code, errs.String())
	}
}
