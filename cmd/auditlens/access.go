package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/query"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/web"
)

// insecureReadsFlag is the serve flag that leaves the read side open on a
// non-loopback address. Its name says what it does, so that nobody sets it
// by accident and every reviewer of a manifest sees it.
const insecureReadsFlag = "insecure-unauthenticated-reads"

// loopbackAddr reports whether a --listen address accepts connections
// from this machine only: a loopback IP or "localhost". ":8080" and
// "0.0.0.0:8080" listen on every interface.
func loopbackAddr(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkReadAccess refuses a serve whose read API and UI would answer
// anyone on the network. Audit events say who did what from where, and
// with a careless policy they hold request bodies: outside loopback the
// read side needs bearer tokens (--api-token, --api-token-file, or
// Kubernetes tokens reviewed by the apiserver) or client certificates
// (--client-ca, which every connection must then present), unless the
// operator opts out by name.
func checkReadAccess(listen string, credentials, clientCerts, optOut bool) error {
	if credentials || clientCerts || optOut || loopbackAddr(listen) {
		return nil
	}
	return fmt.Errorf("%w: --listen %s is not a loopback address, and the read API and UI (every stored audit event: who did what, from where) "+
		"would answer anyone who reaches it. Give the read side credentials: --api-token-file FILE (or --api-token TOKEN) for bearer tokens, "+
		"--kube-auth-kubeconfig FILE or --kube-auth-in-cluster for Kubernetes tokens, --oidc-issuer (and its flags) for browser sign-in, "+
		"or --client-ca for client certificates; or listen on 127.0.0.1; or, only behind something that authenticates for you, --%s",
		errUsage, listen, insecureReadsFlag)
}

// readTokenFile reads bearer tokens, one per line; blank lines and lines
// starting with # are skipped, surrounding space is trimmed.
func readTokenFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --api-token-file: %w", err)
	}
	var toks []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		toks = append(toks, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading --api-token-file %s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("--api-token-file %s holds no token", path)
	}
	return toks, nil
}

// newKubeReviewer reads --kube-auth-kubeconfig or, with --kube-auth-in-cluster,
// the pod's service account; nil when neither is set. The cluster names
// to review come from the store (cached by the reviewer with its answers).
func newKubeReviewer(kubeconfig string, inCluster bool, ttl time.Duration, st store.Store) (web.TokenReviewer, error) {
	var cfg auth.KubeConfig
	var err error
	switch {
	case kubeconfig != "" && inCluster:
		return nil, fmt.Errorf("%w: --kube-auth-kubeconfig and --kube-auth-in-cluster exclude each other", errUsage)
	case kubeconfig != "":
		cfg, err = auth.LoadKubeconfig(kubeconfig)
	case inCluster:
		cfg, err = auth.KubeInCluster()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The cluster names are read once per cache period, not per token:
	// listing them reads a column of every stored event.
	names := &clusterNames{ttl: ttl, now: time.Now, list: func(ctx context.Context) ([]string, error) { return query.Clusters(ctx, st) }}
	cfg.Clusters = names.get
	cfg.CacheTTL = ttl
	r, err := auth.NewKubeReviewer(cfg)
	if err != nil {
		return nil, err // not a nil *KubeReviewer in a non-nil interface
	}
	return r, nil
}

// clusterNames keeps the stored cluster names for ttl (a new cluster is
// reviewed within it).
type clusterNames struct {
	ttl  time.Duration
	now  func() time.Time
	list func(context.Context) ([]string, error)

	mu      sync.Mutex
	names   []string
	expires time.Time
}

func (c *clusterNames) get(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.names == nil || !now.Before(c.expires) {
		names, err := c.list(ctx)
		if err != nil {
			return nil, err
		}
		if names == nil {
			names = []string{}
		}
		c.names, c.expires = names, now.Add(c.ttl)
	}
	return slices.Clone(c.names), nil
}

// authProxy builds the trusted proxy of the --auth-proxy-* flags; nil when
// none is set.
func authProxy(from, groups []string, userHdr, groupsHdr string) (p *auth.Proxy, err error) {
	if len(from) == 0 && len(groups) == 0 {
		return nil, nil
	}
	if len(from) == 0 || len(groups) == 0 {
		return nil, fmt.Errorf("%w: --auth-proxy-from and --auth-proxy-group go together: whose headers to trust, and what their groups may read", errUsage)
	}
	p = &auth.Proxy{UserHeader: userHdr, GroupsHeader: groupsHdr}
	for _, f := range from {
		pre, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: --auth-proxy-from %q: want a CIDR such as 127.0.0.1/32", errUsage, f)
		}
		p.From = append(p.From, pre.Masked())
	}
	p.Groups, err = groupMap("auth-proxy-group", groups)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// groupMap reads the GROUP=CLUSTER[,CLUSTER...] and GROUP=* values of a
// repeatable flag into what each group may read (an empty list: every
// cluster).
func groupMap(flagName string, values []string) (map[string][]string, error) {
	groups := map[string][]string{}
	for _, g := range values {
		name, clusters, err := auth.ParseProxyGroup(g, ingest.ValidName)
		if err != nil {
			return nil, fmt.Errorf("%w: --%s: %v", errUsage, flagName, err)
		}
		if prev, ok := groups[name]; ok && len(prev) == 0 {
			continue // already every cluster
		}
		if len(clusters) == 0 {
			groups[name] = []string{}
			continue
		}
		groups[name] = append(groups[name], clusters...)
	}
	return groups, nil
}
