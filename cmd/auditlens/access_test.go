package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoopbackAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.1.2.3:0", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{"LocalHost:8080", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.5:8080", false},
		{"auditlens.example:8443", false},
		{"127.0.0.1", true},
	} {
		if got := loopbackAddr(tc.addr); got != tc.want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestCheckReadAccess(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		listen                        string
		tokens, clientCerts, optedOut bool
		ok                            bool
	}{
		{"loopback, open", "127.0.0.1:8080", false, false, false, true},
		{"every interface, open", ":8443", false, false, false, false},
		{"every interface, tokens", ":8443", true, false, false, true},
		{"every interface, client certificates", ":8443", false, true, false, true},
		{"every interface, opted out by name", ":8443", false, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkReadAccess(tc.listen, tc.tokens, tc.clientCerts, tc.optedOut)
			if (err == nil) != tc.ok {
				t.Fatalf("checkReadAccess: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "--api-token-file") {
				t.Errorf("the error does not say what to set: %v", err)
			}
		})
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("# the UI's token\n  tok-1  \n\ntok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readTokenFile(p)
	if err != nil || !slices.Equal(got, []string{"tok-1", "tok-2"}) {
		t.Errorf("readTokenFile = %q, %v", got, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTokenFile(empty); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("an empty token file: %v, want an error", err)
	}
	if _, err := readTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing token file: no error")
	}
}

// TestServeRefusesOpenReads: serve on every interface without credentials
// for the read side stops at once with a usage error that says what to
// set, before it opens a store.
func TestServeRefusesOpenReads(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "serve", "--data", dir, "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "not a loopback address") || !strings.Contains(stderr, "--"+insecureReadsFlag) {
		t.Fatalf("serve --listen 0.0.0.0:0: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "clickhouse")); err == nil {
		t.Error("serve opened the store before refusing")
	}
}

func TestAuthProxyFlags(t *testing.T) {
	if p, err := authProxy(nil, nil, "", ""); p != nil || err != nil {
		t.Errorf("no flags: %v, %v", p, err)
	}
	for _, tc := range []struct {
		from, groups []string
	}{
		{[]string{"127.0.0.1/32"}, nil},
		{nil, []string{"sre=prod"}},
		{[]string{"127.0.0.1"}, []string{"sre=prod"}},
		{[]string{"127.0.0.1/32"}, []string{"sre"}},
	} {
		if _, err := authProxy(tc.from, tc.groups, "", ""); err == nil {
			t.Errorf("authProxy(%q, %q): no error", tc.from, tc.groups)
		}
	}
	p, err := authProxy([]string{"10.1.2.3/16"}, []string{"sre=prod", "sre=staging", "admins=*", "admins=prod"}, "X-User", "X-Groups")
	if err != nil {
		t.Fatal(err)
	}
	if p.From[0].String() != "10.1.0.0/16" || strings.Join(p.Groups["sre"], ",") != "prod,staging" || len(p.Groups["admins"]) != 0 || p.UserHeader != "X-User" {
		t.Errorf("authProxy: %+v", p)
	}
}

// TestClusterNamesCached: the stored cluster names are listed once per
// period, whatever the number of tokens reviewed, and again after it.
func TestClusterNamesCached(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	calls := 0
	c := &clusterNames{ttl: time.Minute, now: func() time.Time { return now }, list: func(context.Context) ([]string, error) {
		calls++
		return []string{"a", fmt.Sprint("c", calls)}, nil
	}}
	for range 5 {
		got, err := c.get(t.Context())
		if err != nil || !slices.Equal(got, []string{"a", "c1"}) {
			t.Fatalf("get: %v %v", got, err)
		}
	}
	now = now.Add(time.Minute)
	if got, _ := c.get(t.Context()); !slices.Equal(got, []string{"a", "c2"}) || calls != 2 {
		t.Errorf("after the period: %v, %d lists; want a fresh list, 2 lists", got, calls)
	}
}
