package web

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/testkit/oidctest"
	"github.com/auditlens/auditlens/internal/testkit/proctest"
)

// TestOIDCSignIn drives serve's OIDC endpoints against a real provider
// (zitadel/oidc's, pinned): the state cookie, the callback's checks, the
// group mapping, the session it leaves and what that session may read.
func TestOIDCSignIn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an OIDC provider")
	}
	// The router is served on a fixed address so that its callback URL can
	// be registered with the provider before either starts.
	addr := proctest.FreeAddr(t)
	callback := "http://" + addr + "/auth/oidc/callback"
	p := oidctest.Start(t, callback, map[string]oidctest.User{
		"u1": {Username: "alice", Password: "alice-pw", Email: "alice@example.com", Groups: []string{"dev", "sre"}},
		"u2": {Username: "bob", Password: "bob-pw", Email: "<b>bob</b>@example.com", Groups: []string{"dev"}},
		"u3": {Username: "root", Password: "root-pw", Email: "root@example.com", Groups: []string{"admins"}},
	})
	c, err := auth.NewOIDCClient(auth.OIDCConfig{Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: callback})
	if err != nil {
		t.Fatal(err)
	}
	findings := &fakeFindings{byID: map[string]detect.Finding{
		"f-alpha": {ID: "f-alpha", Detector: "watch-loop", Cluster: "alpha"},
		"f-beta":  {ID: "f-beta", Detector: "watch-loop", Cluster: "beta"},
	}}
	h := NewRouter(Config{Findings: findings, SecureCookies: true, OIDC: &OIDC{
		Provider: c, Name: "Example SSO",
		Groups: map[string][]string{"sre": {"alpha"}, "admins": {}},
	}})
	srv := httptest.NewUnstartedServer(h)
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	base := srv.URL

	noFollow := func(jar http.CookieJar) *http.Client {
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	get := func(c *http.Client, u string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	cookieOf := func(resp *http.Response, name string) *http.Cookie {
		for _, ck := range resp.Cookies() {
			if ck.Name == name {
				return ck
			}
		}
		return nil
	}
	// start begins a sign-in in a fresh browser and returns it with the
	// provider's page to go to.
	start := func(t *testing.T, ret string) (*http.Client, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		b := noFollow(jar)
		resp, _ := get(b, base+"/auth/oidc/login?return="+url.QueryEscape(ret))
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), p.Issuer) {
			t.Fatalf("login: %s, Location %q; want 303 to the provider", resp.Status, resp.Header.Get("Location"))
		}
		st := cookieOf(resp, oidcStateCookie)
		if st == nil || !st.HttpOnly || !st.Secure || st.SameSite != http.SameSiteLaxMode || st.Path != oidcStatePath {
			t.Fatalf("state cookie %+v: want HttpOnly, Secure, SameSite=Lax, Path=%s", st, oidcStatePath)
		}
		// The cookie jar keeps Secure cookies for https only; the test
		// server is http, so hand it over as a browser on localhost would.
		jar.SetCookies(mustURL(base+oidcStatePath), []*http.Cookie{{Name: st.Name, Value: st.Value, Path: st.Path}})
		return b, resp.Header.Get("Location")
	}
	back := func(t *testing.T, authURL, user, pw string) string {
		t.Helper()
		u, err := oidctest.SignIn(authURL, callback, user, pw)
		if err != nil {
			t.Fatal(err)
		}
		return u.String()
	}
	sessionOf := func(t *testing.T, resp *http.Response) *http.Cookie {
		t.Helper()
		ck := cookieOf(resp, sessionCookie)
		if ck == nil || ck.Value == "" || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode {
			t.Fatalf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict", ck)
		}
		return ck
	}
	withSession := func(ck *http.Cookie, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}

	t.Run("sign in, read the mapped cluster only", func(t *testing.T) {
		b, authURL := start(t, "/findings/f-alpha?x=1")
		resp, body := get(b, back(t, authURL, "alice", "alice-pw"))
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/findings/f-alpha?x=1" {
			t.Fatalf("callback: %s Location %q %s; want 303 to the page that asked", resp.Status, resp.Header.Get("Location"), body)
		}
		ck := sessionOf(t, resp)
		if code, body := withSession(ck, "/api/v1/findings/f-alpha"); code != 200 || !strings.Contains(body, "f-alpha") {
			t.Errorf("alpha's finding: %d %s", code, body)
		}
		if code, body := withSession(ck, "/api/v1/findings/f-beta"); code != 404 {
			t.Errorf("beta's finding for a member of sre (alpha only): %d %s; want 404", code, body)
		}
		_, body = withSession(ck, "/api/v1/session")
		var st sessionState
		if err := json.Unmarshal([]byte(body), &st); err != nil || !st.SignedIn || st.Via != "cookie" || st.User != "alice@example.com" {
			t.Errorf("session: %s (%v); want signed in as alice@example.com by cookie", body, err)
		}
	})
	t.Run("a group mapped to every cluster", func(t *testing.T) {
		b, authURL := start(t, "/")
		resp, _ := get(b, back(t, authURL, "root", "root-pw"))
		ck := sessionOf(t, resp)
		if code, body := withSession(ck, "/api/v1/findings/f-beta"); code != 200 {
			t.Errorf("beta's finding for admins: %d %s", code, body)
		}
	})
	t.Run("no mapped group: 403, no session", func(t *testing.T) {
		b, authURL := start(t, "/")
		resp, body := get(b, back(t, authURL, "bob", "bob-pw"))
		if resp.StatusCode != http.StatusForbidden || cookieOf(resp, sessionCookie) != nil {
			t.Fatalf("callback for bob: %s with cookies %v", resp.Status, resp.Cookies())
		}
		if !strings.Contains(body, "None of your groups (dev)") || !strings.Contains(body, "&lt;b&gt;bob&lt;/b&gt;@example.com") || strings.Contains(body, "<b>bob") {
			t.Errorf("403 page: want the groups and the user as escaped text:\n%s", body)
		}
	})
	t.Run("a callback without its state cookie", func(t *testing.T) {
		_, authURL := start(t, "/")
		cb := back(t, authURL, "alice", "alice-pw")
		jar, _ := cookiejar.New(nil)
		resp, body := get(noFollow(jar), cb) // another browser: a forged link
		if resp.StatusCode != http.StatusBadRequest || cookieOf(resp, sessionCookie) != nil || !strings.Contains(body, "not started from this browser") {
			t.Errorf("forged callback: %s %v %s", resp.Status, resp.Cookies(), body)
		}
	})
	t.Run("a callback with another flow's state", func(t *testing.T) {
		b, _ := start(t, "/")
		_, authURL := start(t, "/")
		resp, _ := get(b, back(t, authURL, "alice", "alice-pw"))
		if resp.StatusCode != http.StatusBadRequest || cookieOf(resp, sessionCookie) != nil {
			t.Errorf("callback with another browser's state: %s %v", resp.Status, resp.Cookies())
		}
	})
	t.Run("a state is good once", func(t *testing.T) {
		b, authURL := start(t, "/")
		cb := back(t, authURL, "alice", "alice-pw")
		st := b.Jar.Cookies(mustURL(base + oidcStatePath))
		if resp, _ := get(b, cb); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("first callback: %s", resp.Status)
		}
		b.Jar.SetCookies(mustURL(base+oidcStatePath), st)
		if resp, _ := get(b, cb); resp.StatusCode != http.StatusBadRequest || cookieOf(resp, sessionCookie) != nil {
			t.Errorf("replayed callback: %s %v", resp.Status, resp.Cookies())
		}
	})
	t.Run("the provider's error", func(t *testing.T) {
		b, authURL := start(t, "/")
		u := mustURL(authURL)
		cb := callback + "?state=" + url.QueryEscape(u.Query().Get("state")) + "&error=access_denied&error_description=" + url.QueryEscape("<i>denied</i>")
		resp, body := get(b, cb)
		if resp.StatusCode != http.StatusUnauthorized || cookieOf(resp, sessionCookie) != nil || !strings.Contains(body, "access_denied") || strings.Contains(body, "<i>") {
			t.Errorf("error callback: %s %v %s", resp.Status, resp.Cookies(), body)
		}
	})
	t.Run("the return path stays on this server", func(t *testing.T) {
		for _, ret := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example", "jq"} {
			b, authURL := start(t, ret)
			resp, _ := get(b, back(t, authURL, "alice", "alice-pw"))
			if loc := resp.Header.Get("Location"); loc != "/" {
				t.Errorf("return=%q: Location %q, want /", ret, loc)
			}
		}
	})
	t.Run("token sign-in is not offered", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/session", strings.NewReader(`{"token":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token sign-in with OIDC only: %s", resp.Status)
		}
		_, body := get(http.DefaultClient, base+"/api/v1/session")
		var st sessionState
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Auth != "token" || strings.Join(st.Methods, ",") != "oidc" || st.Provider != "Example SSO" {
			t.Errorf("session state %s: want methods [oidc] and the provider's name", body)
		}
	})
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/jq?x=1": "/jq?x=1", "//evil": "/", "/\\evil": "/", "http://evil/": "/", "jq": "/", "/a\r\nSet-Cookie: x": "/", "/\t/evil": "/", "/%": "/", "/a\\b": "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLocalPath: whatever a return parameter holds, the redirect after
// sign-in stays on this server.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/", "/jq?x=1", "//evil", "/\\evil", "https://evil/", "/%2f%2fevil", "\t//evil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := localPath(in)
		u, err := url.Parse(out)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(out, "/") || strings.HasPrefix(out, "//") || strings.ContainsAny(out, "\\\t\r\n") {
			t.Errorf("localPath(%q) = %q leaves the server", in, out)
		}
	})
}
