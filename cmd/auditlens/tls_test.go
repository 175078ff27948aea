package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM certificate and key for cn, for a server (with the
// loopback IP) or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool) ([]byte, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeTLSClientCertAndTokens checks the receiver's two ways of knowing
// its sender: a client certificate (mTLS) and a bearer token mapped to a
// cluster name.
func TestServeTLSClientCertAndTokens(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "auditlens-test-ca")
	srvCert, srvKey := ca.issue(t, "auditlens", true)
	cliCert, cliKey := ca.issue(t, "kube-apiserver", false)
	other := newCA(t, "someone-else")
	badCert, badKey := other.issue(t, "intruder", false)

	s := startServe(t, "--data", filepath.Join(dir, "data"), "--batch-wait", "50ms",
		"--tls-cert", write(t, dir, "srv.crt", srvCert), "--tls-key", write(t, dir, "srv.key", srvKey),
		"--client-ca", write(t, dir, "ca.crt", ca.pem),
		"--webhook-token", "s3cret=prod")
	if !strings.HasPrefix(s.base, "https://") {
		t.Fatalf("serve with --tls-cert listens on %s", s.base)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	client := func(certPEM, keyPEM []byte) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if certPEM != nil {
			c, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
	}
	post := func(c *http.Client, path, token string) (int, error) {
		req, _ := http.NewRequest("POST", s.base+path, strings.NewReader(list("audit.k8s.io/v1", event("tls1", "ResponseComplete", "2026-11-29T12:00:00Z", ""))))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	good := client(cliCert, cliKey)
	if _, err := post(client(nil, nil), "/audit/prod", "s3cret"); err == nil {
		t.Error("a client without a certificate got through")
	}
	if _, err := post(client(badCert, badKey), "/audit/prod", "s3cret"); err == nil {
		t.Error("a client certificate from another CA got through")
	}
	for _, tc := range []struct {
		path, token string
		code        int
	}{
		{"/audit/prod", "", http.StatusUnauthorized},
		{"/audit/prod", "wrong", http.StatusUnauthorized},
		{"/audit/staging", "s3cret", http.StatusForbidden},
		{"/audit", "s3cret", http.StatusOK},
		{"/audit/prod", "s3cret", http.StatusOK},
	} {
		code, err := post(good, tc.path, tc.token)
		if err != nil || code != tc.code {
			t.Errorf("POST %s token %q: %d %v, want %d", tc.path, tc.token, code, err, tc.code)
		}
	}
	// Read the stored event back over the same TLS listener.
	resp, err := good.Get(s.base + "/api/v1/events?cluster=prod&jq=.auditID")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("query over TLS: %d", resp.StatusCode)
	}
	s.stop()
}
