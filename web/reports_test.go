package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/report"
)

// fakeReports records the filter of each List and answers from a map.
type fakeReports struct {
	last report.ListFilter
	byID map[string]report.Report
	err  error
}

func (f *fakeReports) List(_ context.Context, lf report.ListFilter) ([]report.Summary, error) {
	f.last = lf
	if f.err != nil {
		return nil, f.err
	}
	var out []report.Summary
	for _, r := range f.byID {
		out = append(out, report.Summary{ID: r.ID, Name: r.Name, WindowStart: r.WindowStart, WindowEnd: r.WindowEnd})
	}
	return out, nil
}

func (f *fakeReports) Get(_ context.Context, id string) (report.Report, error) {
	if f.err != nil {
		return report.Report{}, f.err
	}
	r, ok := f.byID[id]
	if !ok {
		return report.Report{}, fmt.Errorf("%w: %q", report.ErrNotFound, id)
	}
	return r, nil
}

func TestReportsAPI(t *testing.T) {
	end := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	r := report.Report{ID: "report-1", Name: "daily<b>", WindowStart: end.Add(-24 * time.Hour), WindowEnd: end}
	src := &fakeReports{byID: map[string]report.Report{"report-1": r}}
	h := NewRouter(Config{Reports: src, APITokens: []auth.APIToken{{Token: "secret"}}})
	do := func(path string, token bool) (int, string, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token {
			req.Header.Set("Authorization", "Bearer secret")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
	}
	for _, tc := range []struct {
		path   string
		code   int
		ctype  string
		body   string
		filter report.ListFilter
	}{
		{"/api/v1/reports", 200, "application/json", `[{"id":"report-1","name":"daily\u003cb\u003e","window_start":"2026-03-01T12:00:00Z"`, report.ListFilter{}},
		{"/api/v1/reports?name=daily&limit=5", 200, "application/json", `"id":"report-1"`, report.ListFilter{Name: "daily", Limit: 5}},
		{"/api/v1/reports?limit=0", 400, "application/json", "limit", report.ListFilter{}},
		{"/api/v1/reports/report-1", 200, "application/json", `"id": "report-1"`, report.ListFilter{}},
		{"/api/v1/reports/report-1?format=md", 200, "text/markdown", "# Report daily&lt;b&gt;", report.ListFilter{}},
		{"/api/v1/reports/report-1?format=html", 200, "text/html", "<h1>Report daily&lt;b&gt;</h1>", report.ListFilter{}},
		{"/api/v1/reports/report-1?format=pdf", 400, "application/json", "format", report.ListFilter{}},
		{"/api/v1/reports/nope", 404, "application/json", "not found", report.ListFilter{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			src.last = report.ListFilter{}
			code, ctype, body := do(tc.path, true)
			if code != tc.code || !strings.HasPrefix(ctype, tc.ctype) || !strings.Contains(body, tc.body) {
				t.Fatalf("%d %s %s, want %d %s with %q", code, ctype, body, tc.code, tc.ctype, tc.body)
			}
			if !reflect.DeepEqual(src.last, tc.filter) {
				t.Errorf("filter %+v, want %+v", src.last, tc.filter)
			}
		})
	}
	if code, _, _ := do("/api/v1/reports", false); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}

	src.err = context.DeadlineExceeded
	if code, _, body := do("/api/v1/reports", true); code != http.StatusServiceUnavailable || !strings.Contains(body, "--query-timeout") {
		t.Errorf("timed out list: %d %s", code, body)
	}
	src.err = errors.New("engine down")
	if code, _, _ := do("/api/v1/reports/report-1", true); code != http.StatusInternalServerError {
		t.Errorf("failed get: %d", code)
	}
	// Without a source the routes do not exist.
	rec := httptest.NewRecorder()
	NewRouter(Config{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/reports", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("reports without a source: %d, want 404", rec.Code)
	}
}
