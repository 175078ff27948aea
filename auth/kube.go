// KubeReviewer checks a bearer token against a Kubernetes cluster, as
// kube-rbac-proxy does: a TokenReview says who the token belongs to, and a
// SubjectAccessReview per auditlens cluster name says whether that user
// may read it. Read access to an auditlens cluster is the verb get on the
// resource clusters of the API group auditlens.io, named by the cluster
// (a rule without resourceNames allows every cluster):
//
//	apiVersion: rbac.authorization.k8s.io/v1
//	kind: ClusterRole
//	metadata: {name: auditlens-read-prod}
//	rules:
//	- apiGroups: [auditlens.io]
//	  resources: [clusters]
//	  resourceNames: [prod]
//	  verbs: [get]
//
// Answers are cached for a short while (one minute by default), by the
// token's SHA-256 digest, so that a page of the UI making ten requests
// costs the apiserver one review, and a revoked binding stops working
// within the minute.

package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The resource a SubjectAccessReview asks about.
const (
	KubeGroup    = "auditlens.io"
	KubeResource = "clusters"
	KubeVerb     = "get"
)

// ErrUnauthenticated: the apiserver does not know the token.
var ErrUnauthenticated = errors.New("the Kubernetes apiserver does not accept this token")

// KubeConfig is how to reach the apiserver that reviews tokens, with
// credentials allowed to create tokenreviews and subjectaccessreviews (the
// ClusterRole system:auth-delegator grants both).
type KubeConfig struct {
	Server string // https://host:port
	CA     []byte // PEM; empty: the system's roots
	// Token, or ClientCert and ClientKey (PEM), authenticate auditlens.
	Token                 string
	ClientCert, ClientKey []byte
	// TokenFile, when set, is read for the token at every review (a
	// projected service-account token is rotated in place).
	TokenFile string
	// Audiences, when set, are the audiences the tokens must be for.
	Audiences []string
	// CacheTTL is how long an answer is reused (default DefaultKubeCacheTTL).
	CacheTTL time.Duration
	// Clusters lists the auditlens cluster names there are, to review one
	// by one for a user who may not read them all.
	Clusters func(ctx context.Context) ([]string, error)
	Now      func() time.Time
}

// Access is whose a token is and what it may read (All: RBAC allows get
// on clusters with no name).
type Access struct {
	User string
	Principal
}

// KubeReviewer reviews tokens. It is safe for concurrent use.
type KubeReviewer struct {
	cfg    KubeConfig
	client *http.Client
	mu     sync.Mutex
	cache  map[[sha256.Size]byte]cached
}

type cached struct {
	access  Access
	err     error
	expires time.Time
}

// DefaultKubeCacheTTL is how long a token's reviews are reused unless
// KubeConfig.CacheTTL (serve's --kube-auth-cache-ttl) says otherwise.
const DefaultKubeCacheTTL = time.Minute

// NewKubeReviewer returns a reviewer for cfg.
func NewKubeReviewer(cfg KubeConfig) (*KubeReviewer, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kube auth: server %q is not an https:// URL", cfg.Server)
	}
	if cfg.Token == "" && len(cfg.ClientCert) == 0 {
		return nil, errors.New("kube auth: no credentials for the apiserver (a token, or a client certificate and key)")
	}
	if cfg.Clusters == nil {
		return nil, errors.New("kube auth: no lister of cluster names")
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultKubeCacheTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CA) {
			return nil, errors.New("kube auth: the certificate authority holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if len(cfg.ClientCert) > 0 {
		cert, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("kube auth: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &KubeReviewer{cfg: cfg, cache: map[[sha256.Size]byte]cached{},
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}}, nil
}

// Review returns what token may read. An unknown token is
// ErrUnauthenticated; a known one that may read nothing has no clusters.
func (r *KubeReviewer) Review(ctx context.Context, token string) (Access, error) {
	k := sha256.Sum256([]byte(token))
	now := r.cfg.Now()
	r.mu.Lock()
	c, ok := r.cache[k]
	r.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.access, c.err
	}
	a, err := r.review(ctx, token)
	if err != nil && !errors.Is(err, ErrUnauthenticated) {
		return Access{}, err // the apiserver failed: do not remember it
	}
	r.mu.Lock()
	if len(r.cache) > 10000 {
		clear(r.cache)
	}
	r.cache[k] = cached{access: a, err: err, expires: now.Add(r.cfg.CacheTTL)}
	r.mu.Unlock()
	return a, err
}

func (r *KubeReviewer) review(ctx context.Context, token string) (Access, error) {
	tr := authnv1.TokenReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.cfg.Audiences}}
	if err := r.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", &tr); err != nil {
		return Access{}, err
	}
	if !tr.Status.Authenticated {
		return Access{}, ErrUnauthenticated
	}
	u := tr.Status.User
	a := Access{User: u.Username}
	all, err := r.allowed(ctx, u, "")
	if err != nil {
		return Access{}, err
	}
	if all {
		a.All = true
		return a, nil
	}
	names, err := r.cfg.Clusters(ctx)
	if err != nil {
		return Access{}, fmt.Errorf("kube auth: listing the clusters: %w", err)
	}
	for _, n := range names {
		ok, err := r.allowed(ctx, u, n)
		if err != nil {
			return Access{}, err
		}
		if ok {
			a.Clusters = append(a.Clusters, n)
		}
	}
	return a, nil
}

// allowed asks whether u may get the auditlens cluster name ("" for every
// cluster).
func (r *KubeReviewer) allowed(ctx context.Context, u authnv1.UserInfo, name string) (bool, error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := authzv1.SubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authzv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{Group: KubeGroup, Resource: KubeResource, Verb: KubeVerb, Name: name}}}
	if err := r.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed && !sar.Status.Denied, nil
}

// post creates a review and decodes the answer into v.
func (r *KubeReviewer) post(ctx context.Context, path string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(r.cfg.Server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "auditlens-kubeauth")
	tok := r.cfg.Token
	if r.cfg.TokenFile != "" {
		if b, err := os.ReadFile(r.cfg.TokenFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			tok = string(bytes.TrimSpace(b))
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("kube auth: %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("kube auth: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube auth: %s: %s: %.300s", path, resp.Status, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("kube auth: decoding %s: %w", path, err)
	}
	return nil
}

// kubeconfig is the part of a kubeconfig file this package reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server     string `json:"server"`
			CA         string `json:"certificate-authority"`
			CAData     []byte `json:"certificate-authority-data"`
			SkipVerify bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token      string `json:"token"`
			TokenFile  string `json:"tokenFile"`
			Cert       string `json:"client-certificate"`
			CertData   []byte `json:"client-certificate-data"`
			Key        string `json:"client-key"`
			KeyData    []byte `json:"client-key-data"`
			Exec       any    `json:"exec"`
			AuthPlugin any    `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
}

// LoadKubeconfig reads the server and credentials of a kubeconfig file's
// current context (its first when none is current). Relative file paths
// are relative to the file, as kubectl reads them.
func LoadKubeconfig(path string) (KubeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return KubeConfig{}, fmt.Errorf("kube auth: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return KubeConfig{}, fmt.Errorf("kube auth: %s: %w", path, err)
	}
	if len(kc.Contexts) == 0 {
		return KubeConfig{}, fmt.Errorf("kube auth: %s has no context", path)
	}
	ctxIdx := 0
	for i, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			ctxIdx = i
		}
	}
	want := kc.Contexts[ctxIdx].Context
	dir := filepath.Dir(path)
	read := func(p string) ([]byte, error) {
		if p == "" {
			return nil, nil
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return os.ReadFile(p)
	}
	var cfg KubeConfig
	found := false
	for _, c := range kc.Clusters {
		if c.Name != want.Cluster {
			continue
		}
		found = true
		if c.Cluster.SkipVerify {
			return KubeConfig{}, fmt.Errorf("kube auth: %s: insecure-skip-tls-verify would send tokens to anyone: give the apiserver's CA", path)
		}
		cfg.Server, cfg.CA = c.Cluster.Server, c.Cluster.CAData
		if len(cfg.CA) == 0 {
			if cfg.CA, err = read(c.Cluster.CA); err != nil {
				return KubeConfig{}, fmt.Errorf("kube auth: %w", err)
			}
		}
	}
	if !found {
		return KubeConfig{}, fmt.Errorf("kube auth: %s: no cluster %q", path, want.Cluster)
	}
	found = false
	for _, u := range kc.Users {
		if u.Name != want.User {
			continue
		}
		found = true
		if u.User.Exec != nil || u.User.AuthPlugin != nil {
			return KubeConfig{}, fmt.Errorf("kube auth: %s: user %q authenticates with a plugin; give a token or a client certificate", path, u.Name)
		}
		cfg.Token = u.User.Token
		if cfg.Token == "" && u.User.TokenFile != "" {
			b, err := read(u.User.TokenFile)
			if err != nil {
				return KubeConfig{}, fmt.Errorf("kube auth: %w", err)
			}
			cfg.Token = strings.TrimSpace(string(b))
			cfg.TokenFile = u.User.TokenFile
			if !filepath.IsAbs(cfg.TokenFile) {
				cfg.TokenFile = filepath.Join(dir, cfg.TokenFile)
			}
		}
		cfg.ClientCert, cfg.ClientKey = u.User.CertData, u.User.KeyData
		if len(cfg.ClientCert) == 0 {
			if cfg.ClientCert, err = read(u.User.Cert); err != nil {
				return KubeConfig{}, fmt.Errorf("kube auth: %w", err)
			}
		}
		if len(cfg.ClientKey) == 0 {
			if cfg.ClientKey, err = read(u.User.Key); err != nil {
				return KubeConfig{}, fmt.Errorf("kube auth: %w", err)
			}
		}
	}
	if !found {
		return KubeConfig{}, fmt.Errorf("kube auth: %s: no user %q", path, want.User)
	}
	return cfg, nil
}

// KubeInCluster reads the pod's own service account: the apiserver from
// KUBERNETES_SERVICE_HOST and _PORT, its CA and the token from the
// mounted service-account volume.
func KubeInCluster() (KubeConfig, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return KubeConfig{}, errors.New("kube auth: in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod?)")
	}
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	tok, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return KubeConfig{}, fmt.Errorf("kube auth: in-cluster: %w (automountServiceAccountToken off?)", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return KubeConfig{}, fmt.Errorf("kube auth: in-cluster: %w", err)
	}
	// The kubelet rotates the token in the file: read it at every review.
	return KubeConfig{Server: "https://" + net.JoinHostPort(strings.Trim(host, "[]"), port), CA: ca,
		Token: strings.TrimSpace(string(tok)), TokenFile: filepath.Join(dir, "token")}, nil
}
