// OIDCClient is the relying-party side of browser sign-in with
// OpenID Connect: the authorization-code flow with PKCE (S256) and a
// nonce, the ID token verified against the provider's keys, and the user's
// name and groups read from the token's claims (or, when the provider
// keeps groups out of the token, its userinfo endpoint).
//
// It holds no sessions and no browser state: web keeps those, and asks
// this package for the provider's URL and, on the way back, for the
// identity behind a code.

package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCConfig names the provider and this client of it.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is at
	// Issuer + "/.well-known/openid-configuration".
	Issuer string
	// ClientID and ClientSecret are this client's registration.
	ClientID, ClientSecret string
	// RedirectURL is where the provider sends the browser back: serve's
	// external URL + "/auth/oidc/callback", registered with the provider.
	RedirectURL string
	// Scopes are asked for besides "openid" (default profile and email;
	// some providers assert groups only for a "groups" scope).
	Scopes []string
	// UserClaim names the user in logs and on the page (default email,
	// then preferred_username, then sub).
	UserClaim string
	// GroupsClaim is the claim listing the user's groups (default groups).
	GroupsClaim string
	// CAFile, when set, is the PEM bundle that signs the provider's TLS
	// certificate, instead of the system's.
	CAFile string
	// Timeout bounds each request to the provider (default 10s).
	Timeout time.Duration
}

// OIDCIdentity is who signed in.
type OIDCIdentity struct {
	User   string
	Groups []string
}

// OIDCClient talks to one provider. The discovery document is fetched on
// first use and kept; a provider that is down when serve starts is tried
// again at the next sign-in.
type OIDCClient struct {
	cfg  OIDCConfig
	http *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
}

// NewOIDCClient checks cfg and returns a Client; it does not contact the provider.
func NewOIDCClient(cfg OIDCConfig) (*OIDCClient, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("OIDC sign-in needs the issuer, the client ID and the redirect URL")
	}
	for _, u := range []string{cfg.Issuer, cfg.RedirectURL} {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return nil, fmt.Errorf("OIDC: %q is not an http(s) URL", u)
		}
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = "email"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.Scopes == nil {
		cfg.Scopes = []string{"profile", "email"}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("OIDC CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OIDC CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &OIDCClient{cfg: cfg, http: &http.Client{Transport: tr, Timeout: cfg.Timeout}}, nil
}

// Issuer is the provider's issuer URL.
func (c *OIDCClient) Issuer() string { return c.cfg.Issuer }

func (c *OIDCClient) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, c.http)
}

// discover returns the provider, fetching its discovery document once.
func (c *OIDCClient) discover(ctx context.Context) (*oidc.Provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider != nil {
		return c.provider, nil
	}
	p, err := oidc.NewProvider(c.ctx(ctx), c.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("OIDC provider %s: %w", c.cfg.Issuer, err)
	}
	c.provider = p
	return p, nil
}

// Check fetches the discovery document, so that serve can say at start
// whether the provider answers.
func (c *OIDCClient) Check(ctx context.Context) error {
	_, err := c.discover(ctx)
	return err
}

func (c *OIDCClient) oauth(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID: c.cfg.ClientID, ClientSecret: c.cfg.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: c.cfg.RedirectURL,
		Scopes: append([]string{oidc.ScopeOpenID}, c.cfg.Scopes...),
	}
}

// AuthURL is the provider's page to send the browser to, carrying state,
// the nonce the ID token must repeat, and the S256 challenge of verifier.
func (c *OIDCClient) AuthURL(ctx context.Context, state, nonce, verifier string) (string, error) {
	p, err := c.discover(ctx)
	if err != nil {
		return "", err
	}
	return c.oauth(p).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// Exchange trades the code the provider sent back for the identity: the
// ID token must be signed by the provider, issued to this client, not
// expired, and carry nonce.
func (c *OIDCClient) Exchange(ctx context.Context, code, verifier, nonce string) (OIDCIdentity, error) {
	p, err := c.discover(ctx)
	if err != nil {
		return OIDCIdentity{}, err
	}
	ctx = c.ctx(ctx)
	tok, err := c.oauth(p).Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return OIDCIdentity{}, fmt.Errorf("OIDC code exchange: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return OIDCIdentity{}, errors.New("OIDC: the provider's token answer holds no ID token")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: c.cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		return OIDCIdentity{}, fmt.Errorf("OIDC ID token: %w", err)
	}
	if idt.Nonce != nonce {
		return OIDCIdentity{}, errors.New("OIDC ID token: the nonce is not the one this sign-in sent")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return OIDCIdentity{}, fmt.Errorf("OIDC ID token claims: %w", err)
	}
	_, hasGroups := claims[c.cfg.GroupsClaim]
	_, hasUser := claims[c.cfg.UserClaim]
	if (!hasGroups || !hasUser) && p.UserInfoEndpoint() != "" {
		// Many providers keep groups (and profile claims, when an access
		// token is issued) out of the ID token; userinfo has them.
		ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return OIDCIdentity{}, fmt.Errorf("OIDC userinfo: %w", err)
		}
		var more map[string]any
		if err := ui.Claims(&more); err != nil {
			return OIDCIdentity{}, fmt.Errorf("OIDC userinfo claims: %w", err)
		}
		if ui.Subject != idt.Subject {
			return OIDCIdentity{}, errors.New("OIDC userinfo names another subject than the ID token")
		}
		for k, v := range more {
			if _, ok := claims[k]; !ok {
				claims[k] = v
			}
		}
	}
	return identity(claims, c.cfg.UserClaim, c.cfg.GroupsClaim, idt.Subject), nil
}

// identity reads the user and groups from the merged claims. A groups
// claim is a list of strings, or one string (some providers send a
// single group so).
func identity(claims map[string]any, userClaim, groupsClaim, sub string) OIDCIdentity {
	var id OIDCIdentity
	for _, k := range []string{userClaim, "email", "preferred_username"} {
		if s, ok := claims[k].(string); ok && s != "" {
			id.User = s
			break
		}
	}
	if id.User == "" {
		id.User = sub
	}
	switch g := claims[groupsClaim].(type) {
	case string:
		id.Groups = []string{g}
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok && s != "" && !slices.Contains(id.Groups, s) {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	return id
}
