package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// testdata/webhook-config holds a throwaway CA certificate (its key was
// discarded), a client certificate it signed with its key, another key
// that matches nothing, and a file that is not PEM.
const wcDir = "testdata/webhook-config"

// -update rewrites the golden files; declared here only if no other test
// file in the package declares it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/*.golden")
	}
}

func wcUpdateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// kubeconfigDoc is the part of a kubeconfig kube-apiserver reads for its
// audit webhook (client-go's clientcmd v1.Config field names).
type kubeconfigDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Clusters   []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         []byte `json:"client-key-data"`
			Token                 string `json:"token"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

func parseKubeconfig(t *testing.T, s string) kubeconfigDoc {
	t.Helper()
	var d kubeconfigDoc
	if err := yaml.UnmarshalStrict([]byte(s), &d); err != nil {
		t.Fatalf("output is not a kubeconfig: %v\n%s", err, s)
	}
	if d.APIVersion != "v1" || d.Kind != "Config" || len(d.Clusters) != 1 || len(d.Users) != 1 || len(d.Contexts) != 1 ||
		d.CurrentContext != d.Contexts[0].Name || d.Contexts[0].Context.Cluster != d.Clusters[0].Name ||
		d.Contexts[0].Context.User != d.Users[0].Name {
		t.Fatalf("kubeconfig does not tie one cluster, user and context together:\n%s", s)
	}
	return d
}

func runWC(args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = runWebhookConfig(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestWebhookConfig(t *testing.T) {
	absDir, err := filepath.Abs(wcDir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(wcDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, cert, key := read("ca.crt"), read("client.crt"), read("client.key")
	f := func(name string) string { return filepath.Join(wcDir, name) }

	tests := []struct {
		name   string
		args   []string
		golden string // testdata/<golden>.golden, when set
		check  func(t *testing.T, d kubeconfigDoc)
		warn   string // in stderr
	}{
		{
			name:   "client certificate embedded",
			args:   []string{"--url", "https://auditlens.auditlens.svc:8443", "--cluster", "prod-eu", "--ca", f("ca.crt"), "--client-cert", f("client.crt"), "--client-key", f("client.key")},
			golden: "webhook-config-mtls",
			check: func(t *testing.T, d kubeconfigDoc) {
				c, u := d.Clusters[0].Cluster, d.Users[0].User
				if c.Server != "https://auditlens.auditlens.svc:8443/audit/prod-eu" {
					t.Errorf("server %q", c.Server)
				}
				if !bytes.Equal(c.CertificateAuthorityData, ca) || !bytes.Equal(u.ClientCertificateData, cert) || !bytes.Equal(u.ClientKeyData, key) {
					t.Error("embedded data differs from the files")
				}
				if c.CertificateAuthority != "" || u.ClientCertificate != "" || u.ClientKey != "" || u.Token != "" {
					t.Errorf("paths or token set with embedded data: %+v %+v", c, u)
				}
			},
		},
		{
			name:   "token",
			args:   []string{"--url", "https://10.0.0.7:8443/", "--cluster", "prod", "--ca", f("ca.crt"), "--token", "s3cr3t-token"},
			golden: "webhook-config-token",
			check: func(t *testing.T, d kubeconfigDoc) {
				c, u := d.Clusters[0].Cluster, d.Users[0].User
				if c.Server != "https://10.0.0.7:8443/audit/prod" || u.Token != "s3cr3t-token" || !bytes.Equal(c.CertificateAuthorityData, ca) {
					t.Errorf("got %+v %+v", c, u)
				}
			},
		},
		{
			name:   "paths instead of data",
			args:   []string{"--url", "https://auditlens.example.com/ingest/", "--cluster", "staging", "--ca", f("ca.crt"), "--client-cert", f("client.crt"), "--client-key", f("client.key"), "--embed=false"},
			golden: "webhook-config-paths",
			check: func(t *testing.T, d kubeconfigDoc) {
				c, u := d.Clusters[0].Cluster, d.Users[0].User
				if c.Server != "https://auditlens.example.com/ingest/audit/staging" {
					t.Errorf("server %q", c.Server)
				}
				if c.CertificateAuthority != filepath.Join(absDir, "ca.crt") || u.ClientCertificate != filepath.Join(absDir, "client.crt") ||
					u.ClientKey != filepath.Join(absDir, "client.key") || len(c.CertificateAuthorityData)+len(u.ClientCertificateData)+len(u.ClientKeyData) > 0 {
					t.Errorf("want absolute paths and no data: %+v %+v", c, u)
				}
			},
		},
		{
			name: "URL already ending in /audit",
			args: []string{"--url", "https://h:1/audit", "--cluster", "c1", "--ca", f("ca.crt")},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "https://h:1/audit/c1" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "URL already ending in /audit/NAME",
			args: []string{"--url", "https://h:1/audit/c1/", "--cluster", "c1", "--ca", f("ca.crt")},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "https://h:1/audit/c1" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "one apiserver of an HA control plane",
			args: []string{"--url", "https://h:1", "--cluster", "prod", "--apiserver", "master-2", "--ca", f("ca.crt"), "--token", "tok-2"},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "https://h:1/audit/prod/master-2" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "URL ending in /audit/NAME, apiserver appended",
			args: []string{"--url", "https://h:1/audit/prod", "--cluster", "prod", "--apiserver", "master-2", "--ca", f("ca.crt")},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "https://h:1/audit/prod/master-2" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "URL already ending in /audit/NAME/APISERVER",
			args: []string{"--url", "https://h:1/x/audit/prod/master-2/", "--cluster", "prod", "--apiserver", "master-2", "--ca", f("ca.crt")},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "https://h:1/x/audit/prod/master-2" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "http without credentials",
			args: []string{"--url", "http://127.0.0.1:8080", "--cluster", "dev"},
			check: func(t *testing.T, d kubeconfigDoc) {
				if s := d.Clusters[0].Cluster.Server; s != "http://127.0.0.1:8080/audit/dev" {
					t.Errorf("server %q", s)
				}
			},
		},
		{
			name: "token over http warns",
			args: []string{"--url", "http://127.0.0.1:8080", "--cluster", "dev", "--token", "true"},
			check: func(t *testing.T, d kubeconfigDoc) {
				if tok := d.Users[0].User.Token; tok != "true" { // quoted, not a YAML boolean
					t.Errorf("token %q", tok)
				}
			},
			warn: "clear text",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runWC(tc.args...)
			if err != nil {
				t.Fatalf("webhook-config %s: %v", strings.Join(tc.args, " "), err)
			}
			if tc.warn == "" && stderr != "" || !strings.Contains(stderr, tc.warn) {
				t.Errorf("stderr %q, want %q", stderr, tc.warn)
			}
			tc.check(t, parseKubeconfig(t, out))
			if tc.golden != "" {
				// Paths are machine-specific: the golden file holds TESTDATA.
				wcCheckGolden(t, tc.golden, strings.ReplaceAll(out, absDir, "TESTDATA"))
			}
		})
	}
}

func TestWebhookConfigErrors(t *testing.T) {
	f := func(name string) string { return filepath.Join(wcDir, name) }
	https := []string{"--url", "https://auditlens:8443", "--cluster", "prod"}
	withCA := []string{"--url", "https://auditlens:8443", "--cluster", "prod", "--ca", f("ca.crt")}
	// args copies base before appending: the cases must not share arrays.
	args := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	tests := []struct {
		name  string
		args  []string
		usage bool   // errUsage, exit code 2
		want  string // in the message
	}{
		{"no url", []string{"--cluster", "prod"}, true, "--url is required"},
		{"no cluster", []string{"--url", "https://a"}, true, "--cluster is required"},
		{"bad cluster", []string{"--url", "https://a", "--cluster", "a/b"}, true, "1-63 letters"},
		{"scheme", []string{"--url", "ftp://a", "--cluster", "c"}, true, "http:// or https://"},
		{"no scheme", []string{"--url", "auditlens:8443", "--cluster", "c"}, true, "http:// or https://"},
		{"no host", []string{"--url", "https:///x", "--cluster", "c"}, true, "names no host"},
		{"query", []string{"--url", "https://a/?x=1", "--cluster", "c"}, true, "without user, query or fragment"},
		{"other cluster in url", []string{"--url", "https://a/audit/dev", "--cluster", "prod", "--ca", f("ca.crt")}, true, `names cluster "dev"`},
		{"https without ca", https, true, "--ca is required"},
		{"bad apiserver", args(withCA, "--apiserver", "a/b"), true, "--apiserver \"a/b\" must be 1-63 letters"},
		{"other apiserver in url", []string{"--url", "https://a/audit/prod/master-1", "--cluster", "prod", "--apiserver", "master-2", "--ca", f("ca.crt")}, true, `names apiserver "master-1"`},
		{"apiserver in url only", []string{"--url", "https://a/audit/prod/master-1", "--cluster", "prod", "--ca", f("ca.crt")}, true, `names apiserver "master-1" but --apiserver is ""`},
		{"other cluster before apiserver", []string{"--url", "https://a/audit/dev/master-1", "--cluster", "prod", "--apiserver", "master-1", "--ca", f("ca.crt")}, true, `names cluster "dev"`},
		{"ca with http", []string{"--url", "http://a", "--cluster", "c", "--ca", f("ca.crt")}, true, "--ca needs an https URL"},
		{"cert with http", []string{"--url", "http://a", "--cluster", "c", "--client-cert", f("client.crt"), "--client-key", f("client.key")}, true, "--client-cert needs an https URL"},
		{"cert without key", args(withCA, "--client-cert", f("client.crt")), true, "go together"},
		{"key without cert", args(withCA, "--client-key", f("client.key")), true, "go together"},
		{"cert and token", args(withCA, "--client-cert", f("client.crt"), "--client-key", f("client.key"), "--token", "t"), true, "not both"},
		{"token with space", args(withCA, "--token", "a b"), true, "whitespace"},
		{"extra argument", args(withCA, "extra"), true, "unexpected arguments"},
		{"unknown flag", args(withCA, "--nope"), true, "not defined"},
		{"ca missing", args(https, "--ca", f("missing.crt")), false, "reading --ca"},
		{"ca not pem", args(https, "--ca", f("not-pem.txt")), false, "holds no PEM certificate"},
		{"ca is a key", args(https, "--ca", f("client.key")), false, `"PRIVATE KEY" block, want CERTIFICATE`},
		{"cert not pem", args(withCA, "--client-cert", f("not-pem.txt"), "--client-key", f("client.key")), false, "--client-cert"},
		{"key missing", args(withCA, "--client-cert", f("client.crt"), "--client-key", f("missing.key")), false, "reading --client-key"},
		{"key mismatch", args(withCA, "--client-cert", f("client.crt"), "--client-key", f("other.key")), false, "does not match"},
		{"key not pem", args(withCA, "--client-cert", f("client.crt"), "--client-key", f("not-pem.txt")), false, "--client-key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runWC(tc.args...)
			if err == nil {
				t.Fatalf("webhook-config %s: no error, printed\n%s", strings.Join(tc.args, " "), out)
			}
			if errors.Is(err, errUsage) != tc.usage {
				t.Errorf("errors.Is(err, errUsage) = %v, want %v: %v", !tc.usage, tc.usage, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("printed %q on error", out)
			}
		})
	}
}

// TestWebhookConfigCommand runs the command through main's table, as a
// user would, and checks the exit codes.
func TestWebhookConfigCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"webhook-config", "--url", "http://127.0.0.1:8080", "--cluster", "dev"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "server: http://127.0.0.1:8080/audit/dev\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"webhook-config", "--url", "https://a", "--cluster", "dev"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--ca is required") {
		t.Errorf("without --ca: exit %d, stderr %q; want 2 and a message", code, errb.String())
	}
}

// TestServeKubeconfig pins the example kubeconfig serve prints (README,
// "Point a kube-apiserver at it") now that it shares the renderer.
func TestServeKubeconfig(t *testing.T) {
	var all strings.Builder
	for _, url := range []string{"http://127.0.0.1:8080/audit/my-cluster", "https://[::1]:8443/audit/my-cluster"} {
		for _, cc := range []bool{false, true} {
			for _, tok := range []bool{false, true} {
				s := webhookKubeconfig(url, cc, tok)
				parseKubeconfig(t, s)
				all.WriteString("# " + url + map[bool]string{true: " client-cert", false: ""}[cc] + map[bool]string{true: " token", false: ""}[tok] + "\n")
				all.WriteString(s)
			}
		}
	}
	wcCheckGolden(t, "serve-kubeconfig", all.String())
}

func TestYAMLString(t *testing.T) {
	for _, s := range []string{"plain", "/etc/x.crt", "https://[::1]:1/audit/x", "true", "No", "null", "123", "a: b", "a #b", "#x",
		"x:", "-x", "'q'", `"dq"`, "tab\there", "new\nline", "ünï", "", "*ref", "&anchor", "!tag", "{a}", "[a]", "%x", "@x", "`x"} {
		var got struct {
			V *string `json:"v"`
		}
		doc := "v: " + yamlString(s) + "\n"
		if err := yaml.Unmarshal([]byte(doc), &got); err != nil || got.V == nil || *got.V != s {
			t.Errorf("yamlString(%q) = %s, reads back as %v (%v)", s, yamlString(s), got.V, err)
		}
	}
	if b := base64.StdEncoding.EncodeToString([]byte("-----BEGIN")); yamlString(b) != b {
		t.Errorf("base64 %q is quoted", b)
	}
}

func wcCheckGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if wcUpdateGolden() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
