package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect"
)

// fakeFindings records the filter of each List and answers from a map.
type fakeFindings struct {
	last detect.ListFilter
	byID map[string]detect.Finding
	err  error
}

func (f *fakeFindings) List(_ context.Context, lf detect.ListFilter) ([]detect.Finding, error) {
	f.last = lf
	if f.err != nil {
		return nil, f.err
	}
	var out []detect.Finding
	for _, x := range f.byID {
		out = append(out, x)
	}
	return out, nil
}

func (f *fakeFindings) Get(_ context.Context, id string) (detect.Finding, error) {
	if f.err != nil {
		return detect.Finding{}, f.err
	}
	x, ok := f.byID[id]
	if !ok {
		return detect.Finding{}, fmt.Errorf("%w: %q", detect.ErrNotFound, id)
	}
	return x, nil
}

func TestFindingsAPI(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	src := &fakeFindings{byID: map[string]detect.Finding{"watch-loop-1": {ID: "watch-loop-1", Detector: "watch-loop", Severity: detect.Critical}}}
	h := NewRouter(Config{Findings: src, Now: func() time.Time { return now }, APITokens: []auth.APIToken{{Token: "secret"}}})
	do := func(path string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer secret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		path   string
		code   int
		filter detect.ListFilter
		body   string
	}{
		{"/api/v1/findings", 200, detect.ListFilter{}, `[{"id":"watch-loop-1"`},
		{"/api/v1/findings?since=2h&until=2026-03-02T11:30:00Z&detector=watch-loop,watch-rv-regression&cluster=prod&cluster=staging&severity=warning&limit=5", 200,
			detect.ListFilter{Since: now.Add(-2 * time.Hour), Until: time.Date(2026, 3, 2, 11, 30, 0, 0, time.UTC),
				Detectors: []string{"watch-loop", "watch-rv-regression"}, Clusters: []string{"prod", "staging"}, MinSeverity: detect.Warning, Limit: 5}, ""},
		{"/api/v1/findings?object=endpoints/default/cart&object=nodes//node-1&object=pods/ns/a/b", 200,
			detect.ListFilter{Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"}, {Resource: "nodes", Name: "node-1"},
				{Resource: "pods", Namespace: "ns", Name: "a/b"}}}, ""},
		{"/api/v1/findings?object=endpoints/cart", 400, detect.ListFilter{}, "RESOURCE/NAMESPACE/NAME"},
		{"/api/v1/findings?object=endpoints/default/", 400, detect.ListFilter{}, "RESOURCE/NAMESPACE/NAME"},
		{"/api/v1/findings?object=/default/cart", 400, detect.ListFilter{}, "RESOURCE/NAMESPACE/NAME"},
		{"/api/v1/findings?since=later", 400, detect.ListFilter{}, "since"},
		{"/api/v1/findings?since=1h&until=2h", 400, detect.ListFilter{}, "before"},
		{"/api/v1/findings?severity=fatal", 400, detect.ListFilter{}, "severity"},
		{"/api/v1/findings?limit=0", 400, detect.ListFilter{}, "limit"},
		{"/api/v1/findings/watch-loop-1", 200, detect.ListFilter{}, `{"id":"watch-loop-1"`},
		{"/api/v1/findings/nope", 404, detect.ListFilter{}, "not found"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			src.last = detect.ListFilter{}
			code, body := do(tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%d %s, want %d with %q", code, body, tc.code, tc.body)
			}
			if code == 200 && strings.HasPrefix(body, "[") && !reflect.DeepEqual(src.last, tc.filter) {
				t.Errorf("filter %+v, want %+v", src.last, tc.filter)
			}
			if code != 200 {
				var e apiError
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
					t.Errorf("error body %q is not {\"error\": …}", body)
				}
			}
		})
	}
	t.Run("empty list is an array", func(t *testing.T) {
		empty := NewRouter(Config{Findings: &fakeFindings{}})
		rec := httptest.NewRecorder()
		empty.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/findings", nil))
		if rec.Code != 200 || rec.Body.String() != "[]" {
			t.Errorf("%d %q", rec.Code, rec.Body.String())
		}
	})
	t.Run("store errors", func(t *testing.T) {
		for err, want := range map[error]int{errors.New("engine gone"): 500, context.DeadlineExceeded: 503} {
			failing := NewRouter(Config{Findings: &fakeFindings{err: err}})
			rec := httptest.NewRecorder()
			failing.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/findings", nil))
			if rec.Code != want {
				t.Errorf("%v: %d, want %d", err, rec.Code, want)
			}
		}
	})
	t.Run("token required", func(t *testing.T) {
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer secre", "Bearer secret2", "Bearer Secret", "Basic secret", "secret"} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/api/v1/findings", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("Authorization %q: %d, want 401", auth, rec.Code)
			}
		}
	})
}
