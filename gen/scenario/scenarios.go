package scenario

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// The scenarios. Versions: the incident runs on an affected apiserver
// (1.9.2, no watch bookmarks); the look-alikes run on a fixed 1.10
// without bookmarks (where an idle resource really is re-watched from a
// constant resourceVersion) or on a current release with bookmarks.
var all = []Scenario{
	{
		Name: "seed-incident",
		Doc: "The incident of seeds 000/001 on Kubernetes 1.9.2: a user creates, deletes and creates Services, then deletes " +
			"the early-created legacy/legacy-api; its DELETE event carries its old resourceVersion 1200, every Services " +
			"watcher resumes from it, and at each of kube-controller-manager's restarts the replay makes the endpoints " +
			"controller delete and re-create the Endpoints of default/api, payments/billing and web/frontend. kube-dns is " +
			"restarted half-way (it lists and watches from a fresh resourceVersion) and an admin lists Services. " +
			"Expect one watch-loop finding (kube-controller-manager, services, 1200) and a watch-rv-regression finding for " +
			"each Services watcher that went back to 1200.",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: func(s *sim) { buildIncident(s, false) },
	},
	{
		Name: "incident-with-user-recreate",
		Doc: "The seed incident, and during the loop a user deletes and re-creates the Service web/shop right after a " +
			"kube-controller-manager restart: its Endpoints pair is legitimate and must not be among the finding's objects. " +
			"The new Service's fresh resourceVersion ends the loop (the documented workaround).",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: func(s *sim) { buildIncident(s, true) },
	},
	{
		Name: "long-incident",
		Doc: "The seed incident at length: the loop goes on for 50 restart periods (over 6 hours at the real scale, " +
			"about 12 minutes compressed) amid background traffic. Expect one watch-loop finding, however many windows " +
			"show it, whose last_seen follows the loop to its end, and a watch-rv-regression finding for each Services " +
			"watcher that went back to 1200.",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: func(s *sim) { buildIncidentFor(s, false, 50) },
	},
	{
		Name: "idle-constant-rv",
		Doc: "Kubernetes 1.10, nobody writes Services: kube-controller-manager and kube-proxy re-watch Services from the " +
			"same resourceVersion at every restart, legitimately. No Endpoints churn. Expect no finding.",
		version: "v1.10.13", commit: "fd7ec1c",
		build: buildIdle,
	},
	{
		Name: "user-recreates-service",
		Doc: "Kubernetes 1.10: a user's deploy pipeline deletes and re-creates Services (the endpoints controller deletes " +
			"and re-creates their Endpoints), each time right after a restart of an operator that re-watches Services from " +
			"a pinned resourceVersion. Expect no finding: the pairs belong to Services someone deleted and re-created.",
		version: "v1.10.13", commit: "fd7ec1c",
		build: buildUserRecreates,
	},
	{
		Name: "advancing-rv",
		Doc: "Kubernetes 1.10: an operator updates a Service every few minutes, so every watcher's resourceVersion " +
			"advances; a janitor deletes and re-creates Endpoints right after kube-controller-manager's restarts. " +
			"Expect no finding: nobody re-watches from a static resourceVersion.",
		version: "v1.10.13", commit: "fd7ec1c",
		build: buildAdvancing,
	},
	{
		Name: "static-rv-not-advanced",
		Doc: "Kubernetes 1.10, idle Services re-watched from their constant resourceVersion, and a janitor deletes and " +
			"re-creates Endpoints right after kube-controller-manager's restarts. Expect no finding: nothing shows Services " +
			"past that resourceVersion, so it is current, not stale.",
		version: "v1.10.13", commit: "fd7ec1c",
		build: buildStaticNotAdvanced,
	},
	{
		Name: "apiserver-startup",
		Doc: "A current kube-apiserver starting: its own informers list and watch, clients reconnect and retry their " +
			"watches from the same resourceVersion while storage initialises (429), the bootstrap controller updates the " +
			"kubernetes Service and the endpoint reconciler re-creates default/kubernetes. Expect no finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildStartup,
	},
	{
		Name: "healthy-controller-manager",
		Doc: "A current kube-controller-manager in a healthy cluster: informers on Services, Endpoints, Pods, Nodes, " +
			"ConfigMaps and Namespaces with bookmarks, Endpoints updates, a user deleting and re-creating one Service and " +
			"deleting another. Expect no finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildHealthy,
	},
	{
		Name: "rv-regression",
		Doc: "ingress-nginx restarts its Services watch twice from a resourceVersion lower than one it already used, then " +
			"relists. kube-state-metrics watches from a lower resourceVersion only after a relist (an HA apiserver whose " +
			"cache lags) and CoreDNS once from \"0\": neither is a regression. Expect one watch-rv-regression finding " +
			"(ingress-nginx) and no watch-loop.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildRegression,
	},
}

// The cluster every scenario starts from: Services created long ago
// (legacy-api first), their Endpoints, three nodes.
var clusterServices = []struct {
	ns, name string
	rv       int64
}{
	{"default", "kubernetes", 6},
	{"kube-system", "kube-dns", 250},
	{"legacy", "legacy-api", 1200},
	{"monitoring", "prometheus", 2450100},
	{"default", "api", 2905331},
	{"payments", "billing", 3100452},
	{"batch", "worker", 3311874},
	{"web", "frontend", 3640118},
	{"web", "promo", 3688210},
	{"web", "shop", 3702977},
}

const nodeCount = 3

// initial is the resourceVersion a reflector of the resource holds at the
// start: its newest object's before the trace (seedCluster records them).
func (s *sim) initial(res string) int64 {
	if rv, ok := s.initials[res]; ok {
		return rv
	}
	return s.rev0 - 5000
}

func (s *sim) seedCluster() {
	for i, svc := range clusterServices {
		s.seed("services", svc.ns, svc.name, svc.rv)
		s.seed("endpoints", svc.ns, svc.name, s.rev0-90000+int64(i)*1013)
	}
	for i := range nodeCount {
		s.seed("nodes", "", "node-"+strconv.Itoa(i), s.rev0-400+int64(i))
	}
	s.seed("namespaces", "", "default", 12)
	s.seed("configmaps", "kube-system", "kube-proxy", 3012)
	s.initials = map[string]int64{}
	for k, o := range s.objs {
		s.initials[k.resource] = max(s.initials[k.resource], o.rv)
	}
}

// The cast.

func (s *sim) kcm() Client {
	return Client{User: "system:kube-controller-manager", Groups: []string{"system:authenticated"},
		UserAgent: s.agent("kube-controller-manager", "shared-informers"), SourceIP: "10.0.0.10"}
}

// endpointController writes Endpoints from inside kube-controller-manager
// with its own service account (--use-service-account-credentials).
func (s *sim) endpointController() Client {
	u := "system:serviceaccount:kube-system:endpoint-controller"
	return Client{User: u, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		UserAgent: s.agent("kube-controller-manager", u), SourceIP: "10.0.0.10"}
}

func (s *sim) controllerSA(name string) Client {
	u := "system:serviceaccount:kube-system:" + name
	return Client{User: u, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		UserAgent: s.agent("kube-controller-manager", u), SourceIP: "10.0.0.10"}
}

func (s *sim) scheduler() Client {
	return Client{User: "system:kube-scheduler", Groups: []string{"system:authenticated"},
		UserAgent: s.agent("kube-scheduler", "scheduler"), SourceIP: "10.0.0.10"}
}

func (s *sim) apiserver() Client {
	return Client{User: "system:apiserver", Groups: []string{"system:masters"},
		UserAgent: s.agent("kube-apiserver", ""), SourceIP: "127.0.0.1"}
}

func nodeIP(i int) string { return "10.0.1." + strconv.Itoa(i+1) }

func (s *sim) kubeProxy(i int) Client {
	return Client{User: "system:kube-proxy", Groups: []string{"system:authenticated"},
		UserAgent: s.agent("kube-proxy", ""), SourceIP: nodeIP(i)}
}

func (s *sim) kubelet(i int) Client {
	return Client{User: "system:node:node-" + strconv.Itoa(i), Groups: []string{"system:nodes", "system:authenticated"},
		UserAgent: s.agent("kubelet", ""), SourceIP: nodeIP(i)}
}

func (s *sim) admin() Client {
	return Client{User: "admin", Groups: []string{"system:masters", "system:authenticated"},
		UserAgent: s.agent("kubectl", ""), SourceIP: "192.168.1.23"}
}

func podClient(ns, sa, agent, ip string) Client {
	return Client{User: "system:serviceaccount:" + ns + ":" + sa,
		Groups:    []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		UserAgent: agent, SourceIP: ip}
}

// follow returns the resourceVersion a reflector of res resumes from at
// t: the one delivered with the resource's last event, or with bookmarks
// (when the apiserver sends them) the newer resourceVersion of the last
// bookmark.
func (s *sim) follow(res string) func(time.Time) string {
	initial := s.initial(res)
	return func(t time.Time) string {
		rv := s.delivered(res, t, initial)
		if s.bookmarks() {
			rv = max(rv, s.currentRev(t.Add(-s.between(0, s.scale.RestartMin/2))))
		}
		return strconv.FormatInt(rv, 10)
	}
}

// followFrom is follow for a reflector that listed res at listT and got
// listRV: it holds listRV until an event of res arrives after the list.
func (s *sim) followFrom(res string, listT time.Time, listRV int64) func(time.Time) string {
	f := s.follow(res)
	return func(t time.Time) string {
		h := s.hist[res]
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].t.Before(t) {
				if h[i].t.After(listT) {
					return f(t)
				}
				break
			}
		}
		if s.bookmarks() {
			return f(t)
		}
		return strconv.FormatInt(listRV, 10)
	}
}

// startup is when a reflector's first visible watch starts: at a random
// point of its first watch period.
func (s *sim) startup() time.Time { return s.t0.Add(s.between(0, s.scale.RestartMin)) }

// background is a healthy cluster's steady traffic from the start to the
// end: node status every 10 s, worker pods replaced every third of a
// restart period with their Endpoints updated, events, and the informers
// of kube-controller-manager and kube-scheduler on pods, nodes, endpoints,
// configmaps and namespaces, and the apiserver's own reads of
// default/kubernetes. Informers on Services are the scenario's.
func (s *sim) background() {
	for i := range nodeCount {
		kl := s.kubelet(i)
		name := "node-" + strconv.Itoa(i)
		for t := s.t0.Add(s.between(0, 10*time.Second)); t.Before(s.end); t = t.Add(s.between(9500*time.Millisecond, 10500*time.Millisecond)) {
			lat := s.between(3*time.Millisecond, 15*time.Millisecond)
			rev := s.revAt(t.Add(lat))
			s.record("nodes", histEntry{t: t.Add(lat), real: rev, delivered: rev})
			s.do(t, lat, request{c: kl, verb: "patch", uri: "/api/v1/nodes/" + name + "/status?timeout=10s",
				ref:   auditv1.ObjectReference{Resource: "nodes", Name: name, APIVersion: "v1", Subresource: "status"},
				level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
		}
	}
	rs, epc := s.controllerSA("replicaset-controller"), s.endpointController()
	var prevPod string
	for t := s.t0.Add(s.between(0, s.period()/3)); t.Before(s.end); t = t.Add(s.between(s.period()/4, s.period()/2)) {
		pod := "worker-" + s.suffix()
		s.write(t, rs, "create", pods, "batch", pod, false)
		if prevPod != "" {
			s.write(t.Add(s.between(time.Second, 3*time.Second)), rs, "delete", pods, "batch", prevPod, false)
		}
		prevPod = pod
		s.write(t.Add(s.between(200*time.Millisecond, time.Second)), epc, "update", endpoints, "batch", "worker", false)
		kl := s.kubelet(s.rng.IntN(nodeCount))
		s.do(t.Add(s.between(time.Second, 2*time.Second)), s.between(time.Millisecond, 5*time.Millisecond), request{c: kl, verb: "create",
			uri: path("events", "batch"), ref: auditv1.ObjectReference{Resource: "events", Namespace: "batch", APIVersion: "v1"},
			level: auditv1.LevelMetadata, status: &metav1.Status{Code: 201}})
	}
	kcm, sched := s.kcm(), s.scheduler()
	for _, r := range []reflector{
		{c: kcm, res: "pods", rvAt: s.follow("pods")},
		{c: kcm, res: "nodes", rvAt: s.follow("nodes")},
		{c: kcm, res: "endpoints", rvAt: s.follow("endpoints")},
		{c: kcm, res: "configmaps", rvAt: s.follow("configmaps")},
		{c: kcm, res: "namespaces", rvAt: s.follow("namespaces")},
		{c: sched, res: "pods", rvAt: s.follow("pods")},
		{c: sched, res: "nodes", rvAt: s.follow("nodes")},
	} {
		s.run(r, s.startup(), s.end)
	}
	// The apiserver's own endpoint reconciler reads default/kubernetes
	// every 10 s: its user agent names the apiserver's version.
	api := s.apiserver()
	for t := s.t0.Add(s.between(0, 10*time.Second)); t.Before(s.end); t = t.Add(10 * time.Second) {
		s.do(t, s.between(time.Millisecond, 3*time.Millisecond), request{c: api, verb: "get", uri: "/api/v1/namespaces/default/endpoints/kubernetes",
			ref:   auditv1.ObjectReference{Resource: "endpoints", Namespace: "default", Name: "kubernetes", APIVersion: "v1"},
			level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
	}
}

// servicesWatchers runs the usual Services reflectors besides
// kube-controller-manager's: kube-proxy on each node (and its Endpoints
// reflector).
func (s *sim) servicesWatchers() {
	for i := range nodeCount - 1 {
		s.run(reflector{c: s.kubeProxy(i), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
		s.run(reflector{c: s.kubeProxy(i), res: "endpoints", rvAt: s.follow("endpoints")}, s.startup(), s.end)
	}
}

// buildIncident is the seed incident, optionally with a user deleting and
// re-creating web/shop during the loop.
func buildIncident(s *sim, recreateShop bool) { buildIncidentFor(s, recreateShop, 7) }

// buildIncidentFor is the seed incident whose loop lasts about periods
// restart periods.
func buildIncidentFor(s *sim, recreateShop bool, periods int) {
	s.seedCluster()
	p := s.period()
	admin, epc, kcm := s.admin(), s.endpointController(), s.kcm()

	// The trigger: create, delete, create Services, then delete the
	// early-created one. The endpoints controller follows each.
	t := s.at(p * 16 / 10)
	s.end = t.Add(4*s.scale.Step + time.Duration(periods)*p)
	for _, step := range []struct{ verb, ns, name string }{
		{"create", "default", "tmp-1"}, {"delete", "default", "tmp-1"}, {"create", "web", "tmp-2"}, {"delete", "legacy", "legacy-api"},
	} {
		s.write(t, admin, step.verb, services, step.ns, step.name, true)
		s.write(t.Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, step.verb, endpoints, step.ns, step.name, true)
		t = t.Add(s.scale.Step)
	}
	triggered := t
	const stale = "1200" // legacy-api's resourceVersion
	s.background()

	loop := Loop{Client: kcm, Resource: "services", ResourceVersion: stale, ChurnAfter: map[string]string{}}
	churned := [][2]string{{"default", "api"}, {"payments", "billing"}, {"web", "frontend"}}
	iteration := 0
	s.run(reflector{c: kcm, res: "services", rvAt: s.follow("services"), onWatch: func(t time.Time, rv, watchID string) {
		if rv != stale {
			return
		}
		iteration++
		// The replay re-adds and removes default/tmp-1: its Endpoints
		// are already gone (404).
		d := t.Add(s.between(200*time.Millisecond, 2*time.Second))
		s.write(d, epc, "delete", endpoints, "default", "tmp-1", false)
		followed := false
		for _, i := range s.rng.Perm(len(churned)) {
			ns, name := churned[i][0], churned[i][1]
			d = d.Add(s.between(20*time.Millisecond, 400*time.Millisecond))
			delID, _ := s.write(d, epc, "delete", endpoints, ns, name, true)
			c := d.Add(s.between(s.scale.RecreateMin, s.scale.RecreateMax))
			createID, _ := s.write(c, epc, "create", endpoints, ns, name, true)
			// The delete is the harm, whether or not the trace holds the
			// re-create.
			if d.Add(100 * time.Millisecond).Before(s.end) {
				loop.ChurnAfter[delID] = watchID
				loop.Objects = append(loop.Objects, ns+"/"+name)
				followed = true
			}
			if c.Add(100 * time.Millisecond).Before(s.end) {
				loop.ChurnAfter[createID] = watchID
			}
		}
		if followed {
			loop.Iterations++
		}
		if recreateShop && iteration == 4 {
			// A user deletes and re-creates web/shop right after the
			// restart; its fresh resourceVersion ends the loop.
			u := t.Add(s.between(500*time.Millisecond, 2*time.Second))
			s.write(u, admin, "delete", services, "web", "shop", true)
			s.write(u.Add(300*time.Millisecond), epc, "delete", endpoints, "web", "shop", true)
			u = u.Add(3 * s.scale.Step)
			s.write(u, admin, "create", services, "web", "shop", true)
			s.write(u.Add(400*time.Millisecond), epc, "create", endpoints, "web", "shop", true)
		}
	}}, s.startup(), s.end)
	s.want.Loops = append(s.want.Loops, loop)

	// The other Services watchers see the same DELETE event and go back
	// too; only kube-controller-manager's replay makes Endpoints churn.
	s.servicesWatchers()
	// kube-dns restarts half-way: a new pod lists and watches from a
	// fresh resourceVersion.
	dnsAgent := "kube-dns/1.14.8 (linux/amd64) kubernetes/$Format"
	restart := triggered.Add(33 * p / 10)
	s.run(reflector{c: podClient("kube-system", "kube-dns", dnsAgent, "10.244.1.7"), res: "services", rvAt: s.follow("services")}, s.startup(), restart)
	dns := podClient("kube-system", "kube-dns", dnsAgent, "10.244.2.9")
	listT := restart.Add(2 * time.Second)
	listRV := s.list(listT, dns, "services", "")
	s.run(reflector{c: dns, res: "services", rvAt: s.followFrom("services", listT, listRV)}, listT.Add(100*time.Millisecond), s.end)
	// An admin lists Services (logged with the response).
	s.fullList(triggered.Add(25*p/10), admin, services)
}

// buildIdle: nobody writes Services.
func buildIdle(s *sim) {
	s.seedCluster()
	s.end = s.at(8 * s.period())
	s.background()
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	s.servicesWatchers()
}

// janitor deletes and re-creates an Endpoints object shortly after each
// of kube-controller-manager's Services watch restarts.
func (s *sim) janitor(ns, name string) func(t time.Time, rv, id string) {
	j := podClient("ops", "endpoints-janitor", "janitor/0.3.1", "10.244.3.40")
	return func(t time.Time, _, _ string) {
		d := t.Add(s.between(500*time.Millisecond, 2*time.Second))
		s.write(d, j, "delete", endpoints, ns, name, true)
		s.write(d.Add(s.between(s.scale.RecreateMin, s.scale.RecreateMax)), j, "create", endpoints, ns, name, true)
	}
}

// buildUserRecreates: a deploy pipeline deletes and re-creates a Service
// (helm upgrade --force does) right after each watch restart of an
// operator that always re-watches from the resourceVersion it first
// listed: but for the rule that explains these pairs, this would be a loop.
func buildUserRecreates(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(8 * p)
	s.background()
	admin, epc := s.admin(), s.endpointController()
	op := podClient("ops", "svc-exporter", "svc-exporter/1.4.0", "10.244.3.21")
	pinned := strconv.FormatInt(s.initial("services"), 10)
	n := 0
	s.run(reflector{c: op, res: "services", rvAt: func(time.Time) string { return pinned }, onWatch: func(t time.Time, _, _ string) {
		if n++; n < 2 {
			return
		}
		name := []string{"shop", "promo"}[n%2]
		u := t.Add(s.between(300*time.Millisecond, 1500*time.Millisecond))
		s.write(u, admin, "delete", services, "web", name, true)
		s.write(u.Add(s.between(100*time.Millisecond, 600*time.Millisecond)), epc, "delete", endpoints, "web", name, true)
		u = u.Add(2 * s.scale.Step)
		s.write(u, admin, "create", services, "web", name, true)
		s.write(u.Add(s.between(100*time.Millisecond, 600*time.Millisecond)), epc, "create", endpoints, "web", name, true)
	}}, s.startup(), s.end)
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	s.servicesWatchers()
}

// buildAdvancing: Services change between restarts, so every watcher's
// resourceVersion advances; a janitor churns Endpoints after
// kube-controller-manager's restarts.
func buildAdvancing(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(8 * p)
	op := podClient("ops", "svc-annotator", "svc-annotator/2.0.1", "10.244.3.22")
	for t := s.at(s.between(0, p/4)); t.Before(s.end); t = t.Add(s.between(p/4, p/2)) {
		s.write(t, op, "update", services, "web", "frontend", true)
	}
	s.background()
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services"), onWatch: s.janitor("payments", "billing")}, s.startup(), s.end)
	s.servicesWatchers()
}

// buildStaticNotAdvanced: idle Services, janitor churn after
// kube-controller-manager's restarts.
func buildStaticNotAdvanced(s *sim) {
	s.seedCluster()
	s.end = s.at(8 * s.period())
	s.background()
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services"), onWatch: s.janitor("payments", "billing")}, s.startup(), s.end)
	s.servicesWatchers()
}

// buildStartup: an apiserver starts at the beginning of the trace.
func buildStartup(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(6 * p)
	api := s.apiserver()
	ready := s.at(s.between(6*time.Second, 9*time.Second)) // storage initialised
	retries := func(t time.Time) int {
		if t.Before(ready) {
			return int(ready.Sub(t)/time.Second) + 1
		}
		return 0
	}
	// Bootstrap: namespaces and RBAC roles exist (409), the kubernetes
	// Service is updated, the endpoint reconciler re-creates its Endpoints.
	t := s.at(300 * time.Millisecond)
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		s.do(t, s.between(time.Millisecond, 4*time.Millisecond), request{c: api, verb: "create", uri: "/api/v1/namespaces",
			ref: auditv1.ObjectReference{Resource: "namespaces", Name: ns, APIVersion: "v1"}, level: auditv1.LevelMetadata,
			status: &metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonAlreadyExists}})
		t = t.Add(s.between(5*time.Millisecond, 30*time.Millisecond))
	}
	for _, role := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user"} {
		s.do(t, s.between(time.Millisecond, 4*time.Millisecond), request{c: api, verb: "create",
			uri:   "/apis/rbac.authorization.k8s.io/v1/clusterroles",
			ref:   auditv1.ObjectReference{Resource: "clusterroles", Name: role, APIGroup: "rbac.authorization.k8s.io", APIVersion: "v1"},
			level: auditv1.LevelMetadata, status: &metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: metav1.StatusReasonAlreadyExists}})
		t = t.Add(s.between(5*time.Millisecond, 30*time.Millisecond))
	}
	t = ready.Add(s.between(200*time.Millisecond, time.Second))
	s.write(t, api, "update", services, "default", "kubernetes", true)
	s.write(t.Add(s.between(100*time.Millisecond, 500*time.Millisecond)), api, "delete", endpoints, "default", "kubernetes", true)
	s.write(t.Add(s.between(600*time.Millisecond, 1200*time.Millisecond)), api, "create", endpoints, "default", "kubernetes", true)
	s.background()

	// The apiserver's own informers list, then watch, retrying until
	// storage is ready; every other client reconnects and retries from
	// the resourceVersion it had.
	for _, res := range []string{"services", "endpoints", "namespaces", "configmaps"} {
		lt := s.at(s.between(200*time.Millisecond, 800*time.Millisecond))
		rv := s.list(lt, api, res, "")
		s.run(reflector{c: api, res: res, rvAt: s.followFrom(res, lt, rv), retries: retries}, lt.Add(50*time.Millisecond), s.end)
	}
	reconnect := func(c Client, res string) {
		s.run(reflector{c: c, res: res, rvAt: s.follow(res), retries: retries}, s.at(s.between(500*time.Millisecond, 2*time.Second)), s.end)
	}
	reconnect(s.kcm(), "services")
	reconnect(s.scheduler(), "services")
	for i := range nodeCount - 1 {
		reconnect(s.kubeProxy(i), "services")
		reconnect(s.kubeProxy(i), "endpoints")
	}
}

// buildHealthy: a current kube-controller-manager in a healthy cluster.
func buildHealthy(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(8 * p)
	admin, epc := s.admin(), s.endpointController()
	// A user deletes and re-creates web/shop, and deletes web/promo.
	u := s.at(2 * p)
	s.write(u, admin, "delete", services, "web", "shop", true)
	s.write(u.Add(400*time.Millisecond), epc, "delete", endpoints, "web", "shop", true)
	u = u.Add(4 * s.scale.Step)
	s.write(u, admin, "create", services, "web", "shop", true)
	s.write(u.Add(500*time.Millisecond), epc, "create", endpoints, "web", "shop", true)
	u = s.at(5 * p)
	s.write(u, admin, "delete", services, "web", "promo", true)
	s.write(u.Add(300*time.Millisecond), epc, "delete", endpoints, "web", "promo", true)
	s.background()
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	s.servicesWatchers()
}

// buildRegression: ingress-nginx goes back to a lower resourceVersion.
func buildRegression(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(9 * p)
	op := podClient("ops", "svc-annotator", "svc-annotator/2.0.1", "10.244.3.22")
	for t := s.at(s.between(0, p/4)); t.Before(s.end); t = t.Add(s.between(p/4, p/2)) {
		s.write(t, op, "update", services, "web", "frontend", true)
	}
	s.background()
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	s.servicesWatchers()

	ingress := podClient("ingress-nginx", "ingress-nginx", "nginx-ingress-controller/v1.12.0 (linux/amd64) ingress-nginx/fbc4c6e", "10.244.3.17")
	follow := s.follow("services")
	n, lower := 0, ""
	s.run(reflector{c: ingress, res: "services", rvAt: func(t time.Time) string {
		n++
		rv := follow(t)
		switch n {
		case 1:
			first, _ := strconv.ParseInt(rv, 10, 64)
			lower = strconv.FormatInt(first-37, 10)
		case 4, 5:
			return lower
		case 6:
			s.list(t.Add(-50*time.Millisecond), ingress, "services", "")
		}
		return rv
	}}, s.startup(), s.end)

	ksm := podClient("monitoring", "kube-state-metrics", "kube-state-metrics/v2.15.0", "10.244.2.31")
	m, last := 0, ""
	s.run(reflector{c: ksm, res: "services", rvAt: func(t time.Time) string {
		m++
		rv := follow(t)
		if m == 3 {
			// Relisted from an apiserver whose cache lags a little.
			s.list(t.Add(-50*time.Millisecond), ksm, "services", "")
			prev, _ := strconv.ParseInt(last, 10, 64)
			return strconv.FormatInt(prev-12, 10)
		}
		last = rv
		return rv
	}}, s.startup(), s.end)

	coredns := podClient("kube-system", "coredns", "coredns/v1.12.1 (linux/amd64) kubernetes/abc1234", "10.244.1.9")
	k := 0
	s.run(reflector{c: coredns, res: "services", rvAt: func(t time.Time) string {
		if k++; k == 3 {
			return "0"
		}
		return follow(t)
	}}, s.startup(), s.end)
}
