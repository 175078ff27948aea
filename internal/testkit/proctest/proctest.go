// Package proctest runs server processes for tests and lists child
// processes, for tests that check nothing was left behind.
package proctest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Children returns the PIDs of pid's child processes, exited ones that were
// not waited for included. It skips the test where there is no /proc.
func Children(t testing.TB, pid int) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("lists child processes through /proc")
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // it exited
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, child)
		}
	}
	return pids
}

// FreeAddr returns a 127.0.0.1 address no one listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Serve starts a server process for a test, its output in logPath, and
// waits until GET readyURL answers 200. The process is killed when the test
// ends, and its log printed when the test failed; a process that exits
// before it is ready, or is not ready within 30 s, fails the test.
func Serve(t testing.TB, name string, cmd *exec.Cmd, logPath, readyURL string) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited before it was ready:\n%s", name, b)
		default:
		}
		if resp, err := http.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s after 30s", name, readyURL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
