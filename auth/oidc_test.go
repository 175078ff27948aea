package auth_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/internal/testkit/oidctest"
	"github.com/auditlens/auditlens/internal/testkit/proctest"
)

const redirect = "http://127.0.0.1:1/auth/oidc/callback"

// TestAgainstRealProvider signs in to a real OpenID Connect provider
// (zitadel/oidc's, built from the module proxy) through the
// authorization-code flow with PKCE, and checks what Exchange accepts.
func TestAgainstRealProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an OIDC provider")
	}
	p := oidctest.Start(t, redirect, map[string]oidctest.User{
		"u1": {Username: "alice", Password: "alice-pw", Email: "alice@example.com", Groups: []string{"team-a", "team-b"}},
		"u2": {Username: "bob", Password: "bob-pw", Email: "bob@example.com"},
	})
	ctx := context.Background()
	newClient := func(t *testing.T, userClaim string) *auth.OIDCClient {
		c, err := auth.NewOIDCClient(auth.OIDCConfig{
			Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: redirect, UserClaim: userClaim,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// signIn returns the code the provider sends back for state.
	signIn := func(t *testing.T, c *auth.OIDCClient, user, pw, state, nonce, verifier string) string {
		t.Helper()
		u, err := c.AuthURL(ctx, state, nonce, verifier)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(u, "code_challenge_method=S256") || !strings.Contains(u, "nonce=") {
			t.Errorf("auth URL %s: want an S256 challenge and a nonce", u)
		}
		back, err := oidctest.SignIn(u, redirect, user, pw)
		if err != nil {
			t.Fatal(err)
		}
		if got := back.Query().Get("state"); got != state {
			t.Fatalf("provider sent back state %q, want %q (%s)", got, state, back)
		}
		code := back.Query().Get("code")
		if code == "" {
			t.Fatalf("provider sent back no code: %s", back)
		}
		return code
	}
	const verifier = "verifier-0123456789-0123456789-0123456789-abcdef"

	t.Run("groups from the ID token, user from userinfo", func(t *testing.T) {
		c := newClient(t, "preferred_username")
		code := signIn(t, c, "alice", "alice-pw", "state-1", "nonce-1", verifier)
		id, err := c.Exchange(ctx, code, verifier, "nonce-1")
		if err != nil {
			t.Fatal(err)
		}
		if id.User != "alice" || !slices.Equal(id.Groups, []string{"team-a", "team-b"}) {
			t.Errorf("identity %+v, want alice in team-a and team-b", id)
		}
		// A code is good once.
		if _, err := c.Exchange(ctx, code, verifier, "nonce-1"); err == nil {
			t.Error("the provider accepted a code twice")
		}
	})
	t.Run("a user in no group", func(t *testing.T) {
		c := newClient(t, "")
		code := signIn(t, c, "bob", "bob-pw", "state-2", "nonce-2", verifier)
		id, err := c.Exchange(ctx, code, verifier, "nonce-2")
		if err != nil {
			t.Fatal(err)
		}
		if id.User != "bob@example.com" || len(id.Groups) != 0 {
			t.Errorf("identity %+v, want bob@example.com in no group", id)
		}
	})
	t.Run("another nonce is refused", func(t *testing.T) {
		c := newClient(t, "")
		code := signIn(t, c, "alice", "alice-pw", "state-3", "nonce-3", verifier)
		if _, err := c.Exchange(ctx, code, verifier, "nonce-other"); err == nil || !strings.Contains(err.Error(), "nonce") {
			t.Errorf("Exchange with another nonce: %v, want a nonce error", err)
		}
	})
	t.Run("another PKCE verifier is refused by the provider", func(t *testing.T) {
		c := newClient(t, "")
		code := signIn(t, c, "alice", "alice-pw", "state-4", "nonce-4", verifier)
		if _, err := c.Exchange(ctx, code, verifier+"x", "nonce-4"); err == nil {
			t.Error("the provider exchanged a code for the wrong PKCE verifier")
		}
	})
	t.Run("a wrong password gets no code", func(t *testing.T) {
		c := newClient(t, "")
		u, err := c.AuthURL(ctx, "state-5", "nonce-5", verifier)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := oidctest.SignIn(u, redirect, "alice", "wrong"); err == nil {
			t.Errorf("signed in with a wrong password: %s", back)
		}
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []auth.OIDCConfig{
		{ClientID: "x", RedirectURL: redirect},
		{Issuer: "http://127.0.0.1:1/", RedirectURL: redirect},
		{Issuer: "http://127.0.0.1:1/", ClientID: "x"},
		{Issuer: "ftp://idp/", ClientID: "x", RedirectURL: redirect},
		{Issuer: "http://127.0.0.1:1/", ClientID: "x", RedirectURL: "/auth/oidc/callback"},
		{Issuer: "http://127.0.0.1:1/", ClientID: "x", RedirectURL: redirect, CAFile: "/nonexistent/ca.pem"},
	} {
		if _, err := auth.NewOIDCClient(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestUnreachableProvider: AuthURL says what is wrong, and a later call
// tries again.
func TestUnreachableProvider(t *testing.T) {
	c, err := auth.NewOIDCClient(auth.OIDCConfig{Issuer: "http://" + proctest.FreeAddr(t) + "/", ClientID: "x", RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthURL(context.Background(), "s", "n", "v"); err == nil || !strings.Contains(err.Error(), "OIDC provider") {
		t.Errorf("AuthURL with no provider: %v", err)
	}
}
