package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestReceiverRoutes: the webhook and the OTLP logs receiver are mounted on
// their paths (POST only), and the OTLP paths with a cluster and an
// apiserver do not shadow each other.
func TestReceiverRoutes(t *testing.T) {
	var got string
	mark := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = name + " " + r.URL.Path })
	}
	h := NewRouter(Config{Webhook: mark("webhook"), OTLPLogs: mark("otlp")})
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/audit/prod", "webhook /audit/prod"},
		{"POST", "/v1/logs", "otlp /v1/logs"},
		{"POST", "/otlp/prod/v1/logs", "otlp /otlp/prod/v1/logs"},
		{"POST", "/otlp/prod/master-1/v1/logs", "otlp /otlp/prod/master-1/v1/logs"},
		{"GET", "/v1/logs", ""},
		{"POST", "/otlp/prod/v1/traces", ""},
	} {
		got = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if got != tc.want {
			t.Errorf("%s %s reached %q (status %d), want %q", tc.method, tc.path, got, rec.Code, tc.want)
		}
	}
}
