package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/auditlens/auditlens/internal/testkit/oidctest"
	"github.com/auditlens/auditlens/internal/testkit/proctest"
)

// auditLogAt writes an audit log of n events of cluster-less pods reads
// by user, ending a few minutes before now (inside the timeline's default
// hour).
func auditLogAt(t *testing.T, dir, name, user string, n int) string {
	t.Helper()
	var b strings.Builder
	at := time.Now().UTC().Add(-5 * time.Minute)
	for i := range n {
		ts := at.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano)
		fmt.Fprintf(&b, `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"%s-%d","stage":"ResponseComplete",`+
			`"requestURI":"/api/v1/namespaces/default/pods","verb":"list","user":{"username":%q},"sourceIPs":["10.0.0.1"],"userAgent":"kubectl/v1.37.2",`+
			`"objectRef":{"resource":"pods","namespace":"default","apiVersion":"v1"},"responseStatus":{"code":200},`+
			`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n", name, i, user, ts, ts)
	}
	p := filepath.Join(dir, name+".log")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUIOIDCSignIn signs in through a real OpenID Connect provider in
// Chromium, over HTTPS: the sign-in page offers the provider, the
// provider's own login page takes the password, the browser comes back
// signed in with an HttpOnly, Secure, SameSite=Strict cookie, sees the
// cluster its group maps to and not the other (which a user of every
// cluster does see), and signs out. A user in no mapped group lands on
// the 403 page.
func TestUIOIDCSignIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine, an OIDC provider and a browser")
	}
	chromiumPath(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	storeURL := "chdb://" + filepath.Join(data, "clickhouse")
	for _, c := range [][2]string{{"alpha", "alpha-reader"}, {"beta", "beta-secret-user"}} {
		log := auditLogAt(t, dir, c[0], c[1], 20)
		if stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", c[0], "--progress", "never", "--no-detect", log); code != 0 {
			t.Fatalf("import %s: exit %d\n%s\n%s", c[0], code, stdout, stderr)
		}
	}
	addr := proctest.FreeAddr(t)
	base := "https://" + addr
	p := oidctest.Start(t, base+"/auth/oidc/callback", map[string]oidctest.User{
		"u1": {Username: "alice", Password: "alice-pw", Email: "alice@example.com", Groups: []string{"team-alpha"}},
		"u2": {Username: "root", Password: "root-pw", Email: "root@example.com", Groups: []string{"admins"}},
		"u3": {Username: "mallory", Password: "mallory-pw", Email: "mallory@example.com", Groups: []string{"contractors"}},
	})
	ca := newCA(t, "auditlens test CA")
	cert, key := ca.issue(t, "127.0.0.1", true)
	secretFile := write(t, dir, "oidc-secret", []byte(p.ClientSecret+"\n"))
	startServe(t, "--data", data, "--detect=false", "--listen", addr,
		"--tls-cert", write(t, dir, "tls.crt", cert), "--tls-key", write(t, dir, "tls.key", key),
		"--oidc-issuer", p.Issuer, "--oidc-client-id", p.ClientID, "--oidc-client-secret-file", secretFile,
		"--oidc-redirect-url", base+"/auth/oidc/callback", "--oidc-provider-name", "Example SSO",
		"--oidc-group", "team-alpha=alpha", "--oidc-group", "admins=*")

	// The test CA is not the system's: Chromium is told to accept the
	// certificate, which leaves the page an https origin (Secure cookies).
	b := newBrowser(t, 1280, 900, chromedp.Flag("ignore-certificate-errors", true))

	// signIn goes from the sign-in page through the provider's login page
	// and back.
	signIn := func(user, pw string) {
		t.Helper()
		b.run(chromedp.Navigate(base + "/"))
		b.waitReady("signin", `document.querySelector("#signin-oidc") !== null`)
		var hasToken bool
		b.eval(`document.querySelector("#signin-token") !== null`, &hasToken)
		if hasToken {
			t.Error("a token form where serve takes no tokens")
		}
		b.run(chromedp.Click(chromedp.CSS(`#signin-oidc`)))
		b.run(chromedp.WaitVisible(chromedp.CSS(`#username`)))
		var at string
		b.eval(`location.origin + "/"`, &at)
		if at != p.Issuer {
			t.Errorf("the login page is at %s, want the provider %s", at, p.Issuer)
		}
		b.run(
			chromedp.SetValue(chromedp.CSS(`#username`), user),
			chromedp.SetValue(chromedp.CSS(`#password`), pw),
			chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		)
	}
	// clustersShown waits for the timeline and returns the clusters its
	// cluster filter offers, and whether beta's user shows anywhere.
	clustersShown := func() ([]string, bool) {
		t.Helper()
		b.waitReady("timeline", `document.querySelector("#signout").getBoundingClientRect().width > 0`)
		var focused bool
		// The filter fills its value list when the field gets focus; a
		// headless window may have none to give, so say it happened.
		b.eval(`(() => { const i = document.querySelector("input[name=cluster]"); i.focus(); i.dispatchEvent(new FocusEvent("focusin", {bubbles: true})); return i !== null; })()`, &focused)
		var clusters []string
		deadline := time.Now().Add(20 * time.Second)
		for len(clusters) == 0 && time.Now().Before(deadline) {
			b.eval(`[...document.querySelectorAll("#dl-cluster option")].map(o => o.value)`, &clusters)
			time.Sleep(50 * time.Millisecond)
		}
		var beta bool
		b.eval(`document.body.innerText.includes("beta-secret-user")`, &beta)
		return clusters, beta
	}

	signIn("alice", "alice-pw")
	clusters, beta := clustersShown()
	if !slices.Equal(clusters, []string{"alpha"}) || beta {
		t.Errorf("alice (team-alpha → alpha) is offered clusters %v, beta's user shown: %v; want alpha only", clusters, beta)
	}
	var inTable bool
	b.eval(`document.body.innerText.includes("alpha-reader")`, &inTable)
	if !inTable {
		t.Error("alpha's events are not on alice's timeline")
	}
	var who string
	b.eval(`document.querySelector("#whoami").textContent`, &who)
	if who != "alice@example.com" {
		t.Errorf("signed in as %q on the page, want alice@example.com", who)
	}
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range res.Cookies {
		if c.Name == "auditlens_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || !session.Secure || session.SameSite != network.CookieSameSiteStrict {
		t.Errorf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict", session)
	}
	b.screenshot("oidc-signed-in", false)

	b.run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.waitReady("signin", `document.querySelector("#signout").getBoundingClientRect().width === 0`)
	b.run(chromedp.Navigate(base + "/reports"))
	b.waitReady("signin", "")

	// The control: a member of a group mapped to every cluster sees beta.
	signIn("root", "root-pw")
	clusters, beta = clustersShown()
	if !slices.Contains(clusters, "beta") || !beta {
		t.Errorf("root (admins → *) is offered clusters %v, beta's user shown: %v; want beta too", clusters, beta)
	}
	b.run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.waitReady("signin", "")

	// A user none of whose groups is mapped gets the 403 page, no session.
	signIn("mallory", "mallory-pw")
	b.waitReady("auth", `document.querySelector("#auth-message") !== null`)
	var status, msg, user string
	b.eval(`document.body.dataset.status`, &status)
	b.eval(`document.querySelector("#auth-message").textContent`, &msg)
	b.eval(`document.querySelector("#auth-user").textContent`, &user)
	if status != "403" || !strings.Contains(msg, "None of your groups (contractors)") || user != "mallory@example.com" {
		t.Errorf("mallory's page: status %s, user %q, message %q", status, user, msg)
	}
	b.screenshot("oidc-no-access", false)
	b.run(chromedp.Click(chromedp.CSS(`#auth-again`)))
	b.waitReady("signin", "")
	b.checkClean()
}

// TestUIForbiddenPage: a client the server knows but lets read nothing
// (here an authenticating proxy's user in no mapped group) gets the 403
// page with who it is and why, not an error box or the sign-in form; a
// mapped user of the same proxy reads the timeline.
func TestUIForbiddenPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	chromiumPath(t)
	dir := t.TempDir()
	s := startServe(t, "--data", filepath.Join(dir, "data"), "--detect=false",
		"--auth-proxy-from", "127.0.0.1/32", "--auth-proxy-group", "sre=alpha")
	b := newBrowser(t, 1280, 900)
	as := func(user, groups string) {
		t.Helper()
		if _, err := chromedp.Call(b.ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(b.ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"X-Forwarded-User": user, "X-Forwarded-Groups": groups},
		}); err != nil {
			t.Fatal(err)
		}
	}
	as("mallory", "contractors")
	b.run(chromedp.Navigate(s.base + "/"))
	b.waitReady("forbidden", `document.querySelector("#forbidden-reason") !== null`)
	var reason, user string
	b.eval(`document.querySelector("#forbidden-reason").textContent`, &reason)
	b.eval(`document.querySelector("#forbidden-user")?.textContent ?? ""`, &user)
	if !strings.Contains(reason, "mallory may read no cluster") || user != "mallory" {
		t.Errorf("403 page: user %q, reason %q", user, reason)
	}
	var signOut, errorShown bool
	b.eval(`document.querySelector("#forbidden-signout") !== null || document.querySelector("#signout").getBoundingClientRect().width > 0`, &signOut)
	b.eval(`!document.querySelector("#error").hidden`, &errorShown)
	if signOut || errorShown {
		t.Errorf("403 page of a proxy's user: sign-out offered %v, error box %v; want neither (the proxy holds the session)", signOut, errorShown)
	}
	b.screenshot("forbidden", false)

	as("ann", "sre")
	b.run(chromedp.Navigate(s.base + "/"))
	b.waitReady("timeline", "")
	var who string
	b.eval(`document.querySelector("#whoami").textContent`, &who)
	if who != "ann" {
		t.Errorf("the proxy's user shown as %q, want ann", who)
	}
	b.checkClean()
}
