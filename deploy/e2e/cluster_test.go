package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	// sourceIP is the loopback address the actor connects from, so that
	// the audit log's sourceIPs tell programs apart as a real cluster's do
	// (kube-controller-manager on a master, kube-proxy on a node).
	sourceIP string
}

// The cluster's actors. The user agents are those of the incident's
// Kubernetes 1.9.2, which is what a watch-loop finding names.
var (
	adminID = identity{token: "admin-token", user: "admin", uid: "uid-admin",
		groups: []string{"system:masters"}, userAgent: "e2e-admin", sourceIP: "127.0.0.1"}
	kcmID = identity{token: "kcm-token", user: "system:kube-controller-manager", uid: "uid-kcm",
		groups: []string{"system:masters"}, userAgent: "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/5fa2db2/shared-informers",
		sourceIP: "127.0.0.2"}
	endpointsID = identity{token: "endpoints-token", user: "system:serviceaccount:kube-system:endpoint-controller", uid: "uid-endpoints",
		groups:    []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:masters"},
		userAgent: "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/5fa2db2/system:serviceaccount:kube-system:endpoint-controller",
		sourceIP:  "127.0.0.2"}
	proxyID = identity{token: "proxy-token", user: "system:kube-proxy", uid: "uid-proxy",
		groups: []string{"system:masters"}, userAgent: "kube-proxy/v1.9.2 (linux/amd64) kubernetes/5fa2db2", sourceIP: "127.0.0.3"}
	aliceID = identity{token: "alice-token", user: "alice", uid: "uid-alice",
		groups: []string{"system:masters"}, userAgent: "kubectl/v1.9.2 (linux/amd64) kubernetes/5fa2db2", sourceIP: "127.0.0.4"}
	writerID = identity{token: "writer-token", user: "system:serviceaccount:apps:config-writer", uid: "uid-writer",
		groups: []string{"system:serviceaccounts", "system:masters"}, userAgent: "config-writer/1.4 (linux/amd64)", sourceIP: "127.0.0.5"}
	reloaderID = identity{token: "reloader-token", user: "system:serviceaccount:apps:config-reloader", uid: "uid-reloader",
		groups: []string{"system:serviceaccounts", "system:masters"}, userAgent: "config-reloader/0.9 (linux/amd64)", sourceIP: "127.0.0.6"}
)

// nodeIDs are the kubelets of the fake Nodes of the real-controllers
// scenario: they only renew their Leases.
var nodeIDs = func() []identity {
	var out []identity
	for i := 1; i <= 3; i++ {
		out = append(out, identity{token: fmt.Sprintf("node-%d-token", i), user: fmt.Sprintf("system:node:node-%d", i),
			uid: fmt.Sprintf("uid-node-%d", i), groups: []string{"system:nodes", "system:masters"},
			userAgent: "kubelet/v1.37.2 (linux/amd64) kubernetes/unknown", sourceIP: fmt.Sprintf("127.0.1.%d", i)})
	}
	return out
}()

// Readers of auditlens's read API, checked by TokenReview and
// SubjectAccessReview (TestKubeAuth): not in system:masters, so RBAC
// decides what they may read.
var (
	readerID   = identity{token: "reader-token", user: "auditlens-reader", uid: "uid-reader", groups: []string{"auditlens-readers"}}
	outsiderID = identity{token: "outsider-token", user: "outsider", uid: "uid-outsider", groups: []string{"outsiders"}}
)

var identities = slices.Concat([]identity{adminID, kcmID, endpointsID, proxyID, aliceID, writerID, reloaderID}, nodeIDs,
	kubeletIDs, []identity{schedulerID, loadID, readerID, outsiderID})

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
	caPath    string // the CA of the apiserver's serving certificate
	ca        *testCA
	saKeyPath string // the service account signing key
	apiserver *proc
	etcd      *proc
	tls       *tls.Config
	// apiserverArgs are the apiserver's flags but auditing's and
	// --secure-port: what another apiserver of the same control plane
	// (ha_test.go) starts with.
	apiserverArgs []string
}

// auditPolicy is the policy shipped in deploy/audit-policy.yaml: testing it
// against a real apiserver is part of the point.
const auditPolicy = "../audit-policy.yaml"

// startCluster starts etcd and kube-apiserver in dir, the apiserver sending
// its audit events to s under /audit/<name> (unless s is the zero sink) and
// to dir/audit.log.
//
// prelude, when not nil, first runs against an apiserver without auditing
// on the same etcd: objects it creates predate the audit log, as the
// months-old Services of the incident did.
func startCluster(t *testing.T, ca *testCA, dir, name string, s sink, prelude func(c *cluster)) *cluster {
	t.Helper()
	return startClusterWith(t, ca, dir, name, s, prelude)
}

// startClusterWith is startCluster with extra kube-apiserver flags.
func startClusterWith(t *testing.T, ca *testCA, dir, name string, s sink, prelude func(c *cluster), extra ...string) *cluster {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{name: name, dir: dir, auditLog: filepath.Join(dir, "audit.log"), caPath: ca.pemPath, ca: ca, tls: ca.tlsConfig(t, "", "")}

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
	c.saKeyPath = saKey
	servingCert, servingKey := ca.issue(t, dir, "apiserver", "kube-apiserver", true)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--tls-cert-file=" + servingCert, "--tls-private-key-file=" + servingKey,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		// The reconciler of the "kubernetes" Service's Endpoints would
		// write a loopback address, which Endpoints validation refuses, and
		// retry every 10 s: noise in the audit log, not cluster behaviour.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	// --authorization-mode is a list flag, so a mode given in extra
	// replaces the default rather than adding to it.
	if slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--authorization-mode=") }) {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--authorization-mode=RBAC" })
	}
	args = append(args, extra...)

	if prelude != nil {
		c.apiserver = c.startAPIServer(t, "kube-apiserver-prelude", args)
		prelude(c)
		if err := c.apiserver.stop(60 * time.Second); err != nil {
			t.Fatalf("stopping the prelude's kube-apiserver: %v", err)
		}
	}

	c.apiserverArgs = slices.Clone(args)
	c.apiserver = c.startAPIServer(t, "kube-apiserver", append(args, auditFlags(t, dir, c.auditLog, name, s)...))
	return c
}

// auditFlags are the flags of an apiserver that writes its audit events to
// auditLog and sends them to s (unless s is the zero sink) as cluster
// name, the webhook's kubeconfig written in dir.
func auditFlags(t *testing.T, dir, auditLog, name string, s sink) []string {
	t.Helper()
	policy, err := filepath.Abs(auditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + auditLog,
		"--audit-log-maxsize=0"}
	if s.base != "" {
		webhookConfig := writeFile(t, dir, "webhook.kubeconfig", webhookKubeconfig(t, s, name))
		args = append(args,
			"--audit-webhook-config-file="+webhookConfig,
			"--audit-webhook-batch-max-wait=1s")
	}
	return args
}

// startAPIServer starts kube-apiserver on a free port and waits until it
// is ready and has created namespace default.
func (c *cluster) startAPIServer(t *testing.T, name string, args []string) *proc {
	t.Helper()
	port := freePort(t)
	c.base = fmt.Sprintf("https://127.0.0.1:%d", port)
	p := startProc(t, c.dir, name, kubeAPIServerBin, append(args, fmt.Sprintf("--secure-port=%d", port))...)
	start := time.Now()
	admin := c.actor(adminID)
	if !poll(120*time.Second, 250*time.Millisecond, func() bool {
		if p.exited() {
			return true
		}
		code, body, err := admin.raw("GET", "/readyz", nil)
		return err == nil && code == 200 && strings.TrimSpace(string(body)) == "ok"
	}) || p.exited() {
		t.Fatalf("%s did not become ready on %s:\n%s", name, c.base, p.logTail(40))
	}
	// The default namespace is created by a controller inside the
	// apiserver, shortly after readiness.
	if !poll(60*time.Second, 250*time.Millisecond, func() bool {
		code, _, err := admin.raw("GET", "/api/v1/namespaces/default", nil)
		return err == nil && code == 200
	}) {
		t.Fatalf("namespace default did not appear")
	}
	t.Logf("%s %s ready on %s in %s", name, versions["KUBERNETES_VERSION"], c.base, time.Since(start).Round(100*time.Millisecond))
	return p
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
// cluster in the URL path: what `auditlens webhook-config` prints, so that
// the real apiserver reading it tests the command. Client certificates are
// embedded (the default); the token receiver's CA is referenced by path
// (--embed=false), so both forms are read by a real apiserver.
func webhookKubeconfig(t *testing.T, s sink, cluster string) []byte {
	t.Helper()
	args := []string{"webhook-config", "--url", s.base, "--cluster", cluster, "--ca", s.caPath}
	if s.certPath != "" {
		args = append(args, "--client-cert", s.certPath, "--client-key", s.keyPath)
	} else {
		args = append(args, "--token", s.token, "--embed=false")
	}
	out, err := runCapture(exec.Command(auditlensBin, args...))
	if err != nil {
		t.Fatalf("auditlens webhook-config: %v", err)
	}
	return []byte(out)
}

var listeningRE = regexp.MustCompile(`is listening on (https?://[0-9.:]+)`)
