package web

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// Browser sign-in. A browser cannot attach a bearer token to the links it
// opens (a report in a new tab) or keep one safely in script-readable
// storage, so the UI trades a token once for a session cookie: random,
// HttpOnly (no script reads it), SameSite=Strict (no other site's page
// makes the browser send it), Secure when served over TLS (or behind a
// TLS-terminating proxy, Config.SecureCookies), and known only
// to this process (a restart signs everyone out). The read API accepts
// either the bearer token or the cookie.
//
// Signing in is the only request that changes anything, so it is the one
// a cross-site page could forge: it takes only a JSON body (a form or an
// image cannot send one without a CORS preflight, which this server never
// answers) and refuses an Origin other than its own.

// sessionCookie names the cookie that carries an auth.Sessions ID.
const sessionCookie = "auditlens_session"

type sessionState struct {
	// Auth is "none" (the read API is open) or "token".
	Auth     string `json:"auth"`
	SignedIn bool   `json:"signed_in"`
	// Via is "proxy", "bearer" or "cookie" when signed in.
	Via string `json:"via,omitempty"`
	// User is who signed in, when the provider or proxy named them.
	User string `json:"user,omitempty"`
	// Methods are the ways a browser may sign in: "token" (a read token
	// traded for a cookie) and "oidc" (the provider's sign-in page).
	Methods []string `json:"methods,omitempty"`
	// Provider names the OIDC provider for the sign-in button.
	Provider string `json:"provider,omitempty"`
}

// tokenSignIn reports whether a bearer token can be traded for a cookie.
func (s *server) tokenSignIn() bool {
	return len(s.cfg.APITokens) > 0 || s.cfg.Reviewer != nil
}

// getSession tells the UI whether it must sign in, and how it may. It
// says nothing more, so it needs no authentication.
func (s *server) getSession(c *gin.Context) {
	st := s.state()
	if st.Auth != "none" {
		_, st.Via, _ = s.authenticated(c)
		st.SignedIn = st.Via != ""
		st.User = s.userOf(c, st.Via)
		if st.User == "" && s.cfg.Proxy != nil {
			// A proxy's user whose groups read nothing is still known:
			// the 403 page names them.
			_, st.User, _ = s.cfg.Proxy.Identify(c.Request)
		}
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, st)
}

func (s *server) state() sessionState {
	st := sessionState{Auth: s.authMode()}
	if st.Auth == "none" {
		return st
	}
	if s.tokenSignIn() {
		st.Methods = append(st.Methods, "token")
	}
	if s.cfg.OIDC != nil {
		st.Methods = append(st.Methods, "oidc")
		st.Provider = s.cfg.OIDC.Name
	}
	return st
}

// userOf names the signed-in user of a session cookie or the proxy.
func (s *server) userOf(c *gin.Context, via string) string {
	switch via {
	case "cookie":
		id, _ := c.Cookie(sessionCookie)
		se, _ := s.sessions.Get(id)
		return se.User
	case "proxy":
		_, user, _ := s.cfg.Proxy.Identify(c.Request)
		return user
	}
	return ""
}

// setSessionCookie gives the browser its session.
func (s *server) setSessionCookie(c *gin.Context, id string) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: int(s.sessions.TTL().Seconds()),
		HttpOnly: true, Secure: s.secureCookie(c.Request), SameSite: http.SameSiteStrictMode,
	})
}

// sameOrigin reports whether the request's Origin, when it sends one, is
// this server.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not a browser's cross-origin request
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// signIn trades a bearer token for a session cookie.
func (s *server) signIn(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	if mt, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type")); mt != "application/json" {
		s.fail(c, http.StatusUnsupportedMediaType, errors.New(`sign in with a JSON body {"token": "…"}`))
		return
	}
	if !sameOrigin(c.Request) {
		s.fail(c, http.StatusForbidden, errors.New("sign-in from another site refused"))
		return
	}
	if s.authMode() == "none" {
		c.JSON(http.StatusOK, sessionState{Auth: "none"})
		return
	}
	if !s.tokenSignIn() {
		s.fail(c, http.StatusUnauthorized, errOIDCOnly)
		return
	}
	if s.limited(c) {
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(io.LimitReader(c.Request.Body, 64<<10)).Decode(&body); err != nil {
		s.fail(c, http.StatusBadRequest, errors.New(`sign in with a JSON body {"token": "…"}`))
		return
	}
	p, err := s.tokenPrincipal(c.Request.Context(), strings.TrimSpace(body.Token))
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) && ae.code == http.StatusUnauthorized {
			s.signInFailures.fail(c.Request)
			s.cfg.Logger.Warn("sign-in refused", "remote", c.ClientIP())
			s.fail(c, http.StatusUnauthorized, errors.New("that token is not one the read API accepts"))
			return
		}
		if ae == nil {
			ae = &authError{http.StatusInternalServerError, err}
		}
		s.fail(c, ae.code, ae.err)
		return
	}
	id, err := s.sessions.Create(p, "")
	if err != nil {
		s.fail(c, http.StatusInternalServerError, err)
		return
	}
	s.setSessionCookie(c, id)
	st := s.state()
	st.SignedIn, st.Via = true, "cookie"
	c.JSON(http.StatusOK, st)
}

// signOut ends the session and clears its cookie.
func (s *server) signOut(c *gin.Context) {
	if id, err := c.Cookie(sessionCookie); err == nil {
		s.sessions.End(id)
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.secureCookie(c.Request), SameSite: http.SameSiteStrictMode,
	})
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, s.state())
}
