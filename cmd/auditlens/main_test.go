package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the auditlens binary: with AUDITLENS_TEST_MAIN
// set it runs the command line in its arguments. Tests start it as a child
// process to kill it like a crash would.
func TestMain(m *testing.M) {
	if os.Getenv("AUDITLENS_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// server is an auditlens serve child process.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	base string
	done chan error
	logs *syncBuffer
}

var listening = regexp.MustCompile(`is listening on (https?://[0-9.:]+)`)

func startServe(t testing.TB, args ...string) *server {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "AUDITLENS_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, done: make(chan error, 1), logs: logs}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() { s.kill() })
	select {
	case s.base = <-found:
	case err := <-s.done:
		t.Fatalf("serve exited before listening: %v\n%s", err, logs.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("serve did not start listening\n%s", logs.String())
	}
	return s
}

func (s *server) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		s.done <- nil
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- nil
		if err != nil {
			s.t.Fatalf("serve exited with %v\n%s", err, s.logs.String())
		}
	case <-time.After(60 * time.Second):
		s.t.Fatalf("serve did not stop\n%s", s.logs.String())
	}
}

// syncBuffer collects a child's log output written from another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (s *server) post(path, body string) (int, map[string]any) {
	s.t.Helper()
	resp, err := http.Post(s.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (s *server) get(path string) (int, []string) {
	s.t.Helper()
	resp, err := http.Get(s.base + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	return resp.StatusCode, lines
}

// waitEvents polls the API until the query returns want lines.
func (s *server) waitEvents(path string, want int) []string {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, lines := s.get(path)
		if code == 200 && len(lines) == want {
			return lines
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("GET %s: %d, %d lines, want %d:\n%s\nlogs:\n%s", path, code, len(lines), want, strings.Join(lines, "\n"), s.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func event(id, stage, ts, extra string) string {
	return fmt.Sprintf(`{"level":"Metadata","auditID":%q,"stage":%q,"requestURI":"/api/v1/namespaces/default/services?resourceVersion=100&watch=true","verb":"watch","user":{"username":"system:kube-controller-manager"},"sourceIPs":["10.0.0.1"],"userAgent":"kube-controller-manager/v1.9.2","objectRef":{"resource":"services","namespace":"default","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":%q,"stageTimestamp":%q%s}`,
		id, stage, ts, ts, extra)
}

func list(apiVersion string, items ...string) string {
	return fmt.Sprintf(`{"kind":"EventList","apiVersion":%q,"metadata":{},"items":[%s]}`, apiVersion, strings.Join(items, ","))
}
