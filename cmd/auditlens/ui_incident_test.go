package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/web"
)

// incidentData builds, on the real engine, a heartbeat-loss wave (cluster
// hb) and an etcd restored without --bump-revision (cluster rb), with a
// finding of each shaped as the detectors' contract says (their evidence
// roles and subjects), so that the finding page's charts are tested
// against what the API reads around them.
type incidentData struct {
	t0        time.Time
	rows      []store.Row
	seq       int
	heartbeat detect.Finding
	rollback  detect.Finding
}

const (
	hostilePod  = `<img src=x onerror=alert(7)>`
	hostileUser = `system:serviceaccount:kube-system:<svg onload=alert(8)>`
)

func (d *incidentData) add(r store.Row) store.Row {
	d.seq++
	r.AuditID = fmt.Sprintf("%s-%05d", r.Cluster, d.seq)
	if r.Stage == "" {
		r.Stage = "ResponseComplete"
	}
	r.Level, r.Raw = "Metadata", []byte(`{"auditID":"`+r.AuditID+`"}`)
	d.rows = append(d.rows, r)
	return r
}

func evidenceOf(r store.Row, role string) detect.Evidence {
	rv := r.ResponseRV
	if rv == "" {
		rv = r.ObjectRV
	}
	if rv == "" {
		rv = r.RequestedRV
	}
	return detect.Evidence{AuditID: r.AuditID, Stage: r.Stage, Time: r.Time, Verb: r.Verb, Resource: r.Resource, Namespace: r.Namespace,
		Name: r.Name, User: r.User, RequestURI: r.RequestURI, Code: r.Code, Role: role, ResourceVersion: rv}
}

// Twelve kubelets renew their Leases every 10 s and post their status
// every minute; nine of them stop at 2 min for 2 min. The node-lifecycle
// controller marks them NotReady and taints them 40 s later, evicts six
// pods, and the kubelets relist when they are back; three nodes keep
// beating all along.
func (d *incidentData) heartbeatWave() {
	const c = "hb"
	nodes := make([]string, 12)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d", i+1)
	}
	f := detect.Finding{ID: "heartbeat-loss-ui", Detector: "heartbeat-loss", Cluster: c, Severity: detect.Critical, Confidence: 0.9,
		Title: "9 of 12 nodes stopped heartbeating at once", FirstSeen: d.t0.Add(2 * time.Minute), LastSeen: d.t0.Add(4*time.Minute + 10*time.Second),
		Summary:     "Nine kubelets stopped renewing their Leases within 8 s while the rest of the feed went on; they came back 2 min later.",
		Remediation: "Check the load balancer in front of the apiservers."}
	last := map[string]store.Row{}
	for i, n := range nodes {
		lost := i < 9
		stop := 2*time.Minute - time.Duration(i)*time.Second // the wave: within a few seconds
		for at := time.Duration(i) * 700 * time.Millisecond; at < 6*time.Minute; at += 10 * time.Second {
			if lost && at >= stop && at < 4*time.Minute {
				continue
			}
			r := d.add(store.Row{Cluster: c, Time: d.t0.Add(at), Verb: "update", User: "system:node:" + n, UserAgent: "kubelet/v1.37.2",
				Resource: "leases", APIGroup: "coordination.k8s.io", Namespace: "kube-node-lease", Name: n, Code: 200,
				RequestURI: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + n})
			if lost && at < stop {
				last[n] = r
			}
			if lost && at >= 4*time.Minute && at < 4*time.Minute+10*time.Second {
				f.Evidence = append(f.Evidence, evidenceOf(r, "heartbeat-resumed"))
			}
		}
		for at := 5 * time.Second; at < 6*time.Minute; at += time.Minute {
			if lost && at >= stop && at < 4*time.Minute {
				continue
			}
			d.add(store.Row{Cluster: c, Time: d.t0.Add(at), Verb: "patch", User: "system:node:" + n, UserAgent: "kubelet/v1.37.2",
				Resource: "nodes", Subresource: "status", Name: n, Code: 200, RequestURI: "/api/v1/nodes/" + n + "/status"})
		}
		if !lost {
			continue
		}
		f.Objects = append(f.Objects, detect.Object{Resource: "nodes", Name: n})
		f.Evidence = append(f.Evidence, evidenceOf(last[n], "last-heartbeat"))
		nr := d.add(store.Row{Cluster: c, Time: d.t0.Add(2*time.Minute + 40*time.Second + time.Duration(i)*100*time.Millisecond), Verb: "patch",
			User: "system:serviceaccount:kube-system:node-controller", Resource: "nodes", Subresource: "status", Name: n, Code: 200,
			RequestURI: "/api/v1/nodes/" + n + "/status"})
		taint := d.add(store.Row{Cluster: c, Time: nr.Time.Add(300 * time.Millisecond), Verb: "update",
			User: "system:serviceaccount:kube-system:node-controller", Resource: "nodes", Name: n, Code: 200, RequestURI: "/api/v1/nodes/" + n})
		relist := d.add(store.Row{Cluster: c, Time: d.t0.Add(4*time.Minute + 2*time.Second + time.Duration(i)*200*time.Millisecond), Verb: "list",
			User: "system:node:" + n, Resource: "pods", Code: 200, RequestURI: "/api/v1/pods?fieldSelector=spec.nodeName%3D" + n})
		f.Evidence = append(f.Evidence, evidenceOf(nr, "not-ready"), evidenceOf(taint, "taint"), evidenceOf(relist, "relist"))
	}
	for i, pod := range []string{"web-1", "web-2", "api-7", "db-0", "cache-3", hostilePod} {
		user := "system:serviceaccount:kube-system:node-controller"
		if pod == hostilePod {
			user = hostileUser
		}
		r := d.add(store.Row{Cluster: c, Time: d.t0.Add(3*time.Minute + time.Duration(i)*1500*time.Millisecond), Verb: "delete", User: user,
			Resource: "pods", Namespace: "shop", Name: pod, Code: 200, RequestURI: "/api/v1/namespaces/shop/pods/" + url.PathEscape(pod)})
		f.Objects = append(f.Objects, detect.Object{Resource: "pods", Namespace: "shop", Name: pod})
		f.Evidence = append(f.Evidence, evidenceOf(r, "eviction"))
	}
	d.heartbeat = f
}

// Writes every 2 s from resourceVersion 50000 up; at 3 min etcd is restored
// from a snapshot 1000 revisions older and the writes go on from 49890.
// Three clients keep watching from resourceVersions above the new head,
// kubelets' Lease renewals get 409, clients relist, Endpoints churn.
func (d *incidentData) rvRollback() {
	const c = "rb"
	restore := 3 * time.Minute
	f := detect.Finding{ID: "rv-rollback-ui", Detector: "rv-rollback", Cluster: c, Severity: detect.Critical, Confidence: 0.95,
		Title: "The cluster's resourceVersion went back by 1000", FirstSeen: d.t0.Add(restore - 2*time.Second), LastSeen: d.t0.Add(restore + 90*time.Second),
		Summary:     "etcd was restored from an older snapshot without --bump-revision; three clients watch from the future.",
		Remediation: "Restore with etcdutl snapshot restore --bump-revision and --mark-compacted; restart the stuck clients."}
	var before, after store.Row
	for at := time.Duration(0); at < 6*time.Minute; at += 2 * time.Second {
		rv := 50000 + int(at/time.Second)*5
		if at >= restore {
			rv = 49890 + int((at-restore)/time.Second)*5
		}
		r := d.add(store.Row{Cluster: c, Time: d.t0.Add(at), Verb: "update", User: "system:kube-controller-manager", Resource: "configmaps",
			Namespace: "kube-system", Name: "leader", Code: 200, ObjectRV: fmt.Sprint(rv - 3), ResponseRV: fmt.Sprint(rv)})
		if at < restore {
			before = r
		} else if after.AuditID == "" {
			after = r
		}
	}
	f.Subjects = detect.Subjects{PreviousResourceVersion: before.ResponseRV, ResourceVersion: after.ResponseRV}
	f.Evidence = append(f.Evidence, evidenceOf(before, "head-before"), evidenceOf(after, "head-after"))
	for i, cl := range []struct{ user, resource, rv string }{
		{"system:kube-proxy", "services", "50880"},
		{"system:node:node-01", "pods", "50850"},
		{"system:serviceaccount:kube-system:coredns", "endpointslices", "50860"},
	} {
		for k := range 3 {
			r := d.add(store.Row{Cluster: c, Stage: "ResponseStarted", Time: d.t0.Add(restore + time.Duration(5+i+k*30)*time.Second), Verb: "watch",
				User: cl.user, Resource: cl.resource, Watch: true, RequestedRV: cl.rv, Code: 200,
				RequestURI: "/api/v1/" + cl.resource + "?resourceVersion=" + cl.rv + "&watch=true"})
			f.Evidence = append(f.Evidence, evidenceOf(r, "future-watch"))
		}
	}
	for i := range 4 {
		n := fmt.Sprintf("node-%02d", i+1)
		r := d.add(store.Row{Cluster: c, Time: d.t0.Add(restore + time.Duration(2+i)*time.Second), Verb: "update", User: "system:node:" + n,
			Resource: "leases", Namespace: "kube-node-lease", Name: n, Code: 409, ObjectRV: fmt.Sprint(50890 - i)})
		f.Evidence = append(f.Evidence, evidenceOf(r, "conflict"))
		l := d.add(store.Row{Cluster: c, Time: d.t0.Add(restore + time.Duration(40+i)*time.Second), Verb: "list", User: "system:node:" + n,
			Resource: "pods", Code: 200, RequestURI: "/api/v1/pods"})
		f.Evidence = append(f.Evidence, evidenceOf(l, "relist"))
	}
	for i, svc := range []string{"cart", "checkout", "search"} {
		r := d.add(store.Row{Cluster: c, Time: d.t0.Add(restore + time.Duration(20+i)*time.Second), Verb: "delete",
			User: "system:serviceaccount:kube-system:endpoint-controller", Resource: "endpoints", Namespace: "default", Name: svc, Code: 200})
		f.Evidence = append(f.Evidence, evidenceOf(r, "churn"))
		f.Objects = append(f.Objects, detect.Object{Resource: "endpoints", Namespace: "default", Name: svc})
	}
	d.rollback = f
}

// TestUIIncidentCharts draws a heartbeat-loss and an rv-rollback finding
// in a real browser over the real engine: the nodes' lanes with their
// heartbeats and gaps, the resourceVersion line with its drop and the
// clients above it. TestUIIncidentScenarios draws the detectors' own findings.
func TestUIIncidentCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	chromiumPath(t)
	st := storetest.Open(t)
	d := &incidentData{t0: time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)}
	d.heartbeatWave()
	d.rvRollback()
	if err := st.Insert(t.Context(), d.rows); err != nil {
		t.Fatal(err)
	}
	repo := detect.NewRepository(st, nil)
	if err := repo.Upsert(t.Context(), []detect.Finding{d.heartbeat, d.rollback}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.NewRouter(web.Config{Store: st, Findings: repo, Now: func() time.Time { return d.t0.Add(time.Hour) }}))
	t.Cleanup(srv.Close)
	b := newBrowser(t, 1280, 900)

	t.Run("heartbeat-loss", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(srv.URL + "/findings/" + d.heartbeat.ID))
		b.waitReady("finding", `document.querySelectorAll("#evidence svg g.node-lane").length > 0`)
		type lane struct {
			Node          string
			Beats         int
			Gaps          []float64 // x, width of each gap
			GapFrom       string
			GapTo         string
			BeatX         []float64 // the x of every Lease renewal tick
			NotReady      []float64
			Taint         []float64
			Resumed       int
			Relists       int
			LastHeartbeat []float64
		}
		var got struct {
			Lanes, Others []lane
			Evictions     int
			Summary       []string
			Injected      int
			Labels        []string
		}
		b.eval(`(() => {
			const cs = (root, sel) => [...root.querySelectorAll(sel)];
			const xs = (root, sel) => cs(root, sel).map(m => m.getBBox().x + m.getBBox().width / 2);
			const lane = g => {
				const gap = g.querySelector("rect.gap");
				const d = g.querySelector("path.beat-lease")?.getAttribute("d") ?? "";
				return {
					node: g.dataset.node, beats: Number(g.dataset.beats),
					gaps: cs(g, "rect.gap").flatMap(r => [parseFloat(r.getAttribute("x")), parseFloat(r.getAttribute("width"))]),
					gapFrom: gap?.dataset.from ?? "", gapTo: gap?.dataset.to ?? "",
					beatX: [...d.matchAll(/M([0-9.]+),/g)].map(m => parseFloat(m[1])),
					notReady: xs(g, ".mark.not-ready"), taint: xs(g, ".mark.taint"),
					resumed: cs(g, ".mark.resumed").length, relists: cs(g, ".mark.relist").length,
					lastHeartbeat: xs(g, ".mark.last-heartbeat"),
				};
			};
			return {
				lanes: cs(document, "#evidence svg g.node-lane").map(lane),
				others: cs(document, "#evidence svg g.other-lane").map(lane),
				evictions: cs(document, "#evidence svg g.eviction-lane .mark.eviction").length,
				summary: cs(document, "#incident-summary li").map(li => li.textContent),
				injected: document.querySelectorAll("main img, #evidence script, #incident-summary svg").length,
				labels: cs(document, "#subjects th").map(th => th.textContent),
			};
		})()`, &got)
		if len(got.Lanes) != 9 || len(got.Others) != 3 {
			t.Fatalf("%d lanes of lost nodes, %d of others; want 9 and 3", len(got.Lanes), len(got.Others))
		}
		for i, l := range got.Lanes {
			if l.Node != fmt.Sprintf("node-%02d", i+1) || l.Beats < 10 || len(l.Gaps) != 2 || len(l.NotReady) != 1 || len(l.Taint) != 1 || l.Resumed != 1 ||
				l.Relists != 1 || len(l.LastHeartbeat) != 1 {
				t.Errorf("lane %d: %+v", i, l)
				continue
			}
			// The gap runs from the last heartbeat to the first one back:
			// no tick inside it, the NotReady and taint marks in it.
			x0, x1 := l.Gaps[0], l.Gaps[0]+l.Gaps[1]
			for _, bx := range l.BeatX {
				if bx > x0+1 && bx < x1-1 {
					t.Errorf("%s: a heartbeat tick at x %.1f inside the gap %.1f–%.1f", l.Node, bx, x0, x1)
					break
				}
			}
			if !(l.NotReady[0] > x0 && l.NotReady[0] < x1 && l.Taint[0] > x0 && l.Taint[0] < x1) || l.LastHeartbeat[0] > x0+2 || l.LastHeartbeat[0] < x0-2 {
				t.Errorf("%s: gap %.1f–%.1f, NotReady at %.1f, taint at %.1f, last heartbeat at %.1f", l.Node, x0, x1, l.NotReady[0], l.Taint[0], l.LastHeartbeat[0])
			}
			from, err1 := time.Parse(time.RFC3339Nano, l.GapFrom)
			to, err2 := time.Parse(time.RFC3339Nano, l.GapTo)
			if err1 != nil || err2 != nil || to.Sub(from) < 2*time.Minute || to.Sub(from) > 2*time.Minute+30*time.Second {
				t.Errorf("%s: gap from %q to %q", l.Node, l.GapFrom, l.GapTo)
			}
		}
		for _, l := range got.Others {
			if l.Beats < 20 || len(l.Gaps) != 0 || !strings.HasPrefix(l.Node, "node-1") {
				t.Errorf("a node that kept beating: %+v", l)
			}
		}
		summary := strings.Join(got.Summary, "\n")
		if got.Evictions != 6 || !strings.Contains(summary, "6 pods evicted") || !strings.Contains(summary, hostilePod) ||
			!strings.Contains(summary, "node-01: no heartbeat from 07:01:50") || !strings.Contains(summary, "NotReady at 07:02:40") {
			t.Errorf("%d evictions drawn; summary:\n%s", got.Evictions, summary)
		}
		if got.Injected != 0 {
			t.Errorf("%d elements injected by event data", got.Injected)
		}
		b.checkClean()
	})

	t.Run("rv-rollback", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(srv.URL + "/findings/" + d.rollback.ID))
		b.waitReady("finding", `document.querySelector("#evidence svg .mark.head-after") !== null`)
		var got struct {
			HeadLines     int
			HeadPoints    int
			Before, After []float64 // cx, cy
			Future        [][]float64
			Clients       []string
			DropLabel     string
			Band          bool
			Lanes         []string
			Summary       []string
			SubjectLabels []string
			Conflicts     int
		}
		b.eval(`(() => {
			const cs = sel => [...document.querySelectorAll(sel)];
			const c = el => el ? [parseFloat(el.getAttribute("cx")), parseFloat(el.getAttribute("cy"))] : [];
			return {
				headLines: cs("#evidence svg polyline.rv-head").length,
				headPoints: cs("#evidence svg circle.rv-head-point").length,
				before: c(document.querySelector("#evidence svg .mark.head-before")),
				after: c(document.querySelector("#evidence svg .mark.head-after")),
				future: cs("#evidence svg .mark.future-watch").map(c),
				clients: cs("#evidence svg text.client-label").map(t => t.firstChild.textContent),
				dropLabel: document.querySelector("#evidence svg .drop-label")?.textContent ?? "",
				band: document.querySelector("#evidence svg .future-band") !== null,
				lanes: cs("#evidence svg g.lane[data-role]").map(g => g.dataset.role),
				summary: cs("#incident-summary li").map(li => li.textContent),
				subjectLabels: cs("#subjects th").map(th => th.textContent),
				conflicts: cs("#evidence svg .mark.conflict").length,
			};
		})()`, &got)
		if got.HeadLines != 2 || got.HeadPoints < 30 || len(got.Before) != 2 || len(got.After) != 2 {
			t.Fatalf("head line in %d parts, %d points, before %v, after %v", got.HeadLines, got.HeadPoints, got.Before, got.After)
		}
		// SVG y grows downwards: the head before the drop is higher, and
		// every client from the future is above the head after it.
		if !(got.Before[1] < got.After[1]) || got.DropLabel != "dropped by 1000" || !got.Band {
			t.Errorf("before %v after %v, drop label %q, band %v", got.Before, got.After, got.DropLabel, got.Band)
		}
		if len(got.Future) != 9 {
			t.Errorf("%d future watches drawn, want 9", len(got.Future))
		}
		for _, p := range got.Future {
			if !(p[1] < got.After[1]-20) {
				t.Errorf("a future watch at y %.1f, not above the new head at %.1f", p[1], got.After[1])
			}
		}
		if strings.Join(got.Clients, ",") != "kube-proxy,coredns (sa),node:node-01" {
			t.Errorf("client labels %q", got.Clients)
		}
		// The conflicts carry the resourceVersion the kubelets held: drawn
		// above the new head, not in a lane.
		if strings.Join(got.Lanes, ",") != "relist,churn" || got.Conflicts != 4 {
			t.Errorf("lanes %q, %d conflicts", got.Lanes, got.Conflicts)
		}
		summary := strings.Join(got.Summary, "\n")
		if !strings.Contains(summary, "Head 50890 at 07:02:58") || !strings.Contains(summary, "→ 49890 at 07:03:00") ||
			!strings.Contains(summary, "system:kube-proxy: watched from resourceVersion 50880 (3 watches") {
			t.Errorf("summary:\n%s", summary)
		}
		if !strings.Contains(strings.Join(got.SubjectLabels, ","), "Head before the drop") {
			t.Errorf("subject labels %q", got.SubjectLabels)
		}
		b.checkClean()
	})
}

// TestUIIncidentScenarios draws the findings the detectors make of
// generated scenarios at the real time scale: a heartbeat-loss wave with
// evictions, an etcd restored without --bump-revision and one restored
// with it. It takes the README's screenshots (AUDITLENS_UI_SCREENSHOTS=DIR,
// `make screenshots`).
func TestUIIncidentScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	chromiumPath(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	scenarios := []string{"heartbeat-loss-partial-evictions", "etcd-restore", "etcd-restore-bump"}
	for _, sc := range scenarios {
		log := genScenarioLog(t, dir, sc, "--scale", "real")
		if stdout, stderr, code := runCLI(t, "import", "--store", "chdb://"+filepath.Join(data, "clickhouse"), "--cluster", sc, "--progress", "never", log); code != 0 {
			t.Fatalf("import %s: exit %d\n%s\n%s", sc, code, stdout, stderr)
		}
	}
	srv := startServe(t, "--data", data, "--detect=false") // import ran the detectors
	findingOf := func(t *testing.T, detector, cluster string) detect.Finding {
		t.Helper()
		var fs []detect.Finding
		code, lines := srv.get("/api/v1/findings?since=2025-12-01T00:00:00Z&detector=" + detector + "&cluster=" + cluster)
		if code != 200 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &fs) != nil || len(fs) != 1 {
			t.Fatalf("the %s finding of %s: %d %.300q", detector, cluster, code, lines)
		}
		return fs[0]
	}
	b := newBrowser(t, 1280, 900)

	t.Run("heartbeat-loss", func(t *testing.T) {
		b.t = t
		f := findingOf(t, "heartbeat-loss", "heartbeat-loss-partial-evictions")
		var evictions int
		for _, e := range f.Evidence {
			if e.Role == heartbeatloss.RoleEviction {
				evictions++
			}
		}
		if f.Severity != detect.Critical || f.Subjects.NodesLost < 2 || evictions == 0 {
			t.Fatalf("the wave: %s, %d nodes lost, %d evictions", f.Severity, f.Subjects.NodesLost, evictions)
		}
		b.run(chromedp.Navigate(srv.base + "/findings/" + f.ID))
		b.waitReady("finding", `document.querySelectorAll("#evidence svg g.node-lane").length > 0`)
		var got struct {
			Lanes, WithGap, WithBeats, Others, Evictions, NotReady int
		}
		b.eval(`(() => {
			const lanes = [...document.querySelectorAll("#evidence svg g.node-lane")];
			return {
				lanes: lanes.length,
				withGap: lanes.filter(g => g.querySelector("rect.gap")).length,
				withBeats: lanes.filter(g => Number(g.dataset.beats) > 0).length,
				others: document.querySelectorAll("#evidence svg g.other-lane").length,
				evictions: document.querySelectorAll("#evidence svg .mark.eviction").length,
				notReady: document.querySelectorAll("#evidence svg .mark.not-ready").length,
			};
		})()`, &got)
		// A lane per lost node, each with its heartbeats read from the
		// store and its gap; nodes that kept beating; every eviction.
		if got.Lanes != f.Subjects.NodesLost || got.WithGap != got.Lanes || got.WithBeats != got.Lanes || got.Others == 0 ||
			got.Evictions != evictions || got.NotReady == 0 {
			t.Errorf("drawn %+v; the finding: %d nodes lost, %d evictions", got, f.Subjects.NodesLost, evictions)
		}
		shotTo(b, "heartbeat-loss", "#evidence")
		b.checkClean()
	})

	t.Run("rv-rollback", func(t *testing.T) {
		b.t = t
		f := findingOf(t, "rv-rollback", "etcd-restore")
		if f.Severity != detect.Critical || len(f.Subjects.Stuck) == 0 {
			t.Fatalf("the restore: %s, %d stuck clients", f.Severity, len(f.Subjects.Stuck))
		}
		b.run(chromedp.Navigate(srv.base + "/findings/" + f.ID))
		b.waitReady("finding", `document.querySelector("#evidence svg .mark.head-after") !== null`)
		var got struct {
			Before, After []float64
			Bands         [][]float64 // y, height
			Labels        []string
			DropLabel     string
			Band          bool
			StuckRows     int
		}
		b.eval(`(() => {
			const c = el => el ? [parseFloat(el.getAttribute("cx")), parseFloat(el.getAttribute("cy"))] : [];
			return {
				before: c(document.querySelector("#evidence svg .mark.head-before")),
				after: c(document.querySelector("#evidence svg .mark.head-after")),
				bands: [...document.querySelectorAll("#evidence svg rect.client-band")].map(r => [parseFloat(r.getAttribute("y")), parseFloat(r.getAttribute("height"))]),
				labels: [...document.querySelectorAll("#evidence svg text.client-label")].map(t => t.firstChild.textContent),
				dropLabel: document.querySelector("#evidence svg .drop-label")?.textContent ?? "",
				band: document.querySelector("#evidence svg .future-band") !== null,
				stuckRows: document.querySelectorAll("[data-subject=stuck] tbody tr").length,
			};
		})()`, &got)
		prev, _ := strconv.ParseInt(f.Subjects.PreviousResourceVersion, 10, 64)
		next, _ := strconv.ParseInt(f.Subjects.ResourceVersion, 10, 64)
		if len(got.Before) != 2 || len(got.After) != 2 || !(got.Before[1] < got.After[1]) || got.DropLabel != fmt.Sprintf("dropped by %d", prev-next) || !got.Band {
			t.Errorf("before %v, after %v, drop label %q (want dropped by %d), band %v", got.Before, got.After, got.DropLabel, prev-next, got.Band)
		}
		// Every stuck client above the new head, labelled, and listed.
		if len(got.Bands) != len(f.Subjects.Stuck) || len(got.Labels) != len(f.Subjects.Stuck) || got.StuckRows != len(f.Subjects.Stuck) {
			t.Errorf("%d bands, labels %q, %d rows for %d stuck clients", len(got.Bands), got.Labels, got.StuckRows, len(f.Subjects.Stuck))
		}
		for _, bd := range got.Bands {
			if bd[0]+bd[1] >= got.After[1] {
				t.Errorf("a stuck client's band at y %v, not above the new head at %.1f", bd, got.After[1])
			}
		}
		shotTo(b, "rv-rollback", "#evidence")
		b.checkClean()
	})

	t.Run("safe restore", func(t *testing.T) {
		b.t = t
		f := findingOf(t, "rv-rollback", "etcd-restore-bump")
		b.run(chromedp.Navigate(srv.base + "/findings/" + f.ID))
		b.waitReady("finding", `document.querySelector("#evidence svg .mark.head-after") !== null`)
		var label string
		var band bool
		b.eval(`document.querySelector("#evidence svg .drop-label")?.textContent ?? ""`, &label)
		b.eval(`document.querySelector("#evidence svg .future-band") !== null`, &band)
		if f.Severity == detect.Critical || !strings.HasPrefix(label, "jumped by ") || band {
			t.Errorf("a restore with --bump-revision: %s, label %q, future band %v", f.Severity, label, band)
		}
		b.checkClean()
	})
}

// shotTo saves the page from its top to the bottom of the card holding
// sel as NAME.png (in AUDITLENS_UI_SCREENSHOTS, else a temporary
// directory): the finding and its chart, without the long evidence table.
func shotTo(b *browser, name, sel string) {
	b.t.Helper()
	var bottom float64
	b.eval(fmt.Sprintf(`(() => { const r = document.querySelector(%q).closest("section").getBoundingClientRect(); return r.bottom + window.scrollY + 12; })()`, sel), &bottom)
	var width float64
	b.eval(`document.documentElement.clientWidth`, &width)
	dir := os.Getenv("AUDITLENS_UI_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	shot := chromedp.Action[[]byte](func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{CaptureBeyondViewport: new(true), FromSurface: new(true),
			Clip: &page.Viewport{X: 0, Y: 0, Width: width, Height: bottom, Scale: 1}})
		if err != nil {
			return nil, err
		}
		return r.Data, nil
	})
	png, err := chromedp.Run(ctx, shot)
	if err != nil || len(png) < 1000 {
		b.t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
