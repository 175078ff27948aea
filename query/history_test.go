package query

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestObjectHistoryWatchers on the real engine: the watches of the
// object's resource (and of the resources asked for) grouped by watcher,
// each restart with the resourceVersion it resumed from, so that a
// watcher re-watching Services from one resourceVersion shows next to
// the churn of the Endpoints it explains.
func TestObjectHistoryWatchers(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	const c = "watchers"
	const hostileAgent = `kube-proxy/v1.9.2 <img src=x onerror=alert(1)> '; DROP TABLE audit_events; --`
	var rows []store.Row
	watch := func(id, user, ua, ip, api, resource, ns, rv string, start, end time.Duration, code int32) {
		base := store.Row{Cluster: c, APIServer: api, AuditID: id, Level: "Metadata", Verb: "watch", User: user, UserAgent: ua,
			SourceIP: ip, Resource: resource, Namespace: ns, Watch: true, RequestedRV: rv,
			RequestURI: "/api/v1/" + resource + "?resourceVersion=" + rv + "&watch=true", Raw: []byte(`{"auditID":"` + id + `"}`)}
		rr, rs := base, base
		rr.Stage, rr.Time = "RequestReceived", t0.Add(start)
		rs.Stage, rs.Time = "ResponseStarted", t0.Add(start+time.Millisecond)
		rows = append(rows, rr, rs)
		if end > 0 {
			rc := base
			rc.Stage, rc.Time, rc.Code = "ResponseComplete", t0.Add(end), code
			rows = append(rows, rc)
		}
	}
	write := func(id, verb string, at time.Duration, code int32, rv string) {
		rows = append(rows, store.Row{Cluster: c, AuditID: id, Stage: "ResponseComplete", Level: "Metadata", Verb: verb, Time: t0.Add(at),
			User: "system:serviceaccount:kube-system:endpoint-controller", UserAgent: "kube-controller-manager/v1.9.2", Resource: "endpoints",
			Namespace: "default", Name: "cart", Code: code, ResponseRV: rv, Raw: []byte(`{"auditID":"` + id + `"}`)})
	}
	const kcm = "system:kube-controller-manager"
	// The loop: kube-controller-manager re-watches Services from 281 every
	// 7 s (through a load balancer whose source NAT changes its address);
	// the Endpoints default/cart are deleted and re-created 25 ms after
	// each restart.
	for i := range 6 {
		at := time.Duration(i) * 7 * time.Second
		ip := fmt.Sprintf("10.0.0.%d", 1+i%2)
		watch(fmt.Sprintf("kcm-%d", i), kcm, "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/abc/shared-informers", ip, "master-1",
			"services", "", "281", at, at+7*time.Second-time.Millisecond, 200)
		write(fmt.Sprintf("del-%d", i), "delete", at+25*time.Millisecond, 200, "")
		write(fmt.Sprintf("cre-%d", i), "create", at+30*time.Millisecond, 201, fmt.Sprint(300+i))
	}
	// kube-proxy watches Endpoints from rising resourceVersions, under a
	// hostile user agent; the last watch is still open.
	for i := range 3 {
		at := time.Duration(i) * 15 * time.Second
		end := at + 15*time.Second
		if i == 2 {
			end = 0
		}
		watch(fmt.Sprintf("kp-%d", i), "system:kube-proxy", hostileAgent, "10.1.0.1", "", "endpoints", "", fmt.Sprint(290+10*i), at, end, 200)
	}
	// The loopback informers of two apiservers: two watchers.
	watch("lo-1", "system:apiserver", "kube-apiserver/v1.9.2", "127.0.0.1", "master-1", "endpoints", "", "250", 0, 0, 0)
	watch("lo-2", "system:apiserver", "kube-apiserver/v1.9.2", "127.0.0.1", "master-2", "endpoints", "", "250", 0, 0, 0)
	// Not this object's: another namespace, another resource, a failed
	// watch counts as a restart of its watcher but says its code.
	watch("other-ns", "system:kube-proxy", "kube-proxy/v1.9.2", "10.1.0.1", "", "endpoints", "kube-public", "1", time.Second, 0, 0)
	watch("pods", "system:kube-proxy", "kube-proxy/v1.9.2", "10.1.0.1", "", "pods", "", "1", time.Second, 0, 0)
	watch("kcm-gone", kcm, "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/abc/shared-informers", "10.0.0.1", "master-2",
		"services", "", "281", 35*time.Second+5*time.Millisecond, 35*time.Second+6*time.Millisecond, 410)
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}

	obj := ObjectRef{Cluster: c, Resource: "endpoints", Namespace: "default", Name: "cart"}
	h, err := ObjectHistory(ctx, st, obj, time.Time{}, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 12 {
		t.Fatalf("%d events", len(h.Events))
	}
	// By default the object's own resource: kube-proxy and the two loopbacks.
	progs := func(h History) (out []string) {
		for _, w := range h.Watchers {
			out = append(out, fmt.Sprintf("%s/%s/%s:%d", w.Program, w.Resource, w.Instance, w.Watches))
		}
		return out
	}
	if got, want := progs(h), []string{"kube-proxy/endpoints/:3", "kube-apiserver/endpoints/master-1|127.0.0.1:1", "kube-apiserver/endpoints/master-2|127.0.0.1:1"}; !slices.Equal(got, want) {
		t.Errorf("watchers %q, want %q", got, want)
	}
	kp := h.Watchers[0]
	if kp.UserAgent != hostileAgent || kp.User != "system:kube-proxy" || kp.ResourceVersions != 3 || len(kp.Restarts) != 3 || kp.RestartsTruncated {
		t.Errorf("kube-proxy watcher %+v", kp)
	}
	for i, r := range kp.Restarts {
		if r.ResourceVersion != fmt.Sprint(290+10*i) || !r.Start.Equal(t0.Add(time.Duration(i)*15*time.Second)) || r.AuditID != fmt.Sprintf("kp-%d", i) {
			t.Errorf("kube-proxy restart %d: %+v", i, r)
		}
		if (r.End == nil) != (i == 2) {
			t.Errorf("kube-proxy restart %d end %v", i, r.End)
		}
	}
	if len(h.Watches) != 5 || h.Watches[0].Resource != "endpoints" {
		t.Errorf("watches %+v", h.Watches)
	}

	// With services: the culprit, one watcher across its addresses and
	// apiservers, every restart from 281.
	h, err = ObjectHistoryWith(ctx, st, obj, HistoryOptions{WatchResources: []string{"services", "endpoints", ""}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := progs(h), []string{"kube-controller-manager/services/:7", "kube-proxy/endpoints/:3", "kube-apiserver/endpoints/master-1|127.0.0.1:1", "kube-apiserver/endpoints/master-2|127.0.0.1:1"}; !slices.Equal(got, want) {
		t.Fatalf("watchers %q, want %q", got, want)
	}
	loop := h.Watchers[0]
	if loop.ResourceVersions != 1 || !slices.Equal(loop.SourceIPs, []string{"10.0.0.1", "10.0.0.2"}) || !loop.First.Equal(t0) ||
		!loop.Last.Equal(t0.Add(35*time.Second+5*time.Millisecond)) || len(loop.Restarts) != 7 {
		t.Errorf("the looping watcher %+v", loop)
	}
	for i, r := range loop.Restarts {
		if r.ResourceVersion != "281" || r.End == nil {
			t.Errorf("restart %d: %+v", i, r)
		}
	}
	if last := loop.Restarts[6]; last.AuditID != "kcm-gone" || last.Code != 410 || last.APIServer != "master-2" {
		t.Errorf("the last restart %+v", last)
	}
	if n := len(h.Watches); n != 12 {
		t.Errorf("%d watches with services", n)
	}

	// A busy watcher: only its latest restarts.
	rows = rows[:0]
	for i := range MaxWatcherRestarts + 5 {
		at := time.Duration(i) * 100 * time.Millisecond
		watch(fmt.Sprintf("busy-%03d", i), "busy", "busy/v1", "10.2.0.1", "", "endpoints", "default", fmt.Sprint(i), at, at+50*time.Millisecond, 200)
	}
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	h, err = ObjectHistory(ctx, st, obj, time.Time{}, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	busy := h.Watchers[0]
	if busy.Program != "busy" || busy.Watches != MaxWatcherRestarts+5 || len(busy.Restarts) != MaxWatcherRestarts || !busy.RestartsTruncated ||
		busy.Restarts[0].AuditID != "busy-005" || busy.Restarts[MaxWatcherRestarts-1].AuditID != fmt.Sprintf("busy-%03d", MaxWatcherRestarts+4) {
		t.Errorf("busy watcher: %d watches, %d restarts (truncated %v) from %s", busy.Watches, len(busy.Restarts), busy.RestartsTruncated, busy.Restarts[0].AuditID)
	}

	many := make([]string, MaxWatchResources+1)
	for i := range many {
		many[i] = fmt.Sprint("r", i)
	}
	if _, err := ObjectHistoryWith(ctx, st, obj, HistoryOptions{WatchResources: many}); err == nil {
		t.Error("too many watched resources: no error")
	}
}
