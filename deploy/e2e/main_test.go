package e2e

import (
	"bufio"
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store/chdb"
)

//go:embed versions.env
var versionsEnv string

// versions holds versions.env, the one place the pinned versions live
// (build.sh sources the same file).
var versions = parseEnv(versionsEnv)

func parseEnv(s string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = strings.Trim(v, `"'`)
		}
	}
	return m
}

// Binaries used by every test, set by TestMain.
var (
	kubeAPIServerBin         string
	kubeControllerManagerBin string
	kubeSchedulerBin         string // the real scheduler of busy_test.go
	kubemarkBin              string // the hollow nodes of hollow_test.go
	etcdBin                  string
	otelcolBin               string // the OpenTelemetry Collector of otel_test.go
	alertmanagerBin          string // the Alertmanager of alerts_test.go
	helmBin                  string // Helm, for the chart in deploy/helm (manifests_test.go)
	auditlensBin             string
	// setupErr, when set, fails every test that needs the binaries.
	setupErr error
)

// updateFixtures rewrites fixtures/<scenario>.log from the scenarios' audit
// logs (make e2e-fixtures).
var updateFixtures = os.Getenv("AUDITLENS_E2E_UPDATE") == "1"

func TestMain(m *testing.M) {
	flag.Parse()
	// An interrupt (Ctrl-C, or a CI job's SIGTERM) kills every process the
	// tests started before exiting: their process groups are not the
	// terminal's, so they would not see the signal themselves. A panic on
	// test timeout kills the test binary without cleanups; Pdeathsig (set
	// on every child) covers that case.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "e2e: %v: killing every process the tests started\n", s)
		killAll()
		cleanupTemp()
		os.Exit(130)
	}()

	code := m.Run()
	killAll()
	if code != 0 && tempRoot != "" {
		fmt.Fprintf(os.Stderr, "e2e: logs, audit logs and data kept in %s\n", tempRoot)
	} else {
		cleanupTemp()
	}
	os.Exit(code)
}

var setupOnce sync.Once

// prepare builds (or finds cached) the binaries on first use, and skips or
// fails t when they cannot be had.
func prepare(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("end-to-end tests do not run with -short")
	case os.Getenv("AUDITLENS_E2E") == "skip":
		t.Skip("AUDITLENS_E2E=skip")
	}
	setupOnce.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

var tempRoot string

func cleanupTemp() {
	if tempRoot != "" && os.Getenv("AUDITLENS_E2E_KEEP") == "" {
		os.RemoveAll(tempRoot)
	}
}

func setup() error {
	if _, err := chdb.LibraryPath(""); err != nil {
		return fmt.Errorf("auditlens serve needs the embedded engine (run `make chdb`, or use `make e2e`): %w", err)
	}
	start := time.Now()
	out, err := runCapture(exec.Command("bash", "build.sh"))
	if err != nil {
		return fmt.Errorf("building kube-apiserver, kube-controller-manager, kube-scheduler, kubemark %s, etcd, etcdctl, etcdutl %s, otelcol %s, alertmanager %s and helm with deploy/e2e/build.sh "+
			"(needs Go and the module proxy; 8-17 minutes when not cached): %w",
			versions["KUBERNETES_VERSION"], versions["ETCD_VERSION"], versions["OTELCOL_VERSION"], versions["ALERTMANAGER_VERSION"], err)
	}
	dir := strings.TrimSpace(lastLine(out))
	if d := time.Since(start); d > 5*time.Second {
		fmt.Fprintf(os.Stderr, "e2e: built kube-apiserver, kube-controller-manager, kube-scheduler, kubemark, etcd, etcdctl, etcdutl, otelcol, alertmanager and helm into %s in %s\n", dir, d.Round(time.Second))
	}
	kubeAPIServerBin = filepath.Join(dir, "kube-apiserver")
	kubeControllerManagerBin = filepath.Join(dir, "kube-controller-manager")
	kubeSchedulerBin = filepath.Join(dir, "kube-scheduler")
	kubemarkBin = filepath.Join(dir, "kubemark")
	etcdBin = filepath.Join(dir, "etcd")
	etcdctlBin, etcdutlBin = filepath.Join(dir, "etcdctl"), filepath.Join(dir, "etcdutl")
	otelcolBin = filepath.Join(dir, "otelcol")
	alertmanagerBin = filepath.Join(dir, "alertmanager")
	helmBin = filepath.Join(dir, "helm")
	for _, b := range []string{kubeAPIServerBin, kubeControllerManagerBin, kubeSchedulerBin, kubemarkBin, etcdBin, etcdctlBin, etcdutlBin, otelcolBin, alertmanagerBin, helmBin} {
		if fi, err := os.Stat(b); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("build.sh printed %s but %s is not an executable there", dir, filepath.Base(b))
		}
	}

	tempRoot, err = os.MkdirTemp("", "auditlens-e2e-")
	if err != nil {
		return err
	}
	auditlensBin = filepath.Join(tempRoot, "auditlens")
	build := exec.Command("go", "build", "-o", auditlensBin, "github.com/auditlens/auditlens/cmd/auditlens")
	if _, err := runCapture(build); err != nil {
		return fmt.Errorf("building auditlens: %w", err)
	}
	return nil
}

// runCapture runs cmd, passing its stderr through, and returns its stdout;
// a failure's error carries the last lines of stderr.
func runCapture(cmd *exec.Cmd) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	p := register(cmd.Path, cmd)
	err := cmd.Wait()
	unregister(p)
	if err != nil {
		return stdout.String(), fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, tail(stderr.String(), 30))
	}
	return stdout.String(), nil
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
