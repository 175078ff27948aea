package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultProxy sits between the real kube-controller-manager and the real
// kube-apiserver and does to Services watch streams what the watch cache of
// kube-apiserver 1.7.0–1.9.2 did (kubernetes PR #46223, fixed by #58547):
//
//   - a DELETED event carries the resourceVersion the object had before it
//     was deleted, not the revision of the deletion. The proxy learns each
//     Service's last resourceVersion, by UID, from every Services list
//     response and watch event it forwards;
//   - no BOOKMARK events (1.9-era clients asked for none), except the one
//     annotated k8s.io/initial-events-end that ends a watch-list's initial
//     sync: client-go's reflector (tools/cache/reflector.go, watchList)
//     waits for that bookmark and, without it, retries the watch-list
//     forever instead of starting its informers;
//   - each Services watch ends after a random 15–25 s (instead of 5–10
//     minutes), so that the reflector restarts quickly.
//
// With rewrite off (the control run) the DELETED events pass unchanged;
// bookmarks are still dropped and watches still cut, so that the control
// differs from the fault in nothing else.
//
// Everything else passes through unchanged (see tlsProxy).
//
// Streams are rewritten only when they are JSON: start the controller
// manager with --kube-api-content-type=application/json. A protobuf
// Services stream is passed through and counted in opaque.
type faultProxy struct {
	tlsProxy
	t       *testing.T
	rewrite bool
	minCut  time.Duration
	maxCut  time.Duration

	mu      sync.Mutex
	lastRV  map[string]string // Service UID → resourceVersion of its last state seen
	watches []*proxiedWatch
	writes  []endpointsWrite
	opaque  int // Services responses not rewritten because they were not JSON
}

// proxiedWatch is one Services watch through the proxy.
type proxiedWatch struct {
	Start     time.Time // when the apiserver's response headers arrived
	End       time.Time
	RV        string // the resourceVersion requested
	WatchList bool   // sendInitialEvents=true
	UserAgent string
	URI       string
	Cut       bool           // ended by the proxy's timer
	Events    map[string]int // forwarded, by type
	Dropped   int            // bookmarks dropped
	Rewrites  []rvRewrite
}

// rvRewrite is one DELETED event whose resourceVersion the proxy replaced.
type rvRewrite struct {
	Name     string
	Deletion string // the resourceVersion the apiserver sent
	Old      string // the one forwarded: the object's before its deletion
}

// endpointsWrite is one write to Endpoints by the proxied client.
type endpointsWrite struct {
	At        time.Time
	Method    string
	Namespace string
	Name      string
	Code      int
}

var endpointsPathRE = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/endpoints(?:/([^/]+))?$`)

// startFaultProxy starts the proxy in front of the driver's apiserver.
func startFaultProxy(d *driver, rewrite bool) *faultProxy {
	d.t.Helper()
	p := &faultProxy{t: d.t, rewrite: rewrite, lastRV: map[string]string{},
		minCut: 15 * time.Second, maxCut: 25 * time.Second}
	p.start(d.t, d, "faultproxy", p)
	return p
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/api/v1/services" {
		if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
			p.serveServicesWatch(w, r)
		} else {
			p.serveServicesList(w, r)
		}
		return
	}
	if m := endpointsPathRE.FindStringSubmatch(r.URL.Path); m != nil && r.Method != http.MethodGet {
		name := m[2]
		if name == "" && r.Body != nil {
			// A create names the object in its body.
			b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
			r.Body.Close()
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			var o object
			_ = json.Unmarshal(b, &o)
			name = o.Metadata.Name
		}
		sw := &statusWriter{ResponseWriter: w}
		at := time.Now()
		p.rp.ServeHTTP(sw, r)
		p.mu.Lock()
		p.writes = append(p.writes, endpointsWrite{At: at, Method: r.Method, Namespace: m[1], Name: name, Code: sw.code})
		p.mu.Unlock()
		return
	}
	p.rp.ServeHTTP(w, r)
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func copyHeader(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		if k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
}

func isJSON(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "application/json"
}

// serviceMeta is the part of a Service the proxy reads.
type serviceMeta struct {
	Metadata struct {
		Name            string            `json:"name"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// serveServicesList forwards a list of Services and learns their
// resourceVersions.
func (p *faultProxy) serveServicesList(w http.ResponseWriter, r *http.Request) {
	resp, err := p.roundTrip(r.Context(), r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode == http.StatusOK {
		var list struct {
			Items []serviceMeta `json:"items"`
		}
		if isJSON(resp) && json.Unmarshal(body, &list) == nil {
			p.mu.Lock()
			for _, s := range list.Items {
				p.lastRV[s.Metadata.UID] = s.Metadata.ResourceVersion
			}
			p.mu.Unlock()
		} else {
			p.mu.Lock()
			p.opaque++
			p.mu.Unlock()
		}
	}
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// serveServicesWatch forwards a Services watch event by event, rewriting
// and dropping as the 1.7–1.9 watch cache did, and ends it after a random
// 15–25 s.
func (p *faultProxy) serveServicesWatch(w http.ResponseWriter, r *http.Request) {
	p.active.Add(1)
	defer p.active.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	q := r.URL.Query()
	pw := &proxiedWatch{RV: q.Get("resourceVersion"), WatchList: q.Get("sendInitialEvents") == "true",
		UserAgent: r.UserAgent(), URI: r.URL.RequestURI(), Events: map[string]int{}}
	resp, err := p.roundTrip(ctx, r)
	if err != nil {
		if r.Context().Err() == nil {
			p.t.Logf("fault proxy: watch %s: %v", r.URL.RequestURI(), err)
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	flusher := http.NewResponseController(w)
	_ = flusher.Flush()
	if resp.StatusCode != http.StatusOK || !isJSON(resp) {
		if resp.StatusCode == http.StatusOK {
			p.mu.Lock()
			p.opaque++
			p.mu.Unlock()
		}
		copyFlushing(flusher, w, resp.Body)
		return
	}
	pw.Start = time.Now()
	p.mu.Lock()
	p.watches = append(p.watches, pw)
	p.mu.Unlock()

	cut := p.minCut + rand.N(p.maxCut-p.minCut)
	timer := time.AfterFunc(cut, func() {
		p.mu.Lock()
		pw.Cut = true
		p.mu.Unlock()
		cancel()
	})
	defer timer.Stop()

	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			break
		}
		out, keep := p.event(pw, ev.Type, ev.Object)
		if !keep {
			continue
		}
		b, err := json.Marshal(struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}{ev.Type, out})
		if err != nil {
			p.t.Errorf("fault proxy: re-encoding a %s event: %v", ev.Type, err)
			break
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			break
		}
		if err := flusher.Flush(); err != nil {
			break
		}
		p.mu.Lock()
		pw.Events[ev.Type]++
		p.mu.Unlock()
	}
	p.mu.Lock()
	pw.End = time.Now()
	p.mu.Unlock()
}

// copyFlushing copies a stream, flushing after every read.
func copyFlushing(f *http.ResponseController, w io.Writer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = f.Flush()
		}
		if err != nil {
			return
		}
	}
}

// event applies the fault to one watch event: it returns the object to
// forward and whether to forward the event at all.
func (p *faultProxy) event(pw *proxiedWatch, typ string, obj json.RawMessage) (json.RawMessage, bool) {
	var s serviceMeta
	if err := json.Unmarshal(obj, &s); err != nil {
		return obj, true // an ERROR event's Status, or something new: pass it
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch typ {
	case "BOOKMARK":
		if s.Metadata.Annotations["k8s.io/initial-events-end"] == "true" {
			return obj, true
		}
		pw.Dropped++
		return nil, false
	case "ADDED", "MODIFIED":
		p.lastRV[s.Metadata.UID] = s.Metadata.ResourceVersion
	case "DELETED":
		old, ok := p.lastRV[s.Metadata.UID]
		if !p.rewrite || !ok || old == s.Metadata.ResourceVersion {
			return obj, true
		}
		rewritten, err := setResourceVersion(obj, old)
		if err != nil {
			p.t.Errorf("fault proxy: rewriting DELETED %s: %v", s.Metadata.Name, err)
			return obj, true
		}
		pw.Rewrites = append(pw.Rewrites, rvRewrite{Name: s.Metadata.Name, Deletion: s.Metadata.ResourceVersion, Old: old})
		return rewritten, true
	}
	return obj, true
}

// setRewrite turns the DELETED-event rewrite on or off from now on: the
// soak runs healthy for hours before the bug appears.
func (p *faultProxy) setRewrite(on bool) {
	p.mu.Lock()
	p.rewrite = on
	p.mu.Unlock()
}

// setResourceVersion returns obj with metadata.resourceVersion set to rv,
// every other byte of every other field as it was.
func setResourceVersion(obj json.RawMessage, rv string) (json.RawMessage, error) {
	var o map[string]json.RawMessage
	if err := json.Unmarshal(obj, &o); err != nil {
		return nil, err
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(o["metadata"], &meta); err != nil {
		return nil, err
	}
	v, _ := json.Marshal(rv)
	meta["resourceVersion"] = v
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	o["metadata"] = m
	return json.Marshal(o)
}

// servicesWatches returns a copy of the Services watches so far.
func (p *faultProxy) servicesWatches() []proxiedWatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]proxiedWatch, len(p.watches))
	for i, w := range p.watches {
		out[i] = *w
		out[i].Events = map[string]int{}
		for k, v := range w.Events {
			out[i].Events[k] = v
		}
		out[i].Rewrites = append([]rvRewrite(nil), w.Rewrites...)
	}
	return out
}

// endpointsWrites returns the Endpoints writes so far.
func (p *faultProxy) endpointsWrites() []endpointsWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]endpointsWrite(nil), p.writes...)
}

func (p *faultProxy) opaqueResponses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opaque
}

// describeWatches lists the Services watches, one a line, times relative to t0.
func describeWatches(ws []proxiedWatch, t0 time.Time) string {
	var b strings.Builder
	for _, w := range ws {
		kind := "watch"
		if w.WatchList {
			kind = "watch-list"
		}
		end := "open"
		if !w.End.IsZero() {
			end = fmt.Sprintf("%.1fs", w.End.Sub(t0).Seconds())
		}
		how := "ended by the client or apiserver"
		if w.Cut {
			how = "cut by the proxy"
		}
		fmt.Fprintf(&b, "\n  %s from rv=%q at %.1fs, until %s (%s): events %v, bookmarks dropped %d, DELETED rewritten %v",
			kind, w.RV, w.Start.Sub(t0).Seconds(), end, how, w.Events, w.Dropped, w.Rewrites)
	}
	return b.String()
}
