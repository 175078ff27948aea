package web

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/auth"
)

// TestSignInLimit: after ten refused token sign-ins within a minute an
// address gets 429, even with the right token, until the minute since its
// first refusal has passed; other addresses (and other IPv6 /64s) are not
// affected, and a forwarded-for header does not make another address.
func TestSignInLimit(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := NewRouter(Config{APITokens: []auth.APIToken{{Token: "right-token"}}, Now: func() time.Time { return now }})
	signIn := func(remote, token string, hdr ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/api/v1/session", strings.NewReader(`{"token":"`+token+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const attacker = "198.51.100.7:5000"
	for i := range maxSignInFailures {
		if rec := signIn(attacker, "guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("refusal %d: %d, want 401", i+1, rec.Code)
		}
		now = now.Add(time.Second)
	}
	for _, tc := range []struct {
		name, remote, token string
		hdr                 []string
		code                int
	}{
		{"one more guess", attacker, "guess", nil, http.StatusTooManyRequests},
		{"the right token, still limited", attacker, "right-token", nil, http.StatusTooManyRequests},
		{"another port of the same address", "198.51.100.7:6000", "right-token", nil, http.StatusTooManyRequests},
		{"a forwarded-for header", attacker, "right-token", []string{"X-Forwarded-For", "203.0.113.9"}, http.StatusTooManyRequests},
		{"another address", "198.51.100.8:5000", "right-token", nil, http.StatusOK},
	} {
		rec := signIn(tc.remote, tc.token, tc.hdr...)
		if rec.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.code)
		}
		if tc.code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", tc.name)
		}
	}
	// IPv6: the /64 is one client.
	for range maxSignInFailures {
		signIn("[2001:db8:1:2::10]:5000", "guess")
	}
	if rec := signIn("[2001:db8:1:2::99]:5000", "right-token"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64: %d, want 429", rec.Code)
	}
	if rec := signIn("[2001:db8:1:3::10]:5000", "right-token"); rec.Code != http.StatusOK {
		t.Errorf("another /64: %d, want 200", rec.Code)
	}
	// A minute after the first refusal the address may try again.
	now = now.Add(signInWindow)
	if rec := signIn(attacker, "right-token"); rec.Code != http.StatusOK {
		t.Errorf("after the window: %d %s, want 200", rec.Code, rec.Body)
	}
}

func TestFailureLimiterBounded(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l := newFailureLimiter(func() time.Time { return now })
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	for i := range maxLimited + 50 {
		req.RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1"
		l.fail(req)
		now = now.Add(time.Microsecond)
	}
	if n := len(l.by); n > maxLimited {
		t.Errorf("%d addresses remembered, want at most %d", n, maxLimited)
	}
}
