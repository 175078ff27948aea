// Package amtest runs a real Alertmanager for tests (the binary that
// deploy/e2e/build.sh pins and builds) and reads the alerts it holds.
package amtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/proctest"
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
	addr := proctest.FreeAddr(t)
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "alertmanager-data"),
		"--cluster.listen-address=", "--web.listen-address="+addr, "--log.level=warn")
	base := "http://" + addr
	proctest.Serve(t, "alertmanager", cmd, filepath.Join(dir, "alertmanager.log"), base+"/-/ready")
	return base
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
