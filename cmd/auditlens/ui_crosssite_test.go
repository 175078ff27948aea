package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestCrossSitePostsRefused opens, in Chromium, a page of another origin
// that posts forged audit events to serve on loopback in every way a page
// can without a CORS preflight: fetch in no-cors mode as text/plain and as
// an untyped Blob, sendBeacon, and a text/plain form whose one field
// spells a JSON EventList. serve in its default set-up (loopback, no
// tokens) must store none of them; the same body sent as an apiserver
// sends it is stored.
func TestCrossSitePostsRefused(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--detect=false", "--batch-wait", "50ms")
	now := time.Now().UTC().Format(time.RFC3339Nano)
	body := list("audit.k8s.io/v1", event("forged-1", "ResponseComplete", now, ""))
	otlp := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":` + strconv.Quote(event("forged-2", "ResponseComplete", now, "")) + `}}]}]}]}`
	js := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	page := `<!doctype html><title>elsewhere</title><iframe name="sink"></iframe><script>
const S = ` + js(s.base) + `, body = ` + js(body) + `, otlp = ` + js(otlp) + `;
window.sent = 0;
const done = () => { window.sent++; };
fetch(S + "/audit/forged", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}).then(done, done);
fetch(S + "/audit/forged", {method: "POST", mode: "no-cors", body: new Blob([body])}).then(done, done);
fetch(S + "/otlp/forged/v1/logs", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: otlp}).then(done, done);
if (navigator.sendBeacon(S + "/audit/forged", new Blob([body], {type: "text/plain"}))) done();
const f = document.createElement("form");
f.method = "POST"; f.action = S + "/audit/forged"; f.enctype = "text/plain"; f.target = "sink";
const i = document.createElement("input");
i.name = body.slice(0, -1) + ',"pad":"'; i.value = '"}';
f.appendChild(i); document.body.appendChild(f); f.submit(); done();
</script>`
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	defer other.Close()
	if other.URL == s.base {
		t.Fatal("the page must come from another origin")
	}

	b := newBrowser(t, 800, 600)
	b.run(chromedp.Navigate(other.URL))
	// Every attempt reached serve and was refused: four to the webhook,
	// one to OTLP.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var sent int
		b.eval("window.sent", &sent)
		hooks, otlps := s.metric(`auditlens_webhook_requests_total{code="403"}`), s.metric(`auditlens_otlp_requests_total{code="403"}`)
		if sent == 5 && hooks >= 4 && otlps >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page sent %d of 5; serve refused %v webhook and %v OTLP posts with 403", sent, hooks, otlps)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ok := s.metric(`auditlens_webhook_requests_total{code="200"}`) + s.metric(`auditlens_otlp_requests_total{code="200"}`); ok != 0 {
		t.Errorf("%v cross-site posts answered 200", ok)
	}
	time.Sleep(500 * time.Millisecond) // longer than a batch: had any been accepted, it would be stored
	if _, lines := s.get("/api/v1/events?since=24h&cluster=forged"); len(lines) != 0 {
		t.Fatalf("forged events stored: %v", lines)
	}
	// The same body, sent as an apiserver sends it, is stored.
	if code, resp := s.post("/audit/forged", body); code != 200 {
		t.Fatalf("the body as an apiserver sends it: %d %v", code, resp)
	}
	s.waitEvents("/api/v1/events?since=24h&cluster=forged", 1)
	b.checkClean()
}

// metric reads one sample from serve's /metrics, 0 when absent.
func (s *server) metric(sample string) float64 {
	s.t.Helper()
	_, lines := s.get("/metrics")
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	for _, l := range lines {
		if m := re.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
	}
	return 0
}
