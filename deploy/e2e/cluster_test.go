package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// identity is a user the apiserver knows from its static token file. All
// test identities are in system:masters: the scenarios are about what the
// audit log shows, not about RBAC.
type identity struct {
	token, user, uid string
	groups           []string
	userAgent        string
}

// The cluster's actors. The user agents are those of the incident's
// Kubernetes 1.9.2, which is what a watch-loop finding names.
var (
	adminID = identity{token: "admin-token", user: "admin", uid: "uid-admin",
		groups: []string{"system:masters"}, userAgent: "e2e-admin"}
	kcmID = identity{token: "kcm-token", user: "system:kube-controller-manager", uid: "uid-kcm",
		groups: []string{"system:masters"}, userAgent: "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/5fa2db2/shared-informers"}
	endpointsID = identity{token: "endpoints-token", user: "system:serviceaccount:kube-system:endpoint-controller", uid: "uid-endpoints",
		groups:    []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:masters"},
		userAgent: "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/5fa2db2/system:serviceaccount:kube-system:endpoint-controller"}
	proxyID = identity{token: "proxy-token", user: "system:kube-proxy", uid: "uid-proxy",
		groups: []string{"system:masters"}, userAgent: "kube-proxy/v1.9.2 (linux/amd64) kubernetes/5fa2db2"}
	aliceID = identity{token: "alice-token", user: "alice", uid: "uid-alice",
		groups: []string{"system:masters"}, userAgent: "kubectl/v1.9.2 (linux/amd64) kubernetes/5fa2db2"}
	writerID = identity{token: "writer-token", user: "system:serviceaccount:apps:config-writer", uid: "uid-writer",
		groups: []string{"system:serviceaccounts", "system:masters"}, userAgent: "config-writer/1.4 (linux/amd64)"}
	reloaderID = identity{token: "reloader-token", user: "system:serviceaccount:apps:config-reloader", uid: "uid-reloader",
		groups: []string{"system:serviceaccounts", "system:masters"}, userAgent: "config-reloader/0.9 (linux/amd64)"}
)

var identities = []identity{adminID, kcmID, endpointsID, proxyID, aliceID, writerID, reloaderID}

// sink is where an apiserver's audit webhook sends: an auditlens serve and
// the credentials the apiserver presents to it.
type sink struct {
	base     string // https://127.0.0.1:port
	caPath   string
	certPath string // client certificate (mTLS), or
	keyPath  string
	token    string // bearer token
}

// cluster is one etcd and one kube-apiserver.
type cluster struct {
	name      string // the auditlens cluster name, also the URL path element
	dir       string
	base      string // https://127.0.0.1:port of the apiserver
	auditLog  string
	apiserver *proc
	etcd      *proc
	tls       *tls.Config
}

// auditPolicy is the policy shipped in deploy/audit-policy.yaml: testing it
// against a real apiserver is part of the point.
const auditPolicy = "../audit-policy.yaml"

// startCluster starts etcd and kube-apiserver in dir, the apiserver sending
// its audit events to s under /audit/<name> and to dir/audit.log.
func startCluster(t *testing.T, ca *testCA, dir, name string, s sink) *cluster {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{name: name, dir: dir, auditLog: filepath.Join(dir, "audit.log"), tls: ca.tlsConfig(t, "", "")}

	clientPort, peerPort := freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.etcd = startProc(t, dir, "etcd", etcdBin,
		"--name", "e2e", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--log-level", "warn", "--unsafe-no-fsync")
	if !poll(30*time.Second, 100*time.Millisecond, func() bool {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `"health":"true"`)
	}) {
		t.Fatalf("etcd did not become healthy on %s:\n%s", etcdURL, c.etcd.logTail(30))
	}

	var tokens strings.Builder
	for _, id := range identities {
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", id.token, id.user, id.uid, strings.Join(id.groups, ","))
	}
	tokenFile := writeFile(t, dir, "tokens.csv", []byte(tokens.String()))
	saPub, saKey := serviceAccountKeys(t, dir)
	servingCert, servingKey := ca.issue(t, dir, "apiserver", "kube-apiserver", true)
	webhookConfig := writeFile(t, dir, "webhook.kubeconfig", []byte(webhookKubeconfig(s, name)))
	policy, err := filepath.Abs(auditPolicy)
	if err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	c.base = fmt.Sprintf("https://127.0.0.1:%d", port)
	c.apiserver = startProc(t, dir, "kube-apiserver", kubeAPIServerBin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+servingCert, "--tls-private-key-file="+servingKey,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		// The reconciler of the "kubernetes" Service's Endpoints would
		// write a loopback address, which Endpoints validation refuses, and
		// retry every 10 s: noise in the audit log, not cluster behaviour.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--audit-policy-file="+policy,
		"--audit-log-path="+c.auditLog,
		"--audit-log-maxsize=0",
		"--audit-webhook-config-file="+webhookConfig,
		"--audit-webhook-batch-max-wait=1s",
	)
	start := time.Now()
	admin := c.actor(adminID)
	if !poll(120*time.Second, 250*time.Millisecond, func() bool {
		if c.apiserver.exited() {
			return true
		}
		code, body, err := admin.raw("GET", "/readyz", nil)
		return err == nil && code == 200 && strings.TrimSpace(string(body)) == "ok"
	}) || c.apiserver.exited() {
		t.Fatalf("kube-apiserver did not become ready on %s:\n%s", c.base, c.apiserver.logTail(40))
	}
	// The default namespace is created by a controller inside the
	// apiserver, shortly after readiness.
	if !poll(60*time.Second, 250*time.Millisecond, func() bool {
		code, _, err := admin.raw("GET", "/api/v1/namespaces/default", nil)
		return err == nil && code == 200
	}) {
		t.Fatalf("namespace default did not appear")
	}
	t.Logf("kube-apiserver %s ready on %s in %s", versions["KUBERNETES_VERSION"], c.base, time.Since(start).Round(100*time.Millisecond))
	return c
}

// stop stops the apiserver, which flushes its audit webhook, then etcd.
func (c *cluster) stop(t *testing.T) {
	t.Helper()
	if err := c.apiserver.stop(90 * time.Second); err != nil {
		t.Errorf("kube-apiserver: %v\n%s", err, c.apiserver.logTail(30))
	}
	if err := c.etcd.stop(30 * time.Second); err != nil {
		t.Errorf("etcd: %v", err)
	}
}

// webhookKubeconfig is the --audit-webhook-config-file for s, naming the
// cluster in the URL path.
func webhookKubeconfig(s sink, cluster string) string {
	user := ""
	if s.certPath != "" {
		user += fmt.Sprintf("\n    client-certificate: %s\n    client-key: %s", s.certPath, s.keyPath)
	}
	if s.token != "" {
		user += fmt.Sprintf("\n    token: %s", s.token)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: auditlens
  cluster:
    server: %s/audit/%s
    certificate-authority: %s
users:
- name: kube-apiserver
  user:%s
contexts:
- name: auditlens
  context:
    cluster: auditlens
    user: kube-apiserver
current-context: auditlens
`, s.base, cluster, s.caPath, user)
}

var listeningRE = regexp.MustCompile(`is listening on (https?://[0-9.:]+)`)
