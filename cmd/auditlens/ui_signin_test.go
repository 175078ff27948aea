package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestUISignIn: with read tokens set, every page asks to sign in; a wrong
// token is refused on the page, a right one opens the page that asked and
// leaves an HttpOnly, SameSite=Strict session cookie (links opened in a
// new tab, such as a report's HTML, carry it); signing out ends it.
func TestUISignIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	chromiumPath(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# read tokens\nui-read-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--data", filepath.Join(dir, "data"), "--detect=false", "--api-token-file", tokens)
	if code, _ := s.get("/api/v1/reports"); code != http.StatusUnauthorized {
		t.Fatalf("reports without credentials: %d, want 401", code)
	}
	b := newBrowser(t, 1280, 900)

	b.run(chromedp.Navigate(s.base + "/reports"))
	b.waitReady("signin", `document.querySelector("#signin-token") !== null`)
	var shown bool
	b.eval(`document.querySelector("#signout").getBoundingClientRect().width > 0`, &shown)
	if shown {
		t.Error("a sign-out button before signing in")
	}
	b.screenshot("signin", false)

	b.run(
		chromedp.SetValue(chromedp.CSS(`#signin-token`), "ui-read-token-2"),
		chromedp.Click(chromedp.CSS(`#signin-submit`)),
	)
	b.waitReady("signin", `!document.querySelector("#signin-error").hidden`)
	var msg string
	b.eval(`document.querySelector("#signin-error").textContent`, &msg)
	if msg == "" {
		t.Error("a wrong token gave no message")
	}

	b.run(
		chromedp.SetValue(chromedp.CSS(`#signin-token`), "ui-read-token-1"),
		chromedp.Click(chromedp.CSS(`#signin-submit`)),
	)
	b.waitReady("reports", `document.querySelector("#reports") !== null && document.querySelector("#signout").getBoundingClientRect().width > 0`)
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range res.Cookies {
		if c.Name == "auditlens_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || session.Value == "ui-read-token-1" {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not the token", session)
	}
	var inPage bool
	b.eval(`document.cookie.includes("auditlens_session")`, &inPage)
	if inPage {
		t.Error("scripts can read the session cookie")
	}
	// Another page of the app, loaded afresh, needs no new sign-in.
	b.run(chromedp.Navigate(s.base + "/jq"))
	b.waitReady("jq", "")

	b.run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.waitReady("signin", `document.querySelector("#signout").getBoundingClientRect().width === 0`)
	b.run(chromedp.Navigate(s.base + "/reports"))
	b.waitReady("signin", "")
	b.checkClean()
}
