package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeBounds probes serve's listener as a hostile client would: a
// flood of connections that stay open, a body that never ends, a declared
// body far over the limit, and a client that keeps trying tokens. Each
// is bounded: others are still answered at once.
func TestServeBounds(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--detect=false", "--webhook-token", "tok=prod",
		"--max-conns", "64", "--body-grace", "500ms", "--idle-timeout", "2s")
	addr := strings.TrimPrefix(s.base, "http://")
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	ask := func(c net.Conn, r *bufio.Reader, req string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	healthy := func(what string) {
		t.Helper()
		began := time.Now()
		c, r := dial()
		if resp, body := ask(c, r, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("healthz %s: %s %s", what, resp.Status, body)
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("healthz %s answered after %s", what, d)
		}
	}

	// Ten times --max-conns idle keep-alive connections.
	for range 640 {
		c, r := dial()
		if resp, _ := ask(c, r, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("healthz while connections pile up: %s", resp.Status)
		}
	}
	healthy("amid 640 idle keep-alive connections")
	// Ten times --max-conns connections that send nothing.
	for range 640 {
		dial()
	}
	time.Sleep(2500 * time.Millisecond)
	healthy("amid 640 silent connections")

	post := "POST /audit/prod HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n"
	// A gigabyte declared, a hundred bytes sent.
	for _, path := range []string{"/audit/prod", "/otlp/prod/v1/logs"} {
		c, r := dial()
		began := time.Now()
		resp, body := ask(c, r, strings.Replace(post, "/audit/prod", path, 1)+"Content-Length: 1073741824\r\n\r\n"+strings.Repeat("{", 100))
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "--max-body-bytes") {
			t.Errorf("%s with a gigabyte declared: %s %s", path, resp.Status, body)
		}
		if d := time.Since(began); d > time.Second {
			t.Errorf("%s: 413 after %s", path, d)
		}
	}
	// A body that never ends.
	c, r := dial()
	began := time.Now()
	if _, err := io.WriteString(c, post+"Transfer-Encoding: chunked\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		for range 100 {
			if _, err := fmt.Fprintf(c, "1\r\n \r\n"); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 {
			t.Errorf("a dripping body was accepted: %s", b)
		}
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("a dripping body held its connection %s", d)
	}
	c.Close()
	<-cut
	// A wrong token is answered, and the connection closed.
	c, r = dial()
	if resp, _ := ask(c, r, strings.Replace(post, "Bearer tok", "Bearer guess", 1)+"Content-Length: 2\r\n\r\n{}"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %s", resp.Status)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadByte(); err == nil || isTimeoutErr(err) {
		t.Errorf("the connection stayed open after 401: %v", err)
	}
	healthy("after all that")
	if _, lines := s.get("/metrics"); !strings.Contains(strings.Join(lines, "\n"), "auditlens_http_connections_evicted_total") {
		t.Error("no connection metrics")
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestServeConnectionFlood holds AUDITLENS_FLOOD keep-alive connections
// (e.g. 20000; unset, skipped: it needs that many descriptors in the test
// process) against serve at its default --max-conns, then times /healthz:
// the idle connections beyond the bound are closed, so the newcomer is
// answered at once.
func TestServeConnectionFlood(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("AUDITLENS_FLOOD"))
	if err != nil || n <= 0 {
		t.Skip("AUDITLENS_FLOOD is not a number of connections")
	}
	s := startServe(t, "--data", t.TempDir(), "--detect=false")
	addr := strings.TrimPrefix(s.base, "http://")
	var conns []net.Conn
	failed := 0
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			failed++ // this process's own descriptors ran out
			continue
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			failed++
			c.Close()
			continue
		}
		resp.Body.Close()
		conns = append(conns, c)
	}
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); isTimeoutErr(err) {
			open++
			continue
		}
		c.Close() // serve closed it
	}
	began := time.Now()
	code, _ := s.get("/healthz")
	took := time.Since(began)
	_, body := s.getBody("/metrics")
	t.Logf("%d keep-alive connections made (%d failed); serve keeps %d open; /healthz %d in %s\n%s",
		len(conns), failed, open, code, took.Round(time.Millisecond), grepLines(body, "auditlens_http_connections")+grepLines(body, "process_open_fds"))
	if code != 200 || took > time.Second {
		t.Errorf("/healthz amid %d connections: %d in %s", len(conns), code, took)
	}
	if open > 1024+16 {
		t.Errorf("serve keeps %d connections open, more than --max-conns 1024", open)
	}
	for _, c := range conns {
		c.Close()
	}
}
