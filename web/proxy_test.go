package web

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect"
)

// TestAuthProxy: the user and groups headers count only on connections
// from the proxy's addresses; a group maps to clusters, "*" to every
// cluster, no mapped group to 403; from anywhere else the headers are
// ignored and the request needs its own credentials.
func TestAuthProxy(t *testing.T) {
	findings := &fakeFindings{byID: map[string]detect.Finding{
		"f-alpha": {ID: "f-alpha", Detector: "watch-loop", Cluster: "alpha"},
		"f-beta":  {ID: "f-beta", Detector: "watch-loop", Cluster: "beta"},
	}}
	h := NewRouter(Config{Findings: findings, APITokens: []auth.APIToken{{Token: "tok"}},
		Proxy: &auth.Proxy{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.1.0.0/16")},
			Groups: map[string][]string{"sre": {"alpha"}, "admins": {}}}})
	do := func(remote, path string, hdr ...string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		name   string
		remote string
		hdr    []string
		code   int
		body   string
	}{
		{"the proxy's sre user reads alpha", "127.0.0.1:40000", []string{"X-Forwarded-User", "ann", "X-Forwarded-Groups", "dev, sre"}, 200, "f-alpha"},
		{"the proxy's sre user, beta", "127.0.0.1:40000", []string{"X-Forwarded-User", "ann", "X-Forwarded-Groups", "sre"}, 404, "not found"},
		{"groups repeated as headers", "10.1.2.3:40000", []string{"X-Forwarded-User", "ann", "X-Forwarded-Groups", "dev", "X-Forwarded-Groups", "admins"}, 200, "f-beta"},
		{"no mapped group: 403", "127.0.0.1:40000", []string{"X-Forwarded-User", "bob", "X-Forwarded-Groups", "dev"}, 403, "bob may read no cluster"},
		{"headers from elsewhere are ignored", "192.0.2.7:40000", []string{"X-Forwarded-User", "mallory", "X-Forwarded-Groups", "admins"}, 401, ""},
		{"a forwarded-for header does not make the proxy", "192.0.2.7:40000", []string{"X-Forwarded-For", "127.0.0.1", "X-Forwarded-User", "mallory", "X-Forwarded-Groups", "admins"}, 401, ""},
		{"the proxy without a user: the request's own token", "127.0.0.1:40000", []string{"Authorization", "Bearer tok"}, 200, "f-beta"},
		{"the proxy without a user or token", "127.0.0.1:40000", nil, 401, ""},
		{"IPv4-mapped IPv6 from the proxy", "[::ffff:127.0.0.1]:40000", []string{"X-Forwarded-User", "ann", "X-Forwarded-Groups", "sre"}, 200, "f-alpha"},
	} {
		path := "/api/v1/findings/f-alpha"
		if strings.Contains(tc.body, "beta") || strings.Contains(tc.name, "beta") {
			path = "/api/v1/findings/f-beta"
		}
		code, body := do(tc.remote, path, tc.hdr...)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: GET %s: %d %s; want %d with %q", tc.name, path, code, body, tc.code, tc.body)
		}
	}
}
