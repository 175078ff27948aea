package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestServeWebhookToQuery drives serve as a kube-apiserver would: batches
// with a malformed event inside, a retried batch, v1beta1 and
// mixed-precision timestamps, and reads them back through the query API.
func TestServeWebhookToQuery(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--data", dir, "--batch-wait", "50ms", "--max-body-bytes", "200000")

	good := list("audit.k8s.io/v1",
		event("a1", "ResponseStarted", "2026-11-29T10:00:00.123456Z", ""),
		event("a1", "ResponseComplete", "2026-11-29T10:00:05.5Z", ""),
		`{"auditID":"bad1","stage":"ResponseComplete","stageTimestamp":"yesterday"}`,
		event("a2", "ResponseComplete", "2026-11-29T10:00:06.123456789Z", ""),
		`"not an object"`,
	)
	code, resp := s.post("/audit/prod", good)
	if code != 200 || resp["accepted"] != 3.0 || resp["rejected"] != 2.0 {
		t.Fatalf("good batch with 2 malformed events: %d %v", code, resp)
	}
	// The apiserver timed out waiting and sends the same batch again.
	code, resp = s.post("/audit/prod", good)
	if code != 200 || resp["accepted"] != 3.0 {
		t.Fatalf("retried batch: %d %v", code, resp)
	}
	// A 2018 cluster: v1beta1 with second-precision timestamp and
	// metadata.creationTimestamp, no stageTimestamp.
	beta := list("audit.k8s.io/v1beta1",
		`{"metadata":{"creationTimestamp":"2026-11-29T10:01:00Z"},"level":"Metadata","timestamp":"2026-11-29T10:01:00Z","auditID":"b1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/endpoints/web","verb":"delete","user":{"username":"system:kube-controller-manager"},"sourceIPs":["10.0.0.1"],"objectRef":{"resource":"endpoints","namespace":"default","name":"web","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}`)
	if code, resp := s.post("/audit/prod", beta); code != 200 || resp["accepted"] != 1.0 {
		t.Fatalf("v1beta1 batch: %d %v", code, resp)
	}
	// A bare Event to another cluster.
	if code, resp := s.post("/audit/staging", strings.Replace(event("c1", "ResponseComplete", "2026-11-29T10:02:00Z", ""), "{", `{"kind":"Event","apiVersion":"audit.k8s.io/v1",`, 1)); code != 200 || resp["accepted"] != 1.0 {
		t.Fatalf("bare event: %d %v", code, resp)
	}

	// Bodies that are not audit events, or too large.
	for _, tc := range []struct {
		body string
		code int
		msg  string
	}{
		{`{"kind":"Pod","apiVersion":"v1"}`, 400, "EventList or Event"},
		{`not json`, 400, "EventList or Event"},
		{list("audit.k8s.io/v1", `{"auditID":"x"}`), 400, "malformed"},
		{list("audit.k8s.io/v1", event("big", "ResponseComplete", "2026-11-29T10:00:00Z", `,"annotations":{"pad":"`+strings.Repeat("x", 300000)+`"}`)), 413, "larger than"},
	} {
		code, resp := s.post("/audit/prod", tc.body)
		if code != tc.code || !strings.Contains(fmt.Sprint(resp["error"]), tc.msg) {
			t.Errorf("body %.60q: got %d %v, want %d with %q", tc.body, code, resp["error"], tc.code, tc.msg)
		}
	}

	lines := s.waitEvents("/api/v1/events?cluster=prod", 4)
	seen := map[string]bool{}
	for _, l := range lines {
		var ev struct {
			AuditID, Stage string
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("event line %q: %v", l, err)
		}
		k := ev.AuditID + "/" + ev.Stage
		if seen[k] {
			t.Errorf("duplicate %s in results", k)
		}
		seen[k] = true
	}
	for _, k := range []string{"a1/ResponseStarted", "a1/ResponseComplete", "a2/ResponseComplete", "b1/ResponseComplete"} {
		if !seen[k] {
			t.Errorf("missing %s in %v", k, seen)
		}
	}

	// Filters and jq over HTTP.
	_, got := s.get("/api/v1/events?cluster=prod&verb=delete&jq=" + urlQuery(`[.auditID, .objectRef.name]`))
	if strings.Join(got, "\n") != `["b1","web"]` {
		t.Errorf("jq over filtered events: %q", got)
	}
	_, got = s.get("/api/v1/events?since=2026-11-29T10:00:06Z&until=2026-11-29T10:01:30Z&jq=.auditID")
	if strings.Join(got, ",") != `"a2","b1"` {
		t.Errorf("time window: %q", got)
	}
	// The staging event may be written in a later batch than prod's.
	s.waitEvents("/api/v1/events?cluster=staging", 1)
	_, got = s.get("/api/v1/events?cluster=staging&jq=.stage")
	if strings.Join(got, ",") != `"ResponseComplete"` {
		t.Errorf("bare event cluster: %q", got)
	}
	if code, body := s.get("/api/v1/events?jq=" + urlQuery(`.auditID |||`)); code != http.StatusBadRequest || !strings.Contains(strings.Join(body, ""), "jq") {
		t.Errorf("bad jq: %d %q", code, body)
	}
	if code, body := s.get("/api/v1/events?code=abc"); code != http.StatusBadRequest {
		t.Errorf("bad code filter: %d %q", code, body)
	}
	_, metrics := s.get("/metrics")
	m := strings.Join(metrics, "\n")
	for _, want := range []string{`auditlens_events_rejected_total{cluster="prod"} 5`, `auditlens_webhook_requests_total{code="413"} 1`, `auditlens_events_duplicate_total 3`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	s.stop()

	// After a restart everything is still there, once.
	s = startServe(t, "--data", dir)
	s.waitEvents("/api/v1/events?cluster=prod", 4)
	s.stop()
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "|", "%7C", "#", "%23").Replace(s)
}

// TestServeCrashLosesNothingAcknowledged kills serve with SIGKILL right
// after it acknowledged batches that it had not yet written to the store
// (the writer waits an hour to fill a batch), then checks a restart stores
// every acknowledged event exactly once.
func TestServeCrashLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--data", dir, "--batch-wait", "1h", "--batch-rows", "1000000")
	acked := 0
	for b := range 5 {
		var items []string
		for i := range 40 {
			items = append(items, event(fmt.Sprintf("crash-%d-%d", b, i), "ResponseComplete", fmt.Sprintf("2026-11-29T11:%02d:%02d.000001Z", b, i), ""))
		}
		code, resp := s.post("/audit/crash", list("audit.k8s.io/v1", items...))
		if code != 200 {
			t.Fatalf("batch %d: %d %v", b, code, resp)
		}
		acked += int(resp["accepted"].(float64))
	}
	if _, lines := s.get("/api/v1/events?cluster=crash"); len(lines) != 0 {
		t.Fatalf("the writer stored %d events before the crash; the test needs them only in the spool", len(lines))
	}
	s.kill() // SIGKILL: no shutdown, no drain

	s = startServe(t, "--data", dir, "--batch-wait", "50ms")
	lines := s.waitEvents("/api/v1/events?cluster=crash&limit=1000", acked)
	if len(lines) != 200 {
		t.Fatalf("got %d events", len(lines))
	}
	s.stop()
}
