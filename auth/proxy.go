package auth

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Proxy trusts the user and groups an authenticating proxy in front of
// serve (oauth2-proxy, kube-rbac-proxy and the like) puts in request
// headers — but only on connections from the proxy's own addresses: from
// anywhere else the headers are ignored, since any client can send them.
type Proxy struct {
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

// Trusted reports whether the connection comes from the proxy. It reads
// the TCP peer, never a forwarded-for header.
func (p *Proxy) Trusted(r *http.Request) bool {
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

// Identify returns the proxy's user and what it may read; ok false when
// the request is not the proxy's or names no user.
func (p *Proxy) Identify(r *http.Request) (pr Principal, user string, ok bool) {
	uh, gh := p.UserHeader, p.GroupsHeader
	if uh == "" {
		uh = "X-Forwarded-User"
	}
	if gh == "" {
		gh = "X-Forwarded-Groups"
	}
	user = strings.TrimSpace(r.Header.Get(uh))
	if user == "" || !p.Trusted(r) {
		return Principal{}, "", false
	}
	var groups []string
	for _, hv := range r.Header.Values(gh) {
		groups = append(groups, strings.Split(hv, ",")...)
	}
	return GroupsPrincipal(p.Groups, groups), user, true
}
