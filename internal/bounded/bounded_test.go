package bounded

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testConfig is Defaults with the times shortened for tests.
func testConfig() Config {
	c := Defaults()
	c.IdleTimeout = time.Minute
	c.ReadHeaderTimeout = 5 * time.Second
	c.BodyGrace = 300 * time.Millisecond
	c.MinBodyRate = 1000
	c.MaxBodyBytes = 1 << 20
	return c
}

// start serves h bounded by c on a loopback port, over TLS if tlsOn.
func start(t *testing.T, h http.Handler, c Config, tlsOn bool) (*Server, *httptest.Server) {
	t.Helper()
	s := NewServer(h, c, nil)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = s.Server
	ts.Listener = s.Listener(ts.Listener)
	if tlsOn {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return s, ts
}

// rawConn is a client connection that speaks HTTP/1.1 by hand.
type rawConn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, ts *httptest.Server) *rawConn {
	t.Helper()
	addr := ts.Listener.Addr().String()
	var nc net.Conn
	var err error
	if ts.TLS != nil {
		nc, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, Conn: nc, r: bufio.NewReader(nc)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		c.t.Fatal(err)
	}
}

// response reads one response, waiting at most d.
func (c *rawConn) response(d time.Duration) (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// get sends a GET and wants 200.
func (c *rawConn) get(path string) {
	c.t.Helper()
	c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body, err := c.response(5 * time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		c.t.Fatalf("GET %s: %s %s", path, resp.Status, body)
	}
}

// closed says whether the server closed the connection within d.
func (c *rawConn) closed(d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.r.ReadByte()
	return err != nil && !isTimeout(err)
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "read %d\n", n)
})

func TestIdleTimeout(t *testing.T) {
	c := testConfig()
	c.IdleTimeout = 200 * time.Millisecond
	_, ts := start(t, ok, c, false)
	conn := dial(t, ts)
	conn.get("/")
	began := time.Now()
	if !conn.closed(5 * time.Second) {
		t.Fatal("an idle keep-alive connection stayed open")
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("closed after %s idle, want about 200ms", d)
	}
}

func TestBodyRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk int
		every time.Duration
		for_  time.Duration
		cut   bool
	}{
		{"a byte every 100ms is cut", 1, 100 * time.Millisecond, 5 * time.Second, true},
		{"nothing after the headers is cut", 0, 0, 0, true},
		{"twice the minimum rate passes", 200, 100 * time.Millisecond, 1500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ts := start(t, ok, testConfig(), false)
			conn := dial(t, ts)
			conn.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
			began := time.Now()
			sent := 0
			for tc.chunk > 0 && time.Since(began) < tc.for_ {
				if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", tc.chunk, strings.Repeat("a", tc.chunk)); err != nil {
					break // cut
				}
				sent += tc.chunk
				time.Sleep(tc.every)
			}
			if tc.chunk > 0 {
				_, _ = io.WriteString(conn, "0\r\n\r\n")
			}
			resp, body, err := conn.response(5 * time.Second)
			took := time.Since(began)
			if !tc.cut {
				if err != nil || resp.StatusCode != 200 || body != fmt.Sprintf("read %d\n", sent) {
					t.Fatalf("a body at twice the minimum rate: %v %v %q", resp, err, body)
				}
				return
			}
			if err == nil && resp.StatusCode == 200 {
				t.Fatalf("a dripping body was read to its end in %s: %q", took, body)
			}
			if err == nil && !strings.Contains(body, "--body-min-rate") {
				t.Errorf("answer %s %q does not say why", resp.Status, body)
			}
			if took > tc.for_+time.Second {
				t.Errorf("cut after %s", took)
			}
		})
	}
}

// A body that arrives quickly may be as large as allowed however short the
// grace.
func TestBodyFast(t *testing.T) {
	c := testConfig()
	c.BodyGrace = 50 * time.Millisecond
	_, ts := start(t, ok, c, false)
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(strings.Repeat("x", 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "read 1048576\n" {
		t.Fatalf("%s %q", resp.Status, b)
	}
}

func TestContentLengthTooLarge(t *testing.T) {
	var called atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called.Add(1)
		ok(w, r)
	})
	_, ts := start(t, h, testConfig(), false)
	for _, tc := range []struct {
		name, headers string
		length        int64
		want          int
	}{
		{"a gigabyte declared", "", 1 << 30, http.StatusRequestEntityTooLarge},
		{"one byte over", "", 1<<20 + 1, http.StatusRequestEntityTooLarge},
		{"gzip's overhead over the limit", "Content-Encoding: gzip\r\n", 1<<20 + 1, http.StatusOK},
		{"gzip far over", "Content-Encoding: gzip\r\n", 2 << 20, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := called.Load()
			conn := dial(t, ts)
			conn.send(fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n", tc.headers, tc.length))
			body := strings.Repeat("a", 100)
			if tc.want == http.StatusOK {
				body = strings.Repeat("a", int(tc.length))
			}
			conn.send(body)
			began := time.Now()
			resp, text, err := conn.response(3 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %q, want %d", resp.Status, text, tc.want)
			}
			if tc.want != http.StatusOK {
				if d := time.Since(began); d > time.Second {
					t.Errorf("413 after %s", d)
				}
				if called.Load() != before {
					t.Error("the handler ran for a body refused unread")
				}
				if !conn.closed(time.Second) {
					t.Error("the connection stayed open after 413")
				}
			}
		})
	}
}

func TestDeniedCloses(t *testing.T) {
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusOK} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			_, ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
			}), testConfig(), false)
			conn := dial(t, ts)
			conn.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, _, err := conn.response(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if got, want := conn.closed(500*time.Millisecond), code != http.StatusOK; got != want {
				t.Errorf("after %d the connection closed: %v, want %v", code, got, want)
			}
		})
	}
}

func TestMaxConns(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			c := testConfig()
			c.MaxConns = 4
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
				}
				ok(w, r)
			})
			s, ts := start(t, h, c, tlsOn)

			// Four idle keep-alive connections: a newcomer closes the
			// oldest and is served.
			var idle []*rawConn
			for range 4 {
				conn := dial(t, ts)
				conn.get("/")
				idle = append(idle, conn)
				time.Sleep(10 * time.Millisecond)
			}
			dial(t, ts).get("/")
			if !idle[0].closed(2 * time.Second) {
				t.Error("the connection idle longest was not closed for a newcomer")
			}
			for _, conn := range idle[1:] {
				if conn.closed(50 * time.Millisecond) {
					t.Error("a connection idle less long was closed")
				}
				conn.Close()
			}
			waitOpen(t, s, 1) // the newcomer, idle now

			// Four busy connections (the last makes room by closing the
			// idle newcomer): a fifth is answered 503 at once.
			done := make(chan error, 4)
			for range 4 {
				conn := dial(t, ts)
				conn.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
				go func() {
					resp, _, err := conn.response(10 * time.Second)
					if err == nil && resp.StatusCode != 200 {
						err = errors.New(resp.Status)
					}
					done <- err
				}()
			}
			waitOpen(t, s, 4)
			began := time.Now()
			conn := dial(t, ts)
			conn.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, _, err := conn.response(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("newcomer to four busy connections: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
			}
			if d := time.Since(began); d > time.Second {
				t.Errorf("503 after %s", d)
			}
			if st := s.Stats(); st.Refused != 1 || st.Evicted != 2 {
				t.Errorf("stats %+v, want 1 refused and 2 evicted", st)
			}
			close(release)
			for range 4 {
				if err := <-done; err != nil {
					t.Errorf("a held request: %v", err)
				}
			}
		})
	}
}

// Connections that never send a request make room once they have been
// silent a while.
func TestMaxConnsSilent(t *testing.T) {
	c := testConfig()
	c.MaxConns = 3
	s, ts := start(t, ok, c, false)
	for range 3 {
		dial(t, ts)
	}
	waitOpen(t, s, 3)
	conn := dial(t, ts)
	conn.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _, err := conn.response(5 * time.Second)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("newcomer among fresh silent connections: %v %v", resp, err)
	}
	time.Sleep(freshGrace + 100*time.Millisecond)
	dial(t, ts).get("/")
}

// A flood far beyond MaxConns leaves the server answering.
func TestMaxConnsFlood(t *testing.T) {
	c := testConfig()
	c.MaxConns = 16
	c.ReadHeaderTimeout = time.Minute
	s, ts := start(t, ok, c, false)
	for range 500 {
		nc, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	time.Sleep(freshGrace + 100*time.Millisecond)
	began := time.Now()
	dial(t, ts).get("/")
	if d := time.Since(began); d > time.Second {
		t.Errorf("served after %s", d)
	}
	if st := s.Stats(); st.Open > 16 || st.Refused == 0 {
		t.Errorf("stats %+v: want at most 16 open and some refused", st)
	}
}

func waitOpen(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Open != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", s.Stats().Open, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestValidate(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	c.MaxConns, c.IdleTimeout, c.MinBodyRate = 0, -time.Second, 0
	err := c.Validate()
	for _, want := range []string{"--max-conns", "--idle-timeout", "--body-min-rate"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
}
