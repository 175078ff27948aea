package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/auth"
)

// The read API's side of access: which credential a request carries, and
// the auth.Principal it stands for, kept on the request for the handlers.
// What each credential may read is decided in auth.

// TokenReviewer checks the bearer tokens that are not read tokens of
// serve's own (Kubernetes tokens, by TokenReview and SubjectAccessReview:
// *auth.KubeReviewer). A token it does not know is auth.ErrUnauthenticated.
type TokenReviewer interface {
	Review(ctx context.Context, token string) (auth.Access, error)
}

// authMode is what the read API asks of a client.
func (s *server) authMode() string {
	if len(s.cfg.APITokens) == 0 && s.cfg.Reviewer == nil && s.cfg.Proxy == nil && s.cfg.OIDC == nil {
		return "none"
	}
	return "token"
}

// authError is a failed authentication with the status it answers.
type authError struct {
	code int
	err  error
}

func (e *authError) Error() string { return e.err.Error() }

var errNoCredentials = &authError{http.StatusUnauthorized, errors.New("the read API needs a bearer token (--api-token or a Kubernetes token) or a signed-in session")}

// tokenPrincipal returns what a bearer token may read: one of serve's
// read tokens, or one the Reviewer knows.
func (s *server) tokenPrincipal(ctx context.Context, tok string) (auth.Principal, error) {
	if tok == "" {
		return auth.Principal{}, errNoCredentials
	}
	if i := auth.MatchSecret(tok, s.tokens); i >= 0 {
		return s.cfg.APITokens[i].Principal(), nil
	}
	if s.cfg.Reviewer == nil {
		return auth.Principal{}, &authError{http.StatusUnauthorized, errors.New("unknown bearer token")}
	}
	a, err := s.cfg.Reviewer.Review(ctx, tok)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return auth.Principal{}, &authError{http.StatusUnauthorized, errors.New("unknown bearer token (the Kubernetes apiserver does not accept it either)")}
	case err != nil:
		return auth.Principal{}, &authError{http.StatusServiceUnavailable, fmt.Errorf("cannot check the token now: %w", err)}
	case a.None():
		return auth.Principal{}, &authError{http.StatusForbidden, fmt.Errorf("%s may read no cluster: bind a ClusterRole that allows get on clusters.auditlens.io (named by the cluster) (docs/access.md)", a.User)}
	}
	return a.Principal, nil
}

// authenticated returns the request's principal and how it authenticated
// ("proxy", "bearer" or "cookie"), or why it did not.
func (s *server) authenticated(c *gin.Context) (auth.Principal, string, error) {
	if s.cfg.Proxy != nil {
		if p, user, ok := s.cfg.Proxy.Identify(c.Request); ok {
			if p.None() {
				return auth.Principal{}, "", &authError{http.StatusForbidden, fmt.Errorf("%s may read no cluster: none of its groups is mapped (serve --auth-proxy-group GROUP=CLUSTER)", user)}
			}
			return p, "proxy", nil
		}
	}
	if tok, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer "); ok {
		p, err := s.tokenPrincipal(c.Request.Context(), tok)
		if err != nil {
			return auth.Principal{}, "", err
		}
		return p, "bearer", nil
	}
	if id, err := c.Cookie(sessionCookie); err == nil {
		if se, ok := s.sessions.Get(id); ok {
			return se.Who, "cookie", nil
		}
	}
	return auth.Principal{}, "", errNoCredentials
}

func (s *server) auth(c *gin.Context) {
	if s.authMode() == "none" {
		c.Set(principalKey, auth.EveryCluster)
		return
	}
	p, _, err := s.authenticated(c)
	if err != nil {
		var ae *authError
		if !errors.As(err, &ae) {
			ae = &authError{http.StatusInternalServerError, err}
		}
		s.fail(c, ae.code, ae.err)
		return
	}
	c.Set(principalKey, p)
}

const principalKey = "auditlens.principal"

// who returns the principal the auth middleware found.
func who(c *gin.Context) auth.Principal {
	if v, ok := c.Get(principalKey); ok {
		return v.(auth.Principal)
	}
	return auth.Principal{} // reads nothing: a handler outside auth
}

// scopedCluster answers for handlers that read one cluster; false when it
// has failed the request.
func (s *server) scopedCluster(c *gin.Context, requested string) (string, bool) {
	cl, err := who(c).ScopeOne(requested)
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return "", false
	}
	return cl, true
}
