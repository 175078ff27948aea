package e2e

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"
)

// tlsProxy is what the fault-injecting proxies share: a TLS listener on
// 127.0.0.1 with a certificate of the cluster's CA (client-go sends its
// bearer token only over HTTPS), a transport to the real apiserver, and a
// reverse proxy for what passes unchanged. It strips nothing and adds no
// X-Forwarded-For (Rewrite, not Director), so the apiserver's audit log
// names the proxied client's user, user agent and address as it would
// without the proxy.
type tlsProxy struct {
	name     string
	upstream *url.URL
	base     string // https://127.0.0.1:port
	srv      *http.Server
	rt       http.RoundTripper
	rp       *httputil.ReverseProxy
	active   sync.WaitGroup // streams being served, which close waits for
}

// start listens and serves h (the proxy that embeds f) until the test ends.
func (f *tlsProxy) start(t *testing.T, d *driver, name string, h http.Handler) {
	t.Helper()
	up, err := url.Parse(d.c.base)
	if err != nil {
		t.Fatal(err)
	}
	f.name, f.upstream = name, up
	f.rt = &http.Transport{
		DialContext:       (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSClientConfig:   d.c.tls.Clone(),
		ForceAttemptHTTP2: true,
		MaxIdleConns:      64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
	}
	f.rp = &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.Out.Host = up.Host },
		Transport:     f.rt,
		FlushInterval: -1,
		// A response body the apiserver cuts (a load balancer's failover,
		// ha_test.go) is the proxied client's to notice: its request
		// fails. Not a line on the test binary's stderr per stream.
		ErrorLog: log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				t.Logf("%s: %s %s: %v", name, r.Method, r.URL.RequestURI(), err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	certPath, keyPath := d.c.ca.issue(t, d.c.dir, name, name, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "https://" + ln.Addr().String()
	f.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := f.srv.ServeTLS(ln, certPath, keyPath); err != nil && err != http.ErrServerClosed {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(f.close)
}

// close closes the listener and every connection, and waits a little for
// the streams' handlers to record their ends.
func (f *tlsProxy) close() {
	_ = f.srv.Close()
	done := make(chan struct{})
	go func() { f.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// roundTrip sends r to the apiserver under ctx, without hop-by-hop headers.
func (f *tlsProxy) roundTrip(ctx context.Context, r *http.Request) (*http.Response, error) {
	out := r.Clone(ctx)
	out.URL.Scheme, out.URL.Host = f.upstream.Scheme, f.upstream.Host
	out.Host, out.RequestURI = f.upstream.Host, ""
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		out.Header.Del(h)
	}
	return f.rt.RoundTrip(out)
}
