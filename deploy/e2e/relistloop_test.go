package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The relist-loop scenario re-creates the "too old resource version" loop
// of seed 000's controller logs with the real kube-controller-manager: a
// proxy between it and the real kube-apiserver ends every ConfigMaps watch
// the controller-manager opens, within about a second, with the ERROR
// event an apiserver sends when the watch's resourceVersion is no longer
// served (410 Expired, inside the stream: the audit log shows 200). The
// real client-go reflector then relists — a watch-list or a list, as it
// chooses — and watches again, and the proxy expires that watch too: a
// real relist loop, paced by the reflector's own backoff. Nothing scripts
// a list or a watch.

// relistLoopResource is the collection whose watches the proxy expires.
const relistLoopResource = "/api/v1/configmaps"

// relistLoopTurns is how many expired watches, each followed by a relist,
// the scenario waits for (the detector needs 3 of one reflector; the
// reflector's backoff makes the fourth come about 20 s after the start).
const relistLoopTurns = 4

// expireProxy forwards everything to the apiserver and expires the
// watches of one collection: it forwards the watch's events for a random
// expireMin–expireMax (a watch-list: from its initial-events-end
// bookmark), then sends a 410 Expired ERROR event and ends the stream.
type expireProxy struct {
	tlsProxy
	t          *testing.T
	collection string
	expireMin  time.Duration
	expireMax  time.Duration

	mu     sync.Mutex
	reqs   []*collectionRequest
	opaque int
}

// collectionRequest is one list or watch of the collection.
type collectionRequest struct {
	Start, End time.Time
	Watch      bool
	WatchList  bool // sendInitialEvents=true: a relist that goes on as a watch
	RV         string
	UserAgent  string
	Expired    bool // ended by the proxy's 410
	Events     int
}

func startExpireProxy(d *driver, collection string) *expireProxy {
	d.t.Helper()
	p := &expireProxy{t: d.t, collection: collection, expireMin: 200 * time.Millisecond, expireMax: 1500 * time.Millisecond}
	p.start(d.t, d, "expireproxy", p)
	return p
}

func (p *expireProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != p.collection {
		p.rp.ServeHTTP(w, r)
		return
	}
	q := r.URL.Query()
	req := &collectionRequest{Start: time.Now(), RV: q.Get("resourceVersion"), UserAgent: r.UserAgent(),
		Watch: q.Get("watch") == "true" || q.Get("watch") == "1", WatchList: q.Get("sendInitialEvents") == "true"}
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	if req.Watch {
		p.serveWatch(w, r, req)
	} else {
		p.rp.ServeHTTP(w, r)
	}
	p.mu.Lock()
	req.End = time.Now()
	p.mu.Unlock()
}

// serveWatch forwards a watch of the collection and expires it.
func (p *expireProxy) serveWatch(w http.ResponseWriter, r *http.Request, req *collectionRequest) {
	p.active.Add(1)
	defer p.active.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	resp, err := p.roundTrip(ctx, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if resp.StatusCode != http.StatusOK || !isJSON(resp) {
		if resp.StatusCode == http.StatusOK {
			p.mu.Lock()
			p.opaque++
			p.mu.Unlock()
		}
		copyFlushing(rc, w, resp.Body)
		return
	}

	type event struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	events := make(chan event)
	go func() {
		defer close(events)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev event
			if dec.Decode(&ev) != nil {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	expireAfter := func() <-chan time.Time {
		return time.After(p.expireMin + rand.N(p.expireMax-p.expireMin))
	}
	var expire <-chan time.Time
	if !req.WatchList {
		expire = expireAfter()
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			b, _ := json.Marshal(ev)
			if _, err := w.Write(append(b, '\n')); err != nil || rc.Flush() != nil {
				return
			}
			p.mu.Lock()
			req.Events++
			p.mu.Unlock()
			if ev.Type == "BOOKMARK" && expire == nil && strings.Contains(string(ev.Object), `"k8s.io/initial-events-end":"true"`) {
				expire = expireAfter()
			}
		case <-expire:
			// What an apiserver sends when the watch's resourceVersion has
			// left its window: the reflector's "too old resource version".
			rv, _ := strconv.ParseUint(req.RV, 10, 64)
			b := fmt.Sprintf(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",`+
				`"message":"too old resource version: %d (%d)","reason":"Expired","code":410}}`+"\n", rv, rv+1000)
			_, _ = w.Write([]byte(b))
			_ = rc.Flush()
			p.mu.Lock()
			req.Expired = true
			p.mu.Unlock()
			return
		case <-ctx.Done():
			return
		}
	}
}

// requests returns a copy of the collection's requests so far.
func (p *expireProxy) requests() []collectionRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]collectionRequest, len(p.reqs))
	for i, r := range p.reqs {
		out[i] = *r
	}
	return out
}

// turns counts, per user agent, the expired watches that the same client
// followed with a relist (a list, or a watch-list).
func relistTurns(reqs []collectionRequest) map[string]int {
	out := map[string]int{}
	last := map[string]*collectionRequest{}
	for i := range reqs {
		r := &reqs[i]
		if prev := last[r.UserAgent]; prev != nil && prev.Expired && (!r.Watch || r.WatchList) {
			out[r.UserAgent]++
		}
		last[r.UserAgent] = r
	}
	return out
}

func describeRequests(rs []collectionRequest, t0 time.Time) string {
	var b strings.Builder
	for _, r := range rs {
		kind := "list"
		switch {
		case r.WatchList:
			kind = "watch-list"
		case r.Watch:
			kind = "watch"
		}
		end := "open"
		if !r.End.IsZero() {
			end = fmt.Sprintf("%.2fs", r.End.Sub(t0).Seconds())
		}
		ua := r.UserAgent
		if i := strings.LastIndex(ua, "/"); i >= 0 {
			ua = ua[i+1:]
		}
		fmt.Fprintf(&b, "\n  %-10s rv=%-8q %.2fs–%s expired=%v events=%d (%s)", kind, r.RV, r.Start.Sub(t0).Seconds(), end, r.Expired, r.Events, ua)
	}
	return b.String()
}

// relistLoopPrelude creates, before auditing starts, ConfigMaps for the
// controller-manager's lists to carry.
func relistLoopPrelude(d *driver) {
	d.t.Helper()
	_, err := d.admin.create("", "namespaces", namespace("apps"))
	d.must(err)
	for i := range 30 {
		_, err := d.admin.create("apps", "configmaps", configMap("settings-"+strconv.Itoa(i), map[string]string{"n": strconv.Itoa(i)}))
		d.must(err)
	}
}

// relistLoop runs the real kube-controller-manager behind the expire
// proxy until its ConfigMaps reflectors have turned relistLoopTurns times,
// and checks that auditlens, over the webhook, finds the loop meanwhile.
func relistLoop(d *driver) expectation {
	px := startExpireProxy(d, relistLoopResource)
	kcm := startControllerManager(d, px.base, "--kube-api-content-type=application/json")
	t0 := time.Now()
	total := func() int {
		n := 0
		for _, c := range relistTurns(px.requests()) {
			n = max(n, c)
		}
		return n
	}
	d.waitFor(fmt.Sprintf("%d expired ConfigMaps watches of one kube-controller-manager reflector, each followed by a relist", relistLoopTurns),
		75*time.Second, func() bool { return total() >= relistLoopTurns })
	turnsAt := time.Now()
	d.t.Logf("%d turns %.1fs after kube-controller-manager started", total(), turnsAt.Sub(t0).Seconds())

	// auditlens, over the webhook, has found the loop by now or within
	// seconds (serve evaluates every few seconds here).
	var found *finding
	poll(30*time.Second, time.Second, func() bool {
		fs, err := d.recv.findings(d.c.name)
		if err != nil {
			return false
		}
		for i, f := range fs {
			if f.Detector == "relist-loop" && f.Subjects.User == kcmID.user && f.Subjects.Resource == "configmaps" {
				found = &fs[i]
				return true
			}
		}
		return false
	})
	if found == nil {
		d.t.Errorf("no relist-loop finding for kube-controller-manager on configmaps within 30 s of its %dth turn", relistLoopTurns)
	} else {
		d.t.Logf("auditlens found the loop %.1fs after the %dth turn: %s", time.Since(turnsAt).Seconds(), relistLoopTurns, found.Title)
	}

	d.stop()
	if err := kcm.stop(30 * time.Second); err != nil {
		d.t.Errorf("kube-controller-manager: %v\n%s", err, kcm.logTail(30))
	}
	px.close()
	reqs := px.requests()
	d.t.Logf("kube-controller-manager's ConfigMaps requests through the proxy (times from its start):%s", describeRequests(reqs, t0))
	d.t.Logf("turns by user agent: %v", relistTurns(reqs))
	if n := px.opaque; n > 0 {
		d.t.Errorf("%d ConfigMaps watches were not JSON and passed unchanged (is --kube-api-content-type=application/json set?)", n)
	}
	return expectation{
		Description: "the real kube-controller-manager behind a proxy that ends each of its ConfigMaps watches after 0.2-1.5 s " +
			"(a watch-list: after its initial events) with a 410 Expired ERROR event: its reflectors relist again and again",
		RelistLoop: &expectedFinding{User: kcmID.user, Resource: "configmaps", Iterations: relistLoopTurns},
		Silent:     []string{"watch-loop", "watch-rv-regression", "relist-herd"},
	}
}
