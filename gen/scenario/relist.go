package scenario

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Relist loops and relist herds: clients whose watches end within
// seconds and who relist after each (the "too old resource version" loop
// of seed 000's controller logs), many clients relisting one resource at
// once (kubelets reconnecting after a load balancer failover, seed 004),
// and the look-alikes that must stay silent.

// RelistLoop is one client (program identity: user and user-agent
// product) stuck relisting one resource.
type RelistLoop struct {
	Client   Client // its first instance
	Resource string
	// Instances are the addresses of the instances that looped.
	Instances []string
	// Turns counts the short watches followed by a relist, all instances
	// together.
	Turns int
}

// RelistHerd is many clients relisting one resource at once.
type RelistHerd struct {
	Resource string
	// Clients counts the distinct clients that relisted.
	Clients int
	// At is when the first of them relisted.
	At time.Time
}

var relistScenarios = []Scenario{
	{
		Name: "relist-loop",
		Doc: "Kubernetes 1.37: kube-controller-manager's Secrets reflector and the Endpoints reflectors of kube-proxy on " +
			"three nodes fall into the \"too old resource version\" loop part-way through the trace: each watch ends after 2 ms " +
			"to 3 s (410 Expired inside the stream; the audit shows 200), the reflector backs off (0.8 s doubling to 30 s, with " +
			"jitter) and relists — paginated, 1 to 4 pages of 500 — then watches from the list's resourceVersion, which is too " +
			"old again. Healthy reflectors run beside them. Expect two relist-loop findings (kube-controller-manager on " +
			"secrets; kube-proxy on endpoints, three instances), critical at the real scale (the loops run for most of an " +
			"hour), warnings at the compressed one; no herd, watch loop or regression.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRelistLoop,
	},
	{
		Name: "relist-loop-watch-list",
		Doc: "Kubernetes 1.37 with watch-list: kube-controller-manager relists ServiceAccounts with watch-lists " +
			"(sendInitialEvents=true) that a proxy cuts after 0.3 to 4 s, each followed, after the reflector's backoff, by " +
			"another watch-list; two replicas of an operator (one service account, two pod addresses) loop on the Pods of " +
			"namespace shop with plain watches and single-page lists. Expect two relist-loop findings.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRelistLoopWatchList,
	},
	{
		Name: "relist-herd-kubelets",
		Doc: "Kubernetes 1.37, 12 to 40 kubelets (by seed) watching their Pods (fieldSelector spec.nodeName) and the " +
			"Services. A load balancer fails over: every kubelet's connection drops at once; each reconnects within 20 s, its " +
			"watches from the old resourceVersion end at once (410), and after its backoff it lists Pods and Services again. " +
			"Before, an admin lists Pods now and then and two kubelets restart. Expect two relist-herd findings (pods, " +
			"services), each naming every kubelet, and no relist loop.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRelistHerd,
	},
	{
		Name: "relist-herd-rollout",
		Doc: "Kubernetes 1.37, 12 to 40 kubelets (by seed) running the pods of three to six Deployments of namespace shop; " +
			"each kubelet watches its Pods (fieldSelector spec.nodeName) and, per object (fieldSelector metadata.name), the " +
			"ConfigMap and Secret its pod mounts. A rollout replaces every Deployment's ConfigMap by one of a new name (a hash " +
			"suffix) and lands a new pod on every kubelet within 20 to 50 s: each kubelet reads the new pod's ConfigMap — and " +
			"its Secret, when its old pod was of another Deployment — for the first time (a list by field selector, then " +
			"watches), and stops watching the old pod's objects. Expect no finding: a client's first read of an object is no " +
			"relist, however many read at once.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRelistRollout,
	},
	{
		Name: "relist-controls",
		Doc: "Kubernetes 1.37, look-alikes of relist loops and herds: kube-controller-manager and kube-scheduler restart and " +
			"list every resource (some through watch-lists, big ones paginated); velero pages once through every ConfigMap " +
			"(40 pages); an ingress controller behind a proxy whose watches are cut after 1 to 4 s re-watches from its last " +
			"resourceVersion without listing; 16 kubelets restart one after another, 40 to 60 s apart, each listing Pods and " +
			"Services; an apiserver restart makes five kube-proxies relist once within a minute; an admin's `kubectl get -w` " +
			"sessions end after a few seconds. Expect no finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRelistControls,
	},
}

func init() {
	for _, sc := range relistScenarios {
		sc.salted = true
		all = append(all, sc)
	}
}

// timedWatch emits a watch of res that lasts d; its URI asks for a
// timeout the reflector's (timeoutSeconds: 5–10 minutes at the real
// scale), whatever d is. sel is a field selector.
func (s *sim) timedWatch(t time.Time, d time.Duration, c Client, res, ns, sel, rv string) string {
	q := ""
	if s.bookmarks() {
		q = "allowWatchBookmarks=true&"
	}
	if sel != "" {
		q += "fieldSelector=" + url.QueryEscape(sel) + "&"
	}
	timeout := s.between(s.scale.RestartMin, s.scale.RestartMax)
	q += "resourceVersion=" + rv + "&timeoutSeconds=" + strconv.Itoa(int(timeout.Seconds())) + "&watch=true"
	id := s.do(t, d, request{c: c, verb: "watch", uri: path(res, ns) + "?" + q, level: auditv1.LevelMetadata,
		ref: auditv1.ObjectReference{Resource: res, Namespace: ns, Name: selectedName(sel), APIVersion: "v1"}, status: &metav1.Status{Code: 200}})
	s.noteWatch(c, res, ns, sel, rv, id)
	return id
}

// pagedList emits a reflector's list of res from rv ("" for the newest)
// in pages of 500: the first page, then one request per continue token.
// It returns when the last page ended and the list's resourceVersion.
func (s *sim) pagedList(t time.Time, c Client, res, ns, sel, rv string, pages int) (time.Time, int64) {
	rev := s.currentRev(t)
	q := ""
	if sel != "" {
		q = "fieldSelector=" + url.QueryEscape(sel) + "&"
	}
	for i := range max(pages, 1) {
		uri := path(res, ns) + "?"
		if i == 0 {
			uri += q + "limit=500"
			if rv != "" {
				uri += "&resourceVersion=" + rv
			}
		} else {
			token := base64.StdEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":` + strconv.FormatInt(rev, 10) +
				`,"start":"page-` + strconv.Itoa(i) + `"}`))
			uri += "continue=" + url.QueryEscape(token) + "&" + q + "limit=500"
		}
		lat := s.between(5*time.Millisecond, 250*time.Millisecond)
		s.do(t, lat, request{c: c, verb: "list", uri: uri, level: auditv1.LevelMetadata,
			ref: auditv1.ObjectReference{Resource: res, Namespace: ns, Name: selectedName(sel), APIVersion: "v1"}, status: &metav1.Status{Code: 200}})
		t = t.Add(lat + s.between(200*time.Microsecond, 2*time.Millisecond))
	}
	delete(s.seen, reflectorKey{c.key(), res, ns, sel})
	return t, rev
}

// selectedName is the object a field selector names alone
// (metadata.name=<name>): the apiserver puts it in objectRef.name of the
// list or watch, as it does for a get.
func selectedName(sel string) string {
	if name, ok := strings.CutPrefix(sel, "metadata.name="); ok && !strings.ContainsAny(name, ",=") {
		return name
	}
	return ""
}

// healthyWatches runs a reflector's healthy watches from from until its
// watch in progress at until ends there (cut: a connection that drops);
// it returns the resourceVersion it holds then.
func (s *sim) healthyWatches(c Client, res, ns, sel string, from, until time.Time) string {
	rv := s.follow(res)
	last := rv(from)
	for t := from; t.Before(until); {
		last = rv(t)
		d := s.between(s.scale.RestartMin, s.scale.RestartMax).Truncate(time.Second)
		if t.Add(d).After(until) {
			d = until.Sub(t)
		}
		s.timedWatch(t, d, c, res, ns, sel, last)
		t = t.Add(d + s.between(time.Millisecond, 150*time.Millisecond))
	}
	return last
}

// loopSpec is a reflector in the relist loop.
type loopSpec struct {
	c            Client
	res, ns, sel string
	watchList    bool             // relists are watch-lists, each also the (short) watch
	pages        [2]int           // pages per list
	lasts        [2]time.Duration // how long each watch lasts
	from, until  time.Time
	rv           string // the resourceVersion its healthy watches held
	turns        int
}

// relistLoop runs l: a short watch from the resourceVersion it held, then
// backoff, relist, short watch, backoff, … until l.until. Turns counts the
// relists that followed a short watch and started before the trace's end.
func (s *sim) relistLoop(l *loopSpec) {
	backoff := 800 * time.Millisecond
	next := func() time.Duration {
		b := backoff + time.Duration(s.rng.Int64N(int64(backoff))) // client-go: jitter 1.0
		backoff = min(2*backoff, 30*time.Second)
		return b
	}
	d := s.between(l.lasts[0], l.lasts[1])
	s.timedWatch(l.from, d, l.c, l.res, l.ns, l.sel, l.rv)
	t := l.from.Add(d + next())
	rv := l.rv
	for t.Before(l.until) {
		if t.Before(s.end) {
			l.turns++
		}
		d = s.between(l.lasts[0], l.lasts[1])
		if l.watchList {
			s.watchList(t, d, l.c, l.res, l.ns, rv)
			t = t.Add(d)
		} else {
			end, rev := s.pagedList(t, l.c, l.res, l.ns, l.sel, rv, l.pages[0]+s.rng.IntN(l.pages[1]-l.pages[0]+1))
			rv = strconv.FormatInt(rev, 10)
			t = end.Add(s.between(time.Millisecond, 5*time.Millisecond))
			s.timedWatch(t, d, l.c, l.res, l.ns, l.sel, rv)
			t = t.Add(d)
		}
		t = t.Add(next())
	}
}

// loopTruth adds the loops of specs to the truth, one per program
// identity and resource.
func (s *sim) loopTruth(specs []*loopSpec) {
	for _, l := range specs {
		found := false
		for i := range s.want.RelistLoops {
			w := &s.want.RelistLoops[i]
			if w.Client.User == l.c.User && w.Resource == l.res {
				w.Turns += l.turns
				w.Instances = append(w.Instances, l.c.SourceIP)
				found = true
			}
		}
		if !found {
			s.want.RelistLoops = append(s.want.RelistLoops, RelistLoop{Client: l.c, Resource: l.res,
				Instances: []string{l.c.SourceIP}, Turns: l.turns})
		}
	}
}

// leaderLeases renews kube-controller-manager's and kube-scheduler's
// leader-election Leases every 2 s, as a real control plane does: each
// update carries the resourceVersion its client held (objectRef, from the
// request body) and writes a new one, so the cluster's head shows in the
// audit log all along, not only at the rare writes of the background.
func (s *sim) leaderLeases() {
	renew := 2 * time.Second
	for _, l := range []struct {
		c    Client
		name string
	}{{s.kcm(), "kube-controller-manager"}, {s.scheduler(), "kube-scheduler"}} {
		held := s.currentRev(s.t0)
		for t := s.t0.Add(s.between(0, renew)); t.Before(s.end); t = t.Add(s.between(renew*9/10, renew*11/10)) {
			lat := s.between(2*time.Millisecond, 10*time.Millisecond)
			s.do(t, lat, request{c: l.c, verb: "update",
				uri: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + l.name + "?timeout=5s",
				ref: auditv1.ObjectReference{Resource: "leases", Namespace: "kube-system", Name: l.name, APIGroup: "coordination.k8s.io",
					APIVersion: "v1", ResourceVersion: strconv.FormatInt(held, 10)},
				level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
			held = s.revAt(t.Add(lat))
		}
	}
}

// traceEnd is the end of a relist scenario: periods restart periods, and
// at least five minutes, so that a compressed trace has minutes enough
// to learn how often its clients relist.
func (s *sim) traceEnd(periods int) time.Time {
	return s.at(max(time.Duration(periods)*s.period(), 5*time.Minute))
}

func buildRelistLoop(s *sim) {
	s.seedCluster()
	s.end = s.traceEnd(8)
	s.background()
	s.leaderLeases()
	span := s.end.Sub(s.t0)
	kcm := s.kcm()
	var specs []*loopSpec
	// kube-controller-manager's Secrets (its background informers do
	// not watch them): paginated lists.
	from := s.t0.Add(span/5 + s.between(0, span/10))
	specs = append(specs, &loopSpec{c: kcm, res: "secrets", pages: [2]int{1, 4},
		lasts: [2]time.Duration{2 * time.Millisecond, 3 * time.Second}, from: from, until: s.end})
	// kube-proxy's Endpoints on three nodes, from different moments.
	for i := range 3 {
		from := s.t0.Add(span/4 + s.between(0, span/5))
		specs = append(specs, &loopSpec{c: s.kubeProxy(i), res: "endpoints", pages: [2]int{1, 1},
			lasts: [2]time.Duration{2 * time.Millisecond, 800 * time.Millisecond}, from: from, until: s.end})
	}
	for _, l := range specs {
		l.rv = s.healthyWatches(l.c, l.res, l.ns, l.sel, s.startup(), l.from)
		s.relistLoop(l)
	}
	s.loopTruth(specs)
	// Healthy reflectors beside them.
	s.run(reflector{c: kcm, res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	for i := range 3 {
		s.run(reflector{c: s.kubeProxy(i), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	}
}

func buildRelistLoopWatchList(s *sim) {
	s.seedCluster()
	s.end = s.traceEnd(8)
	s.background()
	s.leaderLeases()
	span := s.end.Sub(s.t0)
	kcm := s.kcm()
	specs := []*loopSpec{{c: kcm, res: "serviceaccounts", watchList: true,
		lasts: [2]time.Duration{300 * time.Millisecond, 4 * time.Second}, from: s.t0.Add(span/6 + s.between(0, span/6)), until: s.end}}
	for _, ip := range []string{"10.244.1.31", "10.244.2.17"} {
		op := podClient("shop", "cart-operator", "cart-operator/0.9.2 (linux/amd64) kubernetes/0f3e1d2", ip)
		from := s.t0.Add(span/3 + s.between(0, span/6))
		// It ends when the trace is three quarters through: the operator
		// was redeployed.
		specs = append(specs, &loopSpec{c: op, res: "pods", ns: "shop", pages: [2]int{1, 1},
			lasts: [2]time.Duration{5 * time.Millisecond, 1500 * time.Millisecond}, from: from, until: s.t0.Add(span * 3 / 4)})
	}
	for _, l := range specs {
		l.rv = s.healthyWatches(l.c, l.res, l.ns, l.sel, s.startup(), l.from)
		s.relistLoop(l)
	}
	s.loopTruth(specs)
	s.run(reflector{c: kcm, res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
}

func buildRelistHerd(s *sim) {
	s.seedCluster()
	s.end = s.traceEnd(6)
	s.background()
	s.leaderLeases()
	span := s.end.Sub(s.t0)
	n := 12 + s.rng.IntN(29)
	failover := s.t0.Add(span/2 + s.between(0, span/8))
	first := map[string]time.Time{}
	for i := range n {
		kl := s.kubelet(i)
		sel := "spec.nodeName=node-" + strconv.Itoa(i)
		back := failover.Add(s.between(500*time.Millisecond, 20*time.Second)) // reconnected
		for _, r := range []struct{ res, sel string }{{"pods", sel}, {"services", ""}} {
			rv := s.healthyWatches(kl, r.res, "", r.sel, s.startup(), failover.Add(s.between(0, 300*time.Millisecond)))
			// The watch from the old resourceVersion ends at once: 410.
			d := s.between(time.Millisecond, 30*time.Millisecond)
			s.timedWatch(back, d, kl, r.res, "", r.sel, rv)
			lt := back.Add(d + s.between(800*time.Millisecond, 1600*time.Millisecond))
			end, rev := s.pagedList(lt, kl, r.res, "", r.sel, rv, 1)
			if f, ok := first[r.res]; !ok || lt.Before(f) {
				first[r.res] = lt
			}
			s.healthyWatches(kl, r.res, "", r.sel, end.Add(2*time.Millisecond), s.end.Add(s.scale.RestartMax))
			_ = rev
		}
	}
	for _, res := range []string{"pods", "services"} {
		s.want.RelistHerds = append(s.want.RelistHerds, RelistHerd{Resource: res, Clients: n, At: first[res]})
	}
	// The usual relists: an admin lists Pods now and then; two kubelets
	// of other nodes restart and list.
	admin := s.admin()
	for t := s.t0.Add(s.between(0, span/10)); t.Before(s.end); t = t.Add(s.between(span/12, span/6)) {
		s.pagedList(t, admin, "pods", "", "", "", 2)
	}
	for i := range 2 {
		kl := s.kubelet(60 + i)
		t := s.t0.Add(s.between(span/8, span/3))
		end, _ := s.pagedList(t, kl, "pods", "", "spec.nodeName=node-"+strconv.Itoa(60+i), "", 1)
		s.healthyWatches(kl, "pods", "", "spec.nodeName=node-"+strconv.Itoa(60+i), end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
	}
}

func buildRelistRollout(s *sim) {
	s.seedCluster()
	s.end = s.traceEnd(6)
	s.background()
	s.leaderLeases()
	span := s.end.Sub(s.t0)
	n := 12 + s.rng.IntN(29)
	apps := []string{"cart", "checkout", "catalog", "search", "payments", "reviews"}[:3+s.rng.IntN(4)]
	oldCM, newCM := map[string]string{}, map[string]string{}
	for _, a := range apps {
		oldCM[a] = "metadata.name=" + a + "-config-" + s.suffix()
		newCM[a] = "metadata.name=" + a + "-config-" + s.suffix()
	}
	secret := func(app string) string { return "metadata.name=" + app + "-tls" }
	rollout := s.t0.Add(span/2 + s.between(0, span/8))
	spread := s.between(20*time.Second, 50*time.Second)
	after := s.end.Add(s.scale.RestartMax)
	for i := range n {
		kl := s.kubelet(i)
		s.healthyWatches(kl, "pods", "", "spec.nodeName=node-"+strconv.Itoa(i), s.startup(), after)
		old, app := apps[s.rng.IntN(len(apps))], apps[s.rng.IntN(len(apps))]
		landed := rollout.Add(s.between(0, spread))
		// The old pod's objects are watched until it is gone; its Secret
		// on, when the new pod mounts it too.
		gone := landed.Add(s.between(5*time.Second, 30*time.Second))
		s.healthyWatches(kl, "configmaps", "shop", oldCM[old], s.startup(), gone)
		if app == old {
			s.healthyWatches(kl, "secrets", "shop", secret(old), s.startup(), after)
		} else {
			s.healthyWatches(kl, "secrets", "shop", secret(old), s.startup(), gone)
		}
		// The new pod's objects, read for the first time.
		t := landed.Add(s.between(50*time.Millisecond, 400*time.Millisecond))
		end, _ := s.pagedList(t, kl, "configmaps", "shop", newCM[app], "0", 1)
		s.healthyWatches(kl, "configmaps", "shop", newCM[app], end.Add(s.between(time.Millisecond, 3*time.Millisecond)), after)
		if app != old {
			end, _ := s.pagedList(t.Add(s.between(time.Millisecond, 20*time.Millisecond)), kl, "secrets", "shop", secret(app), "0", 1)
			s.healthyWatches(kl, "secrets", "shop", secret(app), end.Add(s.between(time.Millisecond, 3*time.Millisecond)), after)
		}
	}
}

func buildRelistControls(s *sim) {
	s.seedCluster()
	s.end = s.traceEnd(8)
	s.background()
	s.leaderLeases()
	span := s.end.Sub(s.t0)

	// A standby kube-controller-manager and kube-scheduler take over (the
	// old leaders' informers go on in the background): every informer
	// lists (big collections in pages, some through a watch-list) and
	// watches.
	kcm, sched := s.kcm(), s.scheduler()
	kcm.SourceIP, sched.SourceIP = "10.0.0.11", "10.0.0.11"
	restart := s.t0.Add(span/5 + s.between(0, span/10))
	for i, r := range []struct {
		res   string
		pages int
	}{{"pods", 3}, {"configmaps", 2}, {"services", 1}, {"endpoints", 1}, {"nodes", 1}, {"namespaces", 1}, {"events", 4}} {
		t := restart.Add(s.between(100*time.Millisecond, 2*time.Second))
		if i%3 == 2 {
			d := s.between(200*time.Millisecond, 900*time.Millisecond)
			s.watchList(t, d, kcm, r.res, "", "")
			// The watch-list's stream goes on as its watch until its
			// timeout: the next request is a plain watch.
			s.healthyWatches(kcm, r.res, "", "", t.Add(s.scale.RestartMin), s.end.Add(s.scale.RestartMax))
			continue
		}
		end, _ := s.pagedList(t, kcm, r.res, "", "", "", r.pages)
		s.healthyWatches(kcm, r.res, "", "", end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
	}
	for _, res := range []string{"pods", "nodes"} {
		t := restart.Add(20*time.Second + s.between(0, 2*time.Second))
		end, _ := s.pagedList(t, sched, res, "", "", "", 2)
		s.healthyWatches(sched, res, "", "", end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
	}

	// velero pages once through every ConfigMap.
	velero := podClient("velero", "velero", "velero-server/v1.15.0 (linux/amd64) kubernetes/$Format", "10.244.3.50")
	s.pagedList(s.t0.Add(span/2), velero, "configmaps", "", "", "", 40)

	// An ingress controller behind a proxy that cuts its watches after 1
	// to 4 s: it re-watches from its last resourceVersion, no list.
	ing := podClient("ingress-nginx", "ingress-nginx", "nginx-ingress-controller/v1.12.0 (linux/amd64) ingress-nginx/fbc4c6e", "10.244.3.17")
	follow := s.follow("services")
	var rv int64
	for t := s.startup(); t.Before(s.end); {
		d := s.between(time.Second, 4*time.Second)
		next, _ := strconv.ParseInt(follow(t), 10, 64)
		rv = max(rv, next)
		s.timedWatch(t, d, ing, "services", "", "", strconv.FormatInt(rv, 10))
		t = t.Add(d + s.between(10*time.Millisecond, 200*time.Millisecond))
	}

	// 16 kubelets restart one after another.
	t := s.t0.Add(span / 10)
	for i := range 16 {
		kl := s.kubelet(20 + i)
		sel := "spec.nodeName=node-" + strconv.Itoa(20+i)
		end, _ := s.pagedList(t, kl, "pods", "", sel, "", 1)
		s.healthyWatches(kl, "pods", "", sel, end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
		end, _ = s.pagedList(end.Add(s.between(time.Millisecond, 20*time.Millisecond)), kl, "services", "", "", "", 1)
		s.healthyWatches(kl, "services", "", "", end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
		t = t.Add(s.between(40*time.Second, 60*time.Second))
	}

	// An apiserver restart: five kube-proxies' watches end, the new
	// apiserver answers their resume with 410, and each relists once.
	back := s.t0.Add(span*7/10 + s.between(0, span/20))
	for i := range 5 {
		kp := podClient("kube-system", "kube-proxy", s.agent("kube-proxy", ""), "10.0.2."+strconv.Itoa(i+1))
		rv := s.healthyWatches(kp, "endpoints", "", "", s.startup(), back)
		w := back.Add(s.between(time.Second, 15*time.Second))
		d := s.between(time.Millisecond, 20*time.Millisecond)
		s.timedWatch(w, d, kp, "endpoints", "", "", rv)
		end, _ := s.pagedList(w.Add(d+s.between(800*time.Millisecond, 1600*time.Millisecond)), kp, "endpoints", "", "", rv, 1)
		s.healthyWatches(kp, "endpoints", "", "", end.Add(time.Millisecond), s.end.Add(s.scale.RestartMax))
	}

	// kubectl get -w sessions, ended by the admin after a few seconds.
	admin := s.admin()
	for _, at := range []time.Duration{span / 3, span * 2 / 3} {
		t := s.t0.Add(at)
		end, rev := s.pagedList(t, admin, "pods", "shop", "", "", 1)
		s.timedWatch(end.Add(time.Millisecond), s.between(2*time.Second, 4*time.Second), admin, "pods", "shop", "", strconv.FormatInt(rev, 10))
	}
}
