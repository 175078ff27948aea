package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/auditlens/auditlens/auth"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/query"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/web"
)

// serve's flags by what they configure: each group registers its flags
// with their defaults, checks them, and builds its part.

// tlsFlags are serve's HTTPS flags.
type tlsFlags struct {
	cert, key, clientCA string
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&t.key, "tls-key", "", "private key for --tls-cert (PEM)")
	fs.StringVar(&t.clientCA, "client-ca", "", "require client certificates signed by this CA (PEM) on every request")
}

// validate reports flags that do not go together.
func (t *tlsFlags) validate() error {
	if (t.cert == "") != (t.key == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	if t.clientCA != "" && t.cert == "" {
		return fmt.Errorf("%w: --client-ca needs --tls-cert and --tls-key", errUsage)
	}
	return nil
}

// scheme is the URL scheme serve answers on.
func (t *tlsFlags) scheme() string {
	if t.cert != "" {
		return "https"
	}
	return "http"
}

// config loads the certificate and the client CA; nil for plain HTTP.
func (t *tlsFlags) config() (*tls.Config, error) {
	if t.cert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	cert, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate: %w", err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	if t.clientCA != "" {
		pem, err := os.ReadFile(t.clientCA)
		if err != nil {
			return nil, fmt.Errorf("reading --client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s holds no PEM certificate", t.clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// readFlags say who may read through the API and the UI, besides OIDC
// sign-in (oidcFlags): bearer tokens, Kubernetes tokens reviewed by an
// apiserver, an authenticating proxy.
type readFlags struct {
	apiTokens      multiFlag
	apiTokenFile   string
	kubeconfig     string
	inCluster      bool
	kubeTTL        time.Duration
	proxyFrom      multiFlag
	proxyGroups    multiFlag
	proxyUserHdr   string
	proxyGroupsHdr string
}

func (r *readFlags) register(fs *flag.FlagSet) {
	fs.Var(&r.apiTokens, "api-token", "TOKEN or TOKEN=CLUSTER[,CLUSTER...]: a bearer token the read API and UI accept, for every cluster or only these (repeatable)")
	fs.StringVar(&r.apiTokenFile, "api-token-file", "", "file of read tokens, one per line as --api-token takes them (TOKEN or TOKEN=CLUSTER,...; # comments): a mounted Secret, not visible in ps")
	fs.StringVar(&r.kubeconfig, "kube-auth-kubeconfig", "", "check other bearer tokens with the Kubernetes apiserver of this kubeconfig (TokenReview, then SubjectAccessReview of get clusters.auditlens.io per cluster; docs/access.md)")
	fs.BoolVar(&r.inCluster, "kube-auth-in-cluster", false, "as --kube-auth-kubeconfig, with the pod's own service account and apiserver")
	fs.DurationVar(&r.kubeTTL, "kube-auth-cache-ttl", auth.DefaultKubeCacheTTL, "how long a token's reviews are reused: a removed RoleBinding takes effect within this")
	fs.Var(&r.proxyFrom, "auth-proxy-from", "CIDR: trust an authenticating proxy's user and groups headers on connections from these addresses only, e.g. 127.0.0.1/32 for a sidecar (repeatable)")
	fs.Var(&r.proxyGroups, "auth-proxy-group", "GROUP=CLUSTER[,CLUSTER...] or GROUP=*: what the proxy's users in GROUP may read (repeatable)")
	fs.StringVar(&r.proxyUserHdr, "auth-proxy-user-header", "X-Forwarded-User", "with --auth-proxy-from: the header naming the proxy's authenticated user")
	fs.StringVar(&r.proxyGroupsHdr, "auth-proxy-groups-header", "X-Forwarded-Groups", "with --auth-proxy-from: the header listing the user's groups (comma-separated, or repeated)")
}

// tokens reads --api-token and --api-token-file.
func (r *readFlags) tokens() ([]auth.APIToken, error) {
	all := r.apiTokens
	if r.apiTokenFile != "" {
		toks, err := readTokenFile(r.apiTokenFile)
		if err != nil {
			return nil, err
		}
		all = append(all[:len(all):len(all)], toks...)
	}
	out := make([]auth.APIToken, 0, len(all))
	for _, t := range all {
		rt, err := auth.ParseAPIToken(t, ingest.ValidName)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		out = append(out, rt)
	}
	return out, nil
}

// proxy builds the trusted proxy; nil when none is set.
func (r *readFlags) proxy() (*auth.Proxy, error) {
	return authProxy(r.proxyFrom, r.proxyGroups, r.proxyUserHdr, r.proxyGroupsHdr)
}

// kubeAuth reports whether Kubernetes tokens are reviewed, and whether the
// flags that say where agree.
func (r *readFlags) kubeAuth() (bool, error) {
	if r.kubeconfig != "" && r.inCluster {
		return false, fmt.Errorf("%w: --kube-auth-kubeconfig and --kube-auth-in-cluster exclude each other", errUsage)
	}
	return r.kubeconfig != "" || r.inCluster, nil
}

// reviewer is the Kubernetes token reviewer over st's cluster names; nil
// when Kubernetes tokens are not reviewed.
func (r *readFlags) reviewer(st store.Store) (web.TokenReviewer, error) {
	return newKubeReviewer(r.kubeconfig, r.inCluster, r.kubeTTL, st)
}

// queryFlags bound the API's queries.
type queryFlags struct {
	timeout      time.Duration
	jqTimeout    time.Duration
	jqMaxOutputs int
	jqConcurrent int
}

func (q *queryFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&q.timeout, "query-timeout", web.DefaultQueryTimeout, "longest an API query may run")
	fs.DurationVar(&q.jqTimeout, "jq-timeout", query.DefaultTimeout, "longest a jq program may run per query")
	fs.IntVar(&q.jqMaxOutputs, "jq-max-outputs", web.DefaultMaxJQOutputs, "most jq outputs per query")
	fs.IntVar(&q.jqConcurrent, "jq-max-concurrent", web.DefaultMaxConcurrentJQ, "most jq queries running at once (each in its own worker process)")
}

// limits are the bounds of one API query with a jq program, which runs in
// an `auditlens jq-worker` child.
func (q *queryFlags) limits() query.Limits {
	return query.Limits{Timeout: q.jqTimeout, MaxOutputs: q.jqMaxOutputs, Worker: &query.ProcessRunner{Args: jqWorkerArgs}}
}

// writerFlags size the writer's inserts and its last work at shutdown.
type writerFlags struct {
	rows  int
	wait  time.Duration
	drain time.Duration
}

func (w *writerFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&w.rows, "batch-rows", ingest.DefaultBatchRows, "largest insert into the store")
	fs.DurationVar(&w.wait, "batch-wait", ingest.DefaultBatchWait, "longest the writer waits to fill an insert")
	fs.DurationVar(&w.drain, "drain-timeout", 30*time.Second, "at shutdown, how long to keep storing spooled events (the rest is replayed at the next start)")
}
