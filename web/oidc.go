package web

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/internal/expiring"
)

// Browser sign-in with OpenID Connect. GET /auth/oidc/login sends the
// browser to the provider with a fresh state, nonce and PKCE challenge;
// the provider sends it back to GET /auth/oidc/callback with a code,
// which is traded (with the PKCE verifier only this process knows) for an
// ID token; its groups claim decides the clusters, and the browser gets
// the same session cookie as a token sign-in.
//
// Cross-site request forgery: the state rides in an HttpOnly cookie of
// its own (SameSite=Lax, so that the provider's redirect back carries it)
// and must equal the state in the callback's URL, so a callback that did
// not start in this browser (a forged link that would sign the victim in
// as the attacker) is refused. Each state is good for one callback within
// ten minutes. The session cookie itself is SameSite=Strict.

const (
	oidcStateCookie = "auditlens_oidc"
	oidcStatePath   = "/auth/oidc/"
	oidcFlowTTL     = 10 * time.Minute
	maxOIDCFlows    = 10000
)

// OIDCProvider is the relying party's side of the provider:
// *auth.Client.
type OIDCProvider interface {
	// AuthURL is the provider's sign-in page for this state, nonce and
	// the S256 challenge of verifier.
	AuthURL(ctx context.Context, state, nonce, verifier string) (string, error)
	// Exchange trades a code for the verified identity.
	Exchange(ctx context.Context, code, verifier, nonce string) (auth.OIDCIdentity, error)
}

// OIDC is browser sign-in with an OpenID Connect provider.
type OIDC struct {
	Provider OIDCProvider
	// Name is the provider as the sign-in button names it.
	Name string
	// Groups maps a group of the groups claim to the clusters its members
	// may read; a group mapped to none (an empty list) reads every
	// cluster. A user in no mapped group is refused.
	Groups map[string][]string
}

type oidcFlow struct {
	verifier, nonce, returnTo string
	expires                   time.Time
}

type oidcFlows struct {
	mu      sync.Mutex
	byState map[string]oidcFlow
	now     func() time.Time
}

func newOIDCFlows(now func() time.Time) *oidcFlows {
	return &oidcFlows{byState: map[string]oidcFlow{}, now: now}
}

func (f *oidcFlows) start(state string, fl oidcFlow) {
	now := f.now()
	fl.expires = now.Add(oidcFlowTTL)
	f.mu.Lock()
	defer f.mu.Unlock()
	expiring.MakeRoom(f.byState, maxOIDCFlows, now, func(v oidcFlow) time.Time { return v.expires })
	f.byState[state] = fl
}

// take ends the flow of state and returns it, if it is live.
func (f *oidcFlows) take(state string) (oidcFlow, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.byState[state]
	delete(f.byState, state)
	if !ok || !f.now().Before(fl.expires) {
		return oidcFlow{}, false
	}
	return fl, true
}

// localPath keeps a return path on this server: an absolute path that
// parses as a URL without scheme or host, never "//host", with no
// backslash (browsers read "/\host" as "//host") and no control
// character (browsers drop tabs and newlines, so "/\t/host" is "//host").
func localPath(p string) string {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.ContainsRune(p, '\\') {
		return "/"
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "/"
		}
	}
	if u, err := url.Parse(p); err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return p
}

// secureCookie reports whether cookies get the Secure attribute: always
// over TLS, and behind a TLS-terminating proxy when Config.SecureCookies.
func (s *server) secureCookie(r *http.Request) bool {
	return r.TLS != nil || s.cfg.SecureCookies
}

func (s *server) oidcLogin(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	state, err := auth.RandomToken()
	if err != nil {
		s.authPage(c, http.StatusInternalServerError, "Sign-in failed", err.Error(), "")
		return
	}
	fl := oidcFlow{returnTo: localPath(c.Query("return"))}
	if fl.verifier, err = auth.RandomToken(); err == nil {
		fl.nonce, err = auth.RandomToken()
	}
	if err != nil {
		s.authPage(c, http.StatusInternalServerError, "Sign-in failed", err.Error(), "")
		return
	}
	to, err := s.cfg.OIDC.Provider.AuthURL(c.Request.Context(), state, fl.nonce, fl.verifier)
	if err != nil {
		s.cfg.Logger.Error("OIDC sign-in", "err", err)
		s.authPage(c, http.StatusServiceUnavailable, "The sign-in provider does not answer",
			"auditlens cannot reach "+s.oidcName()+" right now. Try again in a minute; if it persists, whoever runs auditlens will find the reason in its log.", "")
		return
	}
	s.oidc.start(state, fl)
	http.SetCookie(c.Writer, &http.Cookie{
		Name: oidcStateCookie, Value: state, Path: oidcStatePath, MaxAge: int(oidcFlowTTL.Seconds()),
		HttpOnly: true, Secure: s.secureCookie(c.Request), SameSite: http.SameSiteLaxMode,
	})
	c.Redirect(http.StatusSeeOther, to)
}

func (s *server) oidcCallback(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	cookie, _ := c.Cookie(oidcStateCookie)
	http.SetCookie(c.Writer, &http.Cookie{
		Name: oidcStateCookie, Value: "", Path: oidcStatePath, MaxAge: -1,
		HttpOnly: true, Secure: s.secureCookie(c.Request), SameSite: http.SameSiteLaxMode,
	})
	state := c.Query("state")
	if state == "" || cookie == "" || !auth.EqualSecret(cookie, state) {
		s.cfg.Logger.Warn("OIDC callback without its state cookie refused", "remote", c.ClientIP())
		s.authPage(c, http.StatusBadRequest, "Sign-in did not start here",
			"This sign-in was not started from this browser, or its cookie was blocked. Start again from auditlens.", "")
		return
	}
	fl, ok := s.oidc.take(state)
	if !ok {
		s.authPage(c, http.StatusBadRequest, "Sign-in expired",
			"This sign-in took longer than ten minutes, was already used, or auditlens restarted meanwhile. Start again.", "")
		return
	}
	if e := c.Query("error"); e != "" {
		msg := s.oidcName() + " did not sign you in (" + e + ")"
		if d := c.Query("error_description"); d != "" {
			msg += ": " + d
		}
		s.authPage(c, http.StatusUnauthorized, "Not signed in", msg+".", "")
		return
	}
	code := c.Query("code")
	if code == "" {
		s.authPage(c, http.StatusBadRequest, "Not signed in", "The provider sent no authorization code back.", "")
		return
	}
	id, err := s.cfg.OIDC.Provider.Exchange(c.Request.Context(), code, fl.verifier, fl.nonce)
	if err != nil {
		s.cfg.Logger.Warn("OIDC sign-in failed", "err", err, "remote", c.ClientIP())
		s.authPage(c, http.StatusBadGateway, "Sign-in failed",
			"auditlens could not complete the sign-in with "+s.oidcName()+". Start again; if it persists, whoever runs auditlens will find the reason in its log.", "")
		return
	}
	p := auth.GroupsPrincipal(s.cfg.OIDC.Groups, id.Groups)
	if p.None() {
		s.cfg.Logger.Warn("OIDC user may read no cluster", "user", id.User, "groups", id.Groups)
		groups := "none"
		if len(id.Groups) > 0 {
			groups = strings.Join(id.Groups, ", ")
		}
		s.authPage(c, http.StatusForbidden, "No access",
			"None of your groups ("+groups+") may read a cluster here. Ask whoever runs auditlens to map one of them to a cluster (serve --oidc-group GROUP=CLUSTER).", id.User)
		return
	}
	sid, err := s.sessions.Create(p, id.User)
	if err != nil {
		s.authPage(c, http.StatusInternalServerError, "Sign-in failed", err.Error(), "")
		return
	}
	s.cfg.Logger.Info("signed in", "user", id.User, "via", "oidc")
	s.setSessionCookie(c, sid)
	c.Redirect(http.StatusSeeOther, fl.returnTo)
}

func (s *server) oidcName() string {
	if s.cfg.OIDC != nil && s.cfg.OIDC.Name != "" {
		return s.cfg.OIDC.Name
	}
	return "the sign-in provider"
}

// authPage is the page a browser lands on when a sign-in with the
// provider ends in anything but success. Every string is text in an
// html/template, never markup.
var authPageTemplate = template.Must(template.New("auth").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · auditlens</title>
<link rel="icon" href="/ui/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/ui/app.css">
</head>
<body data-view="auth" data-state="ready" data-status="{{.Status}}">
<header class="top"><a class="brand" href="/"><span class="brand-mark" aria-hidden="true"></span>auditlens</a></header>
<main>
<section class="card signin" id="auth-result">
<div class="card-head"><h1>{{.Title}}</h1></div>
{{if .User}}<p>Signed in to the provider as <strong id="auth-user">{{.User}}</strong>.</p>{{end}}
<p id="auth-message">{{.Message}}</p>
<p><a class="button primary" id="auth-again" href="/">Back to auditlens</a></p>
</section>
</main>
</body>
</html>
`))

func (s *server) authPage(c *gin.Context, status int, title, message, user string) {
	c.Header("Content-Security-Policy", contentSecurityPolicy)
	c.Header("X-Frame-Options", "SAMEORIGIN")
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Referrer-Policy", "no-referrer")
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Status(status)
	if err := authPageTemplate.Execute(c.Writer, struct {
		Status               int
		Title, Message, User string
	}{status, title, message, user}); err != nil {
		s.cfg.Logger.Error("auth page", "err", err)
	}
	c.Abort()
}

var (
	errOIDCOnly       = errors.New("this auditlens signs in with its OpenID Connect provider only: use the sign-in button")
	errTooManySignIns = errors.New("too many refused sign-ins from this address: wait a minute")
)
