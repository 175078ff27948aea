// Package oidctest runs a real OpenID Connect provider for tests: the
// oidcop binary that deploy/e2e/build.sh builds from zitadel/oidc's
// example provider (pinned in deploy/e2e/versions.env), with users and
// groups the test names, and signs in to it without a browser.
package oidctest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/proctest"
)

// User is a user of the provider.
type User struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Email    string   `json:"email,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// Provider is a running oidcop.
type Provider struct {
	// Issuer is its issuer URL (http://127.0.0.1:PORT/).
	Issuer string
	// ClientID and ClientSecret are the one web client registered.
	ClientID, ClientSecret string
}

// Binary builds (or finds in the user cache) the pinned oidcop and returns
// its path.
func Binary(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "e2e", "build.sh")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no deploy/e2e/build.sh above the test's directory")
		}
		dir = parent
	}
	out, err := exec.Command("bash", filepath.Join(dir, "deploy", "e2e", "build.sh"), "oidcop").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Logf("%s", ee.Stderr)
		}
		t.Fatalf("building oidcop with deploy/e2e/build.sh (needs Go and the module proxy; under a minute when not cached): %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "oidcop")
}

// Start runs oidcop on a free 127.0.0.1 port with users (by ID) and one
// web client allowed to redirect to redirectURI. It ends with the test;
// its log is printed when the test failed.
func Start(t testing.TB, redirectURI string, users map[string]User) Provider {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	data, err := json.Marshal(users)
	if err != nil {
		t.Fatal(err)
	}
	usersFile := filepath.Join(dir, "users.json")
	if err := os.WriteFile(usersFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := proctest.FreeAddr(t)
	p := Provider{Issuer: "http://" + addr + "/", ClientID: "auditlens", ClientSecret: "oidctest-client-secret"}
	cmd := exec.Command(bin, "-listen", addr, "-issuer", p.Issuer, "-client-id", p.ClientID,
		"-client-secret", p.ClientSecret, "-redirect-uri", redirectURI, "-users", usersFile)
	proctest.Serve(t, "oidcop", cmd, filepath.Join(dir, "oidcop.log"), p.Issuer+".well-known/openid-configuration")
	return p
}

var hiddenID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// SignIn follows authURL (the provider's sign-in page) as a browser
// would, posts the login form as username, and returns the URL the
// provider sends the browser back to (redirectURI?code=…&state=…),
// without loading it.
func SignIn(authURL, redirectURI, username, password string) (*url.URL, error) {
	jar, _ := cookiejar.New(nil)
	var back *url.URL
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURI) {
			back = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := c.Get(authURL)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if back != nil {
		return back, nil // the provider refused at once (error=…)
	}
	m := hiddenID.FindSubmatch(page)
	if m == nil {
		return nil, fmt.Errorf("the provider's page (%s, %s) has no login form: %.300s", resp.Request.URL, resp.Status, page)
	}
	form := url.Values{"id": {string(m[1])}, "username": {username}, "password": {password}}
	resp, err = c.PostForm(resp.Request.URL.Scheme+"://"+resp.Request.URL.Host+"/login/username", form)
	if err != nil {
		return nil, err
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if back == nil {
		return nil, fmt.Errorf("the provider did not send the browser back after the login (%s): %.300s", resp.Status, page)
	}
	return back, nil
}
