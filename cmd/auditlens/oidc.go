package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/web"
)

// oidcFlags are serve's browser sign-in with an OpenID Connect provider.
type oidcFlags struct {
	issuer, clientID, secretFile, redirect string
	userClaim, groupsClaim, scopes, caFile string
	name                                   string
	groups                                 multiFlag
}

func (o *oidcFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.issuer, "oidc-issuer", "", "sign browsers in with this OpenID Connect provider (its issuer URL; docs/access.md)")
	fs.StringVar(&o.clientID, "oidc-client-id", "", "with --oidc-issuer: this auditlens' client ID at the provider")
	fs.StringVar(&o.secretFile, "oidc-client-secret-file", "", "with --oidc-issuer: file holding the client secret (a mounted Secret, not visible in ps)")
	fs.StringVar(&o.redirect, "oidc-redirect-url", "", "with --oidc-issuer: the callback URL registered with the provider: auditlens' external URL + /auth/oidc/callback; https marks cookies Secure behind a TLS-terminating proxy")
	fs.Var(&o.groups, "oidc-group", "GROUP=CLUSTER[,CLUSTER...] or GROUP=*: what signed-in members of GROUP (the groups claim) may read (repeatable; a user in no mapped group is refused)")
	fs.StringVar(&o.groupsClaim, "oidc-groups-claim", "groups", "the ID token (or userinfo) claim listing the user's groups")
	fs.StringVar(&o.userClaim, "oidc-user-claim", "email", "the claim naming the user in logs and on the page")
	fs.StringVar(&o.scopes, "oidc-scopes", "profile,email", "scopes asked for besides openid (comma-separated; add groups where the provider needs it)")
	fs.StringVar(&o.caFile, "oidc-ca-file", "", "PEM bundle that signs the provider's TLS certificate (default: the system's)")
	fs.StringVar(&o.name, "oidc-provider-name", "", "the provider as the sign-in button names it (default: the issuer's host)")
}

func (o *oidcFlags) set() bool {
	return o.issuer != "" || o.clientID != "" || o.secretFile != "" || o.redirect != "" || len(o.groups) > 0
}

// config checks the flags and returns serve's OIDC sign-in; nil when
// none is asked for. secure reports whether the redirect URL is https.
func (o *oidcFlags) config() (cfg *web.OIDC, secure bool, err error) {
	if !o.set() {
		return nil, false, nil
	}
	if o.issuer == "" || o.clientID == "" || o.secretFile == "" || o.redirect == "" || len(o.groups) == 0 {
		return nil, false, fmt.Errorf("%w: OIDC sign-in needs --oidc-issuer, --oidc-client-id, --oidc-client-secret-file, --oidc-redirect-url and at least one --oidc-group", errUsage)
	}
	ru, err := url.Parse(o.redirect)
	if err != nil || ru.Host == "" || (ru.Scheme != "https" && ru.Scheme != "http") {
		return nil, false, fmt.Errorf("%w: --oidc-redirect-url %q: want an http(s) URL ending in /auth/oidc/callback", errUsage, o.redirect)
	}
	if ru.Path != "/auth/oidc/callback" {
		return nil, false, fmt.Errorf("%w: --oidc-redirect-url %q: its path must be /auth/oidc/callback, where serve answers the provider", errUsage, o.redirect)
	}
	secretBytes, err := os.ReadFile(o.secretFile)
	if err != nil {
		return nil, false, fmt.Errorf("reading --oidc-client-secret-file: %w", err)
	}
	clientSecret := strings.TrimSpace(string(secretBytes))
	if clientSecret == "" {
		return nil, false, fmt.Errorf("--oidc-client-secret-file %s is empty", o.secretFile)
	}
	var scopes []string
	for sc := range strings.SplitSeq(o.scopes, ",") {
		if sc = strings.TrimSpace(sc); sc != "" && sc != "openid" {
			scopes = append(scopes, sc)
		}
	}
	if scopes == nil {
		scopes = []string{}
	}
	c, err := auth.NewOIDCClient(auth.OIDCConfig{
		Issuer: o.issuer, ClientID: o.clientID, ClientSecret: clientSecret, RedirectURL: o.redirect,
		Scopes: scopes, UserClaim: o.userClaim, GroupsClaim: o.groupsClaim, CAFile: o.caFile,
	})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", errUsage, err)
	}
	groups, err := groupMap("oidc-group", o.groups)
	if err != nil {
		return nil, false, err
	}
	name := o.name
	if name == "" {
		if iu, err := url.Parse(o.issuer); err == nil {
			name = iu.Hostname()
		}
	}
	return &web.OIDC{Provider: c, Name: name, Groups: groups}, ru.Scheme == "https", nil
}

// checkOIDC asks the provider for its discovery document, so that a wrong
// issuer shows in serve's log at start rather than at the first sign-in.
func checkOIDC(ctx context.Context, o *web.OIDC) error {
	c, ok := o.Provider.(interface{ Check(context.Context) error })
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.Check(ctx)
}
