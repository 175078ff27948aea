package alert

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/detect"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// fakeClock stands still until moved; After fires at once (retries do not wait).
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// fakeSource returns its findings seen since the filter's Since.
type fakeSource struct{ fs []detect.Finding }

func (s *fakeSource) List(_ context.Context, f detect.ListFilter) ([]detect.Finding, error) {
	var out []detect.Finding
	for _, x := range s.fs {
		if !x.LastSeen.Before(f.Since) {
			out = append(out, x)
		}
	}
	return out, nil
}

// recorder is a target that records what it was posted, failing the
// first fail posts with 503.
type recorder struct {
	mu     sync.Mutex
	bodies []string
	fail   int
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	r.bodies = append(r.bodies, req.URL.Path+" "+string(b))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.bodies
	r.bodies = nil
	return out
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func loop(sev detect.Severity, lastSeen time.Time) detect.Finding {
	return detect.Finding{
		ID: "watch-loop-0123456789abcdef0123", Detector: "watch-loop", Cluster: "prod", Severity: sev,
		Title: "kube-controller-manager re-watches endpointslices from a stale resourceVersion", Summary: "It restarted its watch 12 times.",
		Remediation: "Restart kube-controller-manager.", FirstSeen: t0.Add(-10 * time.Minute), LastSeen: lastSeen,
	}
}

// amEvents decodes Alertmanager posts into "finding_id severity ends" lines.
func amAlerts(t *testing.T, bodies []string) []amAlert {
	t.Helper()
	var out []amAlert
	for _, b := range bodies {
		path, body, _ := strings.Cut(b, " ")
		if path != "/api/v2/alerts" {
			t.Fatalf("posted to %s, want /api/v2/alerts", path)
		}
		var as []amAlert
		if err := json.Unmarshal([]byte(body), &as); err != nil {
			t.Fatal(err)
		}
		out = append(out, as...)
	}
	return out
}

func TestAlertNotifierStates(t *testing.T) {
	am, hook := &recorder{}, &recorder{}
	amSrv, hookSrv := httptest.NewServer(am), httptest.NewServer(hook)
	defer amSrv.Close()
	defer hookSrv.Close()
	cfg, err := Parse([]byte(`
alerts:
  ui_url: https://auditlens.example.com/
  resolve_after: 5m
  repeat: 1m
  interval: 15s
  routes:
  - name: oncall
    min_severity: warning
    alertmanager: {url: ` + amSrv.URL + `}
  - name: chat
    webhook: {url: ` + hookSrv.URL + `/hook, format: json}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	src := &fakeSource{}
	reg := prometheus.NewRegistry()
	n, err := NewNotifier(cfg, src, Options{Clock: clock, Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(at time.Duration) {
		t.Helper()
		clock.now = t0.Add(at)
		if _, err := n.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hookEvents := func() []string {
		var out []string
		for _, b := range hook.take() {
			_, body, _ := strings.Cut(b, " ")
			var m WebhookMessage
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, string(m.Event)+" "+string(m.Finding.Severity))
		}
		return out
	}

	// An info finding: below oncall's min_severity, so only chat hears of it.
	src.fs = []detect.Finding{loop(detect.Info, t0)}
	pass(0)
	if got := amAlerts(t, am.take()); len(got) != 0 {
		t.Errorf("alertmanager got %d alerts for an info finding, want none", len(got))
	}
	if got := hookEvents(); strings.Join(got, ",") != "new info" {
		t.Errorf("webhook events %v, want [new info]", got)
	}
	if v := n.m.Active.value("watch-loop", "info", "prod"); v != 1 {
		t.Errorf("auditlens_findings_active = %v, want 1", v)
	}

	// Escalated to warning: Alertmanager hears of it first, chat of the escalation.
	src.fs = []detect.Finding{loop(detect.Warning, t0.Add(30*time.Second))}
	pass(30 * time.Second)
	got := amAlerts(t, am.take())
	if len(got) != 1 || got[0].Labels["severity"] != "warning" || !got[0].EndsAt.Equal(t0.Add(30*time.Second+3*time.Minute)) {
		t.Fatalf("alertmanager got %+v, want one warning alert ending 3 repeats ahead", got)
	}
	if got := hookEvents(); strings.Join(got, ",") != "escalated warning" {
		t.Errorf("webhook events %v, want [escalated warning]", got)
	}

	// Nothing changed and the repeat is not due: nothing is sent.
	pass(45 * time.Second)
	if b := append(am.take(), hook.take()...); len(b) != 0 {
		t.Errorf("sent %d posts with nothing new and no repeat due", len(b))
	}

	// A repeat is due: Alertmanager is sent the alert again, chat is not.
	pass(90 * time.Second)
	if got := amAlerts(t, am.take()); len(got) != 1 || got[0].Labels["finding_id"] != "watch-loop-0123456789abcdef0123" {
		t.Errorf("repeat: alertmanager got %+v, want the active alert again", got)
	}
	if got := hookEvents(); len(got) != 0 {
		t.Errorf("repeat: webhook got %v, want nothing", got)
	}

	// Alertmanager is down at the next repeat: the alert is sent at the
	// pass after (the state did not advance).
	am.fail = 100
	pass(150 * time.Second)
	am.fail = 0
	pass(165 * time.Second)
	if got := amAlerts(t, am.take()); len(got) != 1 {
		t.Errorf("after a failed repeat: alertmanager got %d alerts, want 1", len(got))
	}
	if v := testutil.ToFloat64(n.m.Deliveries.WithLabelValues("oncall", "alertmanager", "error")); v != 1 {
		t.Errorf("failed deliveries = %v, want 1", v)
	}

	// Not seen for resolve_after: resolved everywhere, endsAt now, gauge at 0.
	pass(30*time.Second + 5*time.Minute + time.Second)
	got = amAlerts(t, am.take())
	if len(got) != 1 || !got[0].EndsAt.Equal(clock.now) {
		t.Fatalf("resolve: alertmanager got %+v, want one alert ending now (%s)", got, clock.now)
	}
	if got := hookEvents(); strings.Join(got, ",") != "resolved warning" {
		t.Errorf("webhook events %v, want [resolved warning]", got)
	}
	if c := testutil.CollectAndCount(n.m.Active); c != 0 {
		t.Errorf("auditlens_findings_active has %d series after the finding resolved, want 0", c)
	}
	// And resolved once only.
	pass(10 * time.Minute)
	if b := append(am.take(), hook.take()...); len(b) != 0 {
		t.Errorf("sent %d posts after the finding resolved", len(b))
	}
}

func TestAlertmanagerPayloadGolden(t *testing.T) {
	n, err := NewNotifier(Config{UIURL: "https://auditlens.example.com", Repeat: time.Minute}, &fakeSource{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := loop(detect.Critical, t0)
	got, err := json.MarshalIndent(n.alertmanagerAlerts([]routed{{f: f, ev: New}, {f: f, ev: Escalated, prev: detect.Warning}, {f: f, ev: Resolved}}, t0), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "alertmanager.golden")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("payload differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

func TestAlertConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown key", "alerts:\n  routes:\n  - name: a\n    alertmanager: {url: http://am:9093}\n    severity: warning\n", `line 5: route: unknown key "severity"`},
		{"unknown top key", "reports: []\nalerts:\n  resolve: 5m\n", `line 3: alerts: unknown key "resolve"`},
		{"bad severity", "alerts:\n  routes:\n  - name: a\n    min_severity: loud\n    alertmanager: {url: http://am:9093}\n", "line 4: min_severity"},
		{"bad duration", "alerts:\n  repeat: often\n", `line 2: repeat "often"`},
		{"no target", "alerts:\n  routes:\n  - name: a\n", `line 3: route "a": want an alertmanager or a webhook`},
		{"bad url", "alerts:\n  routes:\n  - name: a\n    webhook:\n      url: hooks.example.com\n", "line 5: url: want an http:// or https:// URL"},
		{"bad format", "alerts:\n  routes:\n  - name: a\n    webhook: {url: http://h, format: xml}\n", `line 4: format "xml"`},
		{"twice", "alerts:\n  routes:\n  - name: a\n    webhook: {url: http://h}\n  - name: a\n    webhook: {url: http://h}\n", `line 5: route "a" is defined twice`},
		{"unknown detector", "alerts:\n  routes:\n  - name: a\n    detectors: [watch-loops]\n    webhook: {url: http://h}\n", `line 4: detectors: unknown detector "watch-loops"`},
		{"resolve before interval", "alerts:\n  interval: 1m\n  resolve_after: 30s\n", "line 2: resolve_after 30s is shorter than interval 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c, err := Parse([]byte("reports:\n- name: daily\n"))
	if err != nil || len(c.Routes) != 0 {
		t.Errorf("a file without alerts: %+v, %v; want no routes, no error", c, err)
	}
}

func TestAlertWebhookBodies(t *testing.T) {
	n, err := NewNotifier(Config{UIURL: "https://auditlens.example.com"}, &fakeSource{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := loop(detect.Critical, t0)
	f.Title = "loop on <services> & more"
	for _, tc := range []struct {
		name, format string
		ev           Event
		want         string
	}{
		{"json new", "json", New, `{"event":"new","status":"firing","at":"2026-12-01T12:00:00Z","url":"https://auditlens.example.com/findings/watch-loop-0123456789abcdef0123","finding":{"id":"watch-loop-0123456789abcdef0123","detector":"watch-loop","cluster":"prod","severity":"critical","title":"loop on \u003cservices\u003e \u0026 more","summary":"It restarted its watch 12 times.","remediation":"Restart kube-controller-manager.","first_seen":"2026-12-01T11:50:00Z","last_seen":"2026-12-01T12:00:00Z"}}`},
		{"json resolved", "json", Resolved, `"event":"resolved","status":"resolved"`},
		{"slack escalated", "slack", Escalated, `{"text":"*CRITICAL* watch-loop escalated to critical in prod: \u003chttps://auditlens.example.com/findings/watch-loop-0123456789abcdef0123|loop on \u0026lt;services\u0026gt; \u0026amp; more\u003e\nRemediation: Restart kube-controller-manager.\n"}`},
		{"slack resolved", "slack", Resolved, `watch-loop resolved in prod`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := n.webhookBody(Route{Format: tc.format}, routed{f: f, ev: tc.ev}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.want) {
				t.Errorf("body\n%s\nwant it to contain\n%s", b, tc.want)
			}
		})
	}
}

// TestAlertStateAcrossRestarts: a notifier started again over the same
// state file sends neither a new alert nor a webhook message for what the
// one before it sent, keeps Alertmanager's repeat on schedule, and sends
// the resolution of a finding that ended while it was down.
func TestAlertStateAcrossRestarts(t *testing.T) {
	am, hook := &recorder{}, &recorder{}
	amSrv, hookSrv := httptest.NewServer(am), httptest.NewServer(hook)
	defer amSrv.Close()
	defer hookSrv.Close()
	cfg, err := Parse([]byte(`
alerts:
  resolve_after: 5m
  repeat: 1m
  routes:
  - name: oncall
    alertmanager: {url: ` + amSrv.URL + `}
  - name: chat
    webhook: {url: ` + hookSrv.URL + `/hook, format: json}
`))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "alerts-sent.json")
	clock := &fakeClock{now: t0}
	src := &fakeSource{fs: []detect.Finding{loop(detect.Critical, t0)}}
	start := func() *Notifier {
		t.Helper()
		n, err := NewNotifier(cfg, src, Options{Clock: clock, StatePath: state})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	pass := func(n *Notifier, at time.Duration) (amPosts, hookPosts int) {
		t.Helper()
		clock.now = t0.Add(at)
		if _, err := n.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		return len(am.take()), len(hook.take())
	}

	if a, h := pass(start(), 0); a != 1 || h != 1 {
		t.Fatalf("first pass: %d alertmanager and %d webhook posts, want 1 and 1", a, h)
	}
	// Restarted 20 s later: nothing is new, no repeat is due.
	n := start()
	if a, h := pass(n, 20*time.Second); a != 0 || h != 0 {
		t.Errorf("after a restart: %d alertmanager and %d webhook posts, want none", a, h)
	}
	// The repeat comes a minute after the first send, not after the restart.
	if a, h := pass(n, 61*time.Second); a != 1 || h != 0 {
		t.Errorf("repeat after a restart: %d alertmanager and %d webhook posts, want 1 and 0", a, h)
	}
	// The finding ends while serve is down; the next start resolves it.
	src.fs = nil
	if a, h := pass(start(), 10*time.Minute); a != 1 || h != 1 {
		t.Errorf("resolution after a restart: %d alertmanager and %d webhook posts, want 1 and 1", a, h)
	}
	if a, h := pass(start(), 11*time.Minute); a != 0 || h != 0 {
		t.Errorf("resolved twice: %d alertmanager and %d webhook posts", a, h)
	}

	// A state file that cannot be read costs duplicates, not alerts.
	if err := os.WriteFile(state, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	src.fs = []detect.Finding{loop(detect.Critical, t0.Add(12*time.Minute))}
	if a, h := pass(start(), 12*time.Minute); a != 1 || h != 1 {
		t.Errorf("over a broken state file: %d alertmanager and %d webhook posts, want 1 and 1", a, h)
	}
}
