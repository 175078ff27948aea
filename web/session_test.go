package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/report"
)

func TestSessions(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := NewRouter(Config{Reports: &fakeReports{byID: map[string]report.Report{}}, APITokens: []auth.APIToken{{Token: "tok-a"}, {Token: "tok-b"}},
		Now: clock, SessionTTL: time.Hour})

	do := func(method, path, body string, hdr map[string]string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	state := func(rec *httptest.ResponseRecorder) sessionState {
		t.Helper()
		var st sessionState
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		return st
	}

	if st := state(do("GET", "/api/v1/session", "", nil)); !reflect.DeepEqual(st, sessionState{Auth: "token", Methods: []string{"token"}}) {
		t.Errorf("GET /api/v1/session without credentials: %+v", st)
	}
	if st := state(do("GET", "/api/v1/session", "", map[string]string{"Authorization": "Bearer tok-b"})); !reflect.DeepEqual(st, sessionState{Auth: "token", SignedIn: true, Via: "bearer", Methods: []string{"token"}}) {
		t.Errorf("GET /api/v1/session with a bearer token: %+v", st)
	}

	// Refused sign-ins set no cookie.
	for _, tc := range []struct {
		name string
		body string
		hdr  map[string]string
		code int
	}{
		{"a form post (what a cross-site page can send)", "token=tok-a", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"text/plain", `{"token":"tok-a"}`, map[string]string{"Content-Type": "text/plain"}, 415},
		{"another site's origin", `{"token":"tok-a"}`, map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, 403},
		{"a wrong token", `{"token":"tok-c"}`, jsonHdr, 401},
		{"a prefix of a token", `{"token":"tok-"}`, jsonHdr, 401},
		{"no token", `{}`, jsonHdr, 401},
		{"not JSON", `tok-a`, jsonHdr, 400},
	} {
		rec := do("POST", "/api/v1/session", tc.body, tc.hdr)
		if rec.Code != tc.code || len(rec.Result().Cookies()) != 0 {
			t.Errorf("%s: %d, cookies %v; want %d and none", tc.name, rec.Code, rec.Result().Cookies(), tc.code)
		}
	}

	rec := do("POST", "/api/v1/session", `{"token":"tok-a"}`, map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": "http://example.com"})
	if rec.Code != 200 {
		t.Fatalf("sign-in with a good token from our own origin: %d %s", rec.Code, rec.Body)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("sign-in set %d cookies", len(cookies))
	}
	ck := cookies[0]
	if ck.Name != sessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge != 3600 || len(ck.Value) < 40 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, Max-Age 3600 and a long random value", ck)
	}
	if strings.Contains(ck.Value, "tok-a") {
		t.Error("the cookie carries the token")
	}

	if rec := do("GET", "/api/v1/reports", "", nil); rec.Code != 401 {
		t.Errorf("reports without the cookie: %d", rec.Code)
	}
	if rec := do("GET", "/api/v1/reports", "", nil, ck); rec.Code != 200 {
		t.Errorf("reports with the cookie: %d %s", rec.Code, rec.Body)
	}
	if rec := do("GET", "/api/v1/reports", "", nil, &http.Cookie{Name: sessionCookie, Value: ck.Value + "x"}); rec.Code != 401 {
		t.Errorf("reports with a forged cookie: %d", rec.Code)
	}
	if st := state(do("GET", "/api/v1/session", "", nil, ck)); !reflect.DeepEqual(st, sessionState{Auth: "token", SignedIn: true, Via: "cookie", Methods: []string{"token"}}) {
		t.Errorf("GET /api/v1/session with the cookie: %+v", st)
	}

	// Signing out ends the session on the server, not only in the browser.
	rec = do("DELETE", "/api/v1/session", "", nil, ck)
	if rec.Code != 200 || len(rec.Result().Cookies()) != 1 || rec.Result().Cookies()[0].MaxAge >= 0 {
		t.Errorf("sign-out: %d, cookies %v; want the cookie cleared", rec.Code, rec.Result().Cookies())
	}
	if rec := do("GET", "/api/v1/reports", "", nil, ck); rec.Code != 401 {
		t.Errorf("reports with the cookie after sign-out: %d", rec.Code)
	}

	// A session ends after its TTL.
	rec = do("POST", "/api/v1/session", `{"token":"tok-b"}`, jsonHdr)
	ck = rec.Result().Cookies()[0]
	now = now.Add(59 * time.Minute)
	if rec := do("GET", "/api/v1/reports", "", nil, ck); rec.Code != 200 {
		t.Errorf("after 59 minutes: %d", rec.Code)
	}
	now = now.Add(time.Minute)
	if rec := do("GET", "/api/v1/reports", "", nil, ck); rec.Code != 401 {
		t.Errorf("after the TTL: %d", rec.Code)
	}
}

func TestSessionsOpenAPI(t *testing.T) {
	h := NewRouter(Config{Reports: &fakeReports{byID: map[string]report.Report{}}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/session", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"auth":"none"`) {
		t.Errorf("GET /api/v1/session on an open API: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/reports", nil))
	if rec.Code != 200 {
		t.Errorf("reports on an open API: %d", rec.Code)
	}
}
