package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/auditlens/auditlens/internal/secret"
)

// Per-cluster read access. Every read is answered for the clusters the
// client may read and nothing else: a filter naming another cluster
// selects nothing (as for a cluster that does not exist), a finding or
// report of another cluster is "not found", and a histogram or value list
// counts only the allowed clusters. So a client allowed cluster A learns
// nothing of cluster B, not even that it exists.

// APIToken is a bearer token of the read API and the clusters it may
// read (none: every cluster).
type APIToken struct {
	Token    string
	Clusters []string
}

// ParseAPIToken reads "TOKEN" (every cluster) or "TOKEN=CLUSTER[,CLUSTER…]",
// as serve's --api-token and the lines of --api-token-file give them.
// valid checks each cluster name.
func ParseAPIToken(s string, valid func(string) bool) (APIToken, error) {
	tok, clusters, scoped := strings.Cut(s, "=")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return APIToken{}, errors.New("an empty read token")
	}
	t := APIToken{Token: tok}
	if !scoped {
		return t, nil
	}
	for c := range strings.SplitSeq(clusters, ",") {
		c = strings.TrimSpace(c)
		if !valid(c) {
			return APIToken{}, fmt.Errorf("read token …=%s: cluster name %q is not valid", clusters, c)
		}
		if !slices.Contains(t.Clusters, c) {
			t.Clusters = append(t.Clusters, c)
		}
	}
	return t, nil
}

// ReviewedAccess is what a TokenReviewer found a token may read.
type ReviewedAccess struct {
	User     string
	All      bool     // every cluster
	Clusters []string // else these (none: nothing)
}

// TokenReviewer checks the bearer tokens that are not read tokens of
// serve's own (Kubernetes tokens, by TokenReview and SubjectAccessReview).
// An unknown token is ErrUnknownToken.
type TokenReviewer interface {
	ReviewToken(ctx context.Context, token string) (ReviewedAccess, error)
}

// ErrUnknownToken: the reviewer does not know the token.
var ErrUnknownToken = errors.New("unknown token")

// principal is what an authenticated client may read.
type principal struct {
	all      bool
	clusters []string
}

var everyCluster = principal{all: true}

func (p principal) allows(cluster string) bool {
	return p.all || slices.Contains(p.clusters, cluster)
}

// noCluster names no stored cluster (cluster names are ValidName: no
// control characters), so a filter on it selects nothing.
const noCluster = "\x00"

// scope narrows a list of requested clusters (empty: all) to those p may
// read. It never returns an empty list for a restricted principal (that
// would mean every cluster).
func (p principal) scope(requested []string) []string {
	if p.all {
		return requested
	}
	if len(requested) == 0 {
		return slices.Clone(p.clusters)
	}
	var out []string
	for _, c := range requested {
		if p.allows(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return []string{noCluster}
	}
	return out
}

// scopeOne narrows a single requested cluster: one p may not read becomes
// noCluster; none requested becomes p's only cluster, or an error when p
// may read several.
func (p principal) scopeOne(requested string) (string, error) {
	switch {
	case p.all:
		return requested, nil
	case requested == "" && len(p.clusters) == 1:
		return p.clusters[0], nil
	case requested == "":
		return "", errors.New("name the cluster (cluster=NAME): this client reads several")
	case p.allows(requested):
		return requested, nil
	}
	return noCluster, nil
}

// within reports whether a stored thing that covers clusters (empty:
// every cluster) may be shown to p whole.
func (p principal) within(clusters []string) bool {
	if p.all {
		return true
	}
	if len(clusters) == 0 {
		return false
	}
	for _, c := range clusters {
		if !p.allows(c) {
			return false
		}
	}
	return true
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
func (s *server) tokenPrincipal(ctx context.Context, tok string) (principal, error) {
	if tok == "" {
		return principal{}, errNoCredentials
	}
	if i := secret.Match(tok, s.tokens); i >= 0 {
		if cl := s.cfg.APITokens[i].Clusters; len(cl) > 0 {
			return principal{clusters: cl}, nil
		}
		return everyCluster, nil
	}
	if s.cfg.Reviewer == nil {
		return principal{}, &authError{http.StatusUnauthorized, errors.New("unknown bearer token")}
	}
	a, err := s.cfg.Reviewer.ReviewToken(ctx, tok)
	switch {
	case errors.Is(err, ErrUnknownToken):
		return principal{}, &authError{http.StatusUnauthorized, errors.New("unknown bearer token (the Kubernetes apiserver does not accept it either)")}
	case err != nil:
		return principal{}, &authError{http.StatusServiceUnavailable, fmt.Errorf("cannot check the token now: %w", err)}
	case a.All:
		return everyCluster, nil
	case len(a.Clusters) == 0:
		return principal{}, &authError{http.StatusForbidden, fmt.Errorf("%s may read no cluster: bind a ClusterRole that allows get on clusters.auditlens.io (named by the cluster) (docs/access.md)", a.User)}
	}
	return principal{clusters: a.Clusters}, nil
}

// authenticated returns the request's principal and how it authenticated
// ("proxy", "bearer" or "cookie"), or why it did not.
func (s *server) authenticated(c *gin.Context) (principal, string, error) {
	if s.cfg.Proxy != nil {
		if p, user, ok := s.cfg.Proxy.principal(c.Request); ok {
			if !p.all && len(p.clusters) == 0 {
				return principal{}, "", &authError{http.StatusForbidden, fmt.Errorf("%s may read no cluster: none of its groups is mapped (serve --auth-proxy-group GROUP=CLUSTER)", user)}
			}
			return p, "proxy", nil
		}
	}
	if tok, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer "); ok {
		p, err := s.tokenPrincipal(c.Request.Context(), tok)
		if err != nil {
			return principal{}, "", err
		}
		return p, "bearer", nil
	}
	if id, err := c.Cookie(sessionCookie); err == nil {
		if se, ok := s.sessions.get(id); ok {
			return se.who, "cookie", nil
		}
	}
	return principal{}, "", errNoCredentials
}

func (s *server) auth(c *gin.Context) {
	if s.authMode() == "none" {
		c.Set(principalKey, everyCluster)
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
func who(c *gin.Context) principal {
	if v, ok := c.Get(principalKey); ok {
		return v.(principal)
	}
	return principal{} // reads nothing: a handler outside auth
}

// scopedCluster answers for handlers that read one cluster; false when it
// has failed the request.
func (s *server) scopedCluster(c *gin.Context, requested string) (string, bool) {
	cl, err := who(c).scopeOne(requested)
	if err != nil {
		s.fail(c, http.StatusBadRequest, err)
		return "", false
	}
	return cl, true
}

// AuthProxy trusts the user and groups an authenticating proxy in front of
// serve (oauth2-proxy, kube-rbac-proxy and the like) puts in request
// headers — but only on connections from the proxy's own addresses: from
// anywhere else the headers are ignored, since any client can send them.
type AuthProxy struct {
	// From are the proxy's addresses (a sidecar: 127.0.0.1/32).
	From []netip.Prefix
	// UserHeader and GroupsHeader name the headers (defaults
	// X-Forwarded-User and X-Forwarded-Groups; groups comma-separated).
	UserHeader, GroupsHeader string
	// Groups maps a group to the clusters its members may read; a group
	// mapped to none (an empty list) reads every cluster.
	Groups map[string][]string
}

// ParseProxyGroup reads "GROUP=CLUSTER[,CLUSTER…]" or "GROUP=*" (every
// cluster), as serve's --auth-proxy-group takes it.
func ParseProxyGroup(s string, valid func(string) bool) (group string, clusters []string, err error) {
	g, cl, ok := strings.Cut(s, "=")
	g = strings.TrimSpace(g)
	if !ok || g == "" || strings.TrimSpace(cl) == "" {
		return "", nil, fmt.Errorf("proxy group %q: want GROUP=CLUSTER[,CLUSTER...] or GROUP=*", s)
	}
	if strings.TrimSpace(cl) == "*" {
		return g, []string{}, nil
	}
	for c := range strings.SplitSeq(cl, ",") {
		c = strings.TrimSpace(c)
		if !valid(c) {
			return "", nil, fmt.Errorf("proxy group %q: cluster name %q is not valid", s, c)
		}
		clusters = append(clusters, c)
	}
	return g, clusters, nil
}

// trusted reports whether the connection comes from the proxy. It reads
// the TCP peer, never a forwarded-for header.
func (p *AuthProxy) trusted(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, pre := range p.From {
		if pre.Contains(addr) {
			return true
		}
	}
	return false
}

// principal returns what the proxy's user may read; ok false when the
// request is not the proxy's or names no user.
func (p *AuthProxy) principal(r *http.Request) (principal, string, bool) {
	uh, gh := p.UserHeader, p.GroupsHeader
	if uh == "" {
		uh = "X-Forwarded-User"
	}
	if gh == "" {
		gh = "X-Forwarded-Groups"
	}
	user := strings.TrimSpace(r.Header.Get(uh))
	if user == "" || !p.trusted(r) {
		return principal{}, "", false
	}
	var groups []string
	for _, hv := range r.Header.Values(gh) {
		groups = append(groups, strings.Split(hv, ",")...)
	}
	return groupsPrincipal(p.Groups, groups), user, true
}
