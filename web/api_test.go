package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// The aggregate endpoints over the real embedded engine: the handlers'
// parameters and defaults (the SQL is tested in package query).
func TestAggregateAPI(t *testing.T) {
	st := storetest.Open(t)
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	var rows []store.Row
	for i, verb := range []string{"get", "get", "list", "delete", "create"} {
		rows = append(rows, store.Row{Cluster: "web", AuditID: "a" + string(rune('0'+i)), Stage: "ResponseComplete", Level: "Metadata",
			Verb: verb, Time: now.Add(-time.Duration(10-i) * time.Minute), User: "alice", Resource: "endpoints", Namespace: "ns", Name: "front",
			Code: 200, Raw: []byte(`{}`)})
	}
	if err := st.Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	h := NewRouter(Config{Store: st, Now: func() time.Time { return now }})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}

	code, body := get("/api/v1/histogram?cluster=web&buckets=6")
	var hist struct {
		Since, Until string
		StepMS       int64 `json:"step_ms"`
		Series       []struct {
			Key   string
			Total int
		}
		Buckets []struct{ Counts []int }
		Total   int
	}
	if code != 200 || json.Unmarshal([]byte(body), &hist) != nil {
		t.Fatalf("histogram: %d %s", code, body)
	}
	// The default window is the hour before now, in 10-minute steps.
	if hist.Since != "2026-03-02T11:00:00Z" || hist.Until != "2026-03-02T12:00:00Z" || hist.StepMS != 600000 || len(hist.Buckets) != 6 || hist.Total != 5 {
		t.Errorf("histogram %s", body)
	}
	if len(hist.Series) != 4 || hist.Series[0].Key != "get" || hist.Series[0].Total != 2 {
		t.Errorf("series %+v", hist.Series)
	}

	code, body = get("/api/v1/values?field=verb&cluster=web&limit=2")
	if want := `[{"value":"get","count":2},{"value":"create","count":1}]`; code != 200 || body != want {
		t.Errorf("values: %d %s, want %s", code, body, want)
	}
	code, body = get("/api/v1/objects/history?cluster=web&resource=endpoints&namespace=ns&name=front")
	if code != 200 || strings.Count(body, `"audit_id"`) != 5 || !strings.Contains(body, `"watches":[]`) {
		t.Errorf("history: %d %s", code, body)
	}

	for _, path := range []string{
		"/api/v1/histogram?by=raw",
		"/api/v1/histogram?buckets=x",
		"/api/v1/histogram?since=nonsense",
		"/api/v1/values?field=raw",
		"/api/v1/objects/history?resource=endpoints",
		"/api/v1/objects/history?resource=endpoints&name=x&limit=0x",
	} {
		if code, body := get(path); code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want 400 with an error", path, code, body)
		}
	}
}

// /readyz says why serve is not ready; /healthz (liveness) stays up.
func TestReadyz(t *testing.T) {
	var notReady error
	h := NewRouter(Config{Ready: func() error { return notReady }})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("ready: %d %q", code, body)
	}
	notReady = errors.New("spool failing for 3s (7 failures): writing to spool: no space left on device")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "no space left on device") {
		t.Errorf("spool refusing: %d %q", code, body)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("liveness while not ready: %d %q", code, body)
	}
}

// Every UI page is the shell, with a policy that forbids inline scripts;
// the assets are served from the embedded tree.
func TestUIRoutes(t *testing.T) {
	h := NewRouter(Config{Info: "apiVersion: v1\n"})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	for _, path := range []string{"/", "/findings/watch-loop-abc", "/objects?resource=pods&name=x", "/jq", "/reports"} {
		rec := get(path)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `src="/ui/app.js"`) {
			t.Errorf("%s: %d %.200s", path, rec.Code, rec.Body.String())
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
			!strings.Contains(csp, "frame-ancestors 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if xfo := rec.Header().Get("X-Frame-Options"); xfo != "SAMEORIGIN" {
			t.Errorf("%s: X-Frame-Options %q: other sites may frame the UI", path, xfo)
		}
	}
	if rec := get("/ui/app.js"); rec.Code != 200 || !strings.Contains(rec.Header().Get("Content-Type"), "javascript") {
		t.Errorf("/ui/app.js: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec := get("/ui/nope.js"); rec.Code != 404 {
		t.Errorf("/ui/nope.js: %d", rec.Code)
	}
	if rec := get("/api/v1/info"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"webhook_kubeconfig":"apiVersion: v1\n"`) {
		t.Errorf("/api/v1/info: %d %s", rec.Code, rec.Body.String())
	}
}
