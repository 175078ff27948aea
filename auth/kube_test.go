package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.crt", "CA PEM")
	write("token", "  the-token\n")
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: b\ncontexts:\n- name: a\n  context: {cluster: one, user: u1}\n- name: b\n  context: {cluster: two, user: u2}\n"
	good := write("good", head+`clusters:
- name: one
  cluster: {server: "https://one:6443"}
- name: two
  cluster: {server: "https://two:6443", certificate-authority: ca.crt}
users:
- name: u1
  user: {token: wrong}
- name: u2
  user: {tokenFile: token}
`)
	cfg, err := LoadKubeconfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://two:6443" || string(cfg.CA) != "CA PEM" || cfg.Token != "the-token" || cfg.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("current context b: %+v", cfg)
	}
	for name, body := range map[string]string{
		"insecure-skip-tls-verify": head + "clusters:\n- name: two\n  cluster: {server: \"https://two\", insecure-skip-tls-verify: true}\nusers:\n- name: u2\n  user: {token: t}\n",
		"an exec plugin":           head + "clusters:\n- name: two\n  cluster: {server: \"https://two\"}\nusers:\n- name: u2\n  user: {exec: {command: aws}}\n",
		"no such user":             head + "clusters:\n- name: two\n  cluster: {server: \"https://two\"}\nusers: []\n",
	} {
		if _, err := LoadKubeconfig(write(strings.ReplaceAll(name, " ", "-"), body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for name, cfg := range map[string]KubeConfig{
		"plain http":     {Server: "http://x:6443", Token: "t"},
		"no credentials": {Server: "https://x:6443"},
		"bad CA":         {Server: "https://x:6443", Token: "t", CA: []byte("not pem")},
	} {
		cfg.Clusters = func(context.Context) ([]string, error) { return nil, nil }
		if _, err := NewKubeReviewer(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
