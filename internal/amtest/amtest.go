// Package amtest runs a real Alertmanager for tests (the binary that
// deploy/e2e/build.sh pins and builds) and reads the alerts it holds.
package amtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Alert is the part of an alert of GET /api/v2/alerts that tests read.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Status       struct {
		State string `json:"state"`
	} `json:"status"`
}

// Start runs bin on a free 127.0.0.1 port, without clustering, with one
// receiver that sends nowhere and its data and log in dir; it returns its
// URL once Alertmanager is ready. The process ends with the test, and its
// log is printed when the test failed.
func Start(t testing.TB, bin, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte("route:\n  receiver: nowhere\nreceivers:\n- name: nowhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "alertmanager.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "alertmanager-data"),
		"--cluster.listen-address=", "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("alertmanager log:\n%s", b)
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("alertmanager exited before it was ready:\n%s", b)
		default:
		}
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager on %s not ready after 30s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Alerts returns the alerts Alertmanager at base holds that match every
// filter (label matchers such as `alertname="watch-loop"`).
func Alerts(base string, filters ...string) ([]Alert, error) {
	q := url.Values{"filter": filters}
	resp, err := http.Get(base + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v2/alerts: %s", resp.Status)
	}
	var as []Alert
	if err := json.NewDecoder(resp.Body).Decode(&as); err != nil {
		return nil, fmt.Errorf("decoding GET /api/v2/alerts: %w", err)
	}
	return as, nil
}
