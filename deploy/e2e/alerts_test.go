package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/amtest"
)

// TestAlertmanagerWatchLoop: the watch loop of seed-incident, run live
// against a real kube-apiserver whose audit webhook sends to auditlens
// serve, reaches a real Alertmanager (pinned in versions.env, built by
// build.sh) through an alerts: route of serve's --config: Alertmanager's
// GET /api/v2/alerts shows the watch-loop alert firing with the finding's
// labels, and, once the loop has stopped and resolve_after passed, no
// longer. An active alert is sent with endsAt three repeats (90 s) ahead,
// so its going sooner is auditlens resolving it, not Alertmanager
// expiring it.
func TestAlertmanagerWatchLoop(t *testing.T) {
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "alerts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	am := amtest.Start(t, alertmanagerBin, dir)
	cfg := filepath.Join(dir, "auditlens.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`alerts:
  ui_url: http://auditlens.example.com
  resolve_after: 20s
  repeat: 30s
  interval: 1s
  routes:
  - name: oncall
    detectors: [watch-loop]
    alertmanager:
      url: %s
`, am)), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "e2e-alerts"
	ca := newCA(t, dir)
	recv := startReceiverTokenArgs(t, ca, filepath.Join(dir, "auditlens"), []string{name}, []string{"--config", cfg})
	c := startCluster(t, ca, filepath.Join(dir, "cluster"), name, recv.forCluster(name), func(c *cluster) {
		p := newDriver(t, c)
		prelude(p)
		p.stop()
	})

	// Watch Alertmanager while the loop runs.
	var mu sync.Mutex
	var firing *amtest.Alert
	var firedAt time.Time
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(500 * time.Millisecond):
			}
			as, err := getAlerts(am, name)
			if err == nil && len(as) > 0 {
				mu.Lock()
				if firing == nil {
					firing, firedAt = &as[0], time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	d := newDriver(t, c)
	d.recv = recv
	start := time.Now()
	exp := seedIncident(d)
	d.stop()
	loopEnded := time.Now()
	t.Logf("the watch loop ran for %s", loopEnded.Sub(start).Round(100*time.Millisecond))
	c.stop(t)
	if !poll(60*time.Second, 500*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firing != nil
	}) {
		close(stopWatch)
		t.Fatalf("no watch-loop alert of cluster %s reached Alertmanager\nauditlens log:\n%s", name, recv.proc.logTail(30))
	}
	close(stopWatch)
	<-watched
	a := *firing
	if a.Status.State != "active" || a.Labels["alertname"] != "watch-loop" || a.Labels["cluster"] != name ||
		a.Labels["severity"] == "" || a.Labels["finding_id"] == "" {
		t.Errorf("alert %+v, want an active watch-loop alert of %s with severity and finding_id", a, name)
	}
	if a.Annotations["summary"] == "" || a.Annotations["remediation"] == "" ||
		a.GeneratorURL != "http://auditlens.example.com/findings/"+a.Labels["finding_id"] {
		t.Errorf("alert annotations %v, generatorURL %q: want summary, remediation and the finding's UI link", a.Annotations, a.GeneratorURL)
	}
	when := "after the loop ended"
	if firedAt.Before(loopEnded) {
		when = fmt.Sprintf("%s into the loop", firedAt.Sub(start).Round(100*time.Millisecond))
	}
	t.Logf("firing in Alertmanager %s: %v (%s; expected %s)", when, a.Labels, a.Annotations["summary"], exp.WatchLoop.ResourceVersion)

	if !poll(60*time.Second, 500*time.Millisecond, func() bool {
		as, err := getAlerts(am, name)
		return err == nil && len(as) == 0
	}) {
		t.Fatalf("the watch-loop alert is still in Alertmanager a minute after the loop ended\nauditlens log:\n%s", recv.proc.logTail(30))
	}
	resolved := time.Since(loopEnded)
	t.Logf("resolved in Alertmanager %s after the loop ended (resolve_after 20s)", resolved.Round(100*time.Millisecond))
	if resolved > 75*time.Second {
		t.Errorf("resolved %s after the loop ended: Alertmanager expired it rather than auditlens resolving it", resolved)
	}
	if err := recv.proc.stop(60 * time.Second); err != nil {
		t.Errorf("auditlens serve: %v\n%s", err, recv.proc.logTail(30))
	}
}

// getAlerts returns Alertmanager's watch-loop alerts of cluster (those
// whose endsAt has not passed).
func getAlerts(base, cluster string) ([]amtest.Alert, error) {
	return amtest.Alerts(base, `alertname="watch-loop"`, fmt.Sprintf("cluster=%q", cluster))
}
