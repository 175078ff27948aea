package scenario

import (
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Variations of the incident and of its look-alikes. The scripted
// scenarios above replay one story; these vary, by seed, what the
// mechanism leaves open: who wrote the victims' Services and when, how
// many of them the endpoints controller churns after each restart (its
// work queue races the replay: a Service whose DELETED and ADDED events
// both arrive before a worker picks it up is not churned), how long after
// the restart it acts, how soon it re-creates, other Services watchers
// restarting in between, users writing Services during the loop, HA
// control planes, loops older than the trace, and the audit formats of
// the affected releases.
var variants = []Scenario{
	{
		Name: "incident-ci-victims",
		Doc: "Kubernetes 1.9.2. A CI pipeline (service account ci/deployer, helm) deletes and re-creates 2–4 Services " +
			"(random, by seed) and creates and deletes a preview Service; a cleanup operator then deletes the early-created " +
			"legacy/legacy-api, whose DELETE event carries resourceVersion 1200. kube-controller-manager re-watches Services " +
			"from 1200; after each restart, 10 ms to 3 s later, its endpoints controller deletes the Endpoints of a random " +
			"non-empty subset of the re-created Services and re-creates them 5 ms to a few seconds later (and deletes the " +
			"preview's, already gone: 404). kube-proxy on two nodes restarts from 1200 in between. After 5–7 iterations a " +
			"user deletes and re-creates the unrelated monitoring/prometheus: its fresh resourceVersion ends the loop, and " +
			"its Endpoints pair is no churn. Expect one watch-loop finding (kube-controller-manager, services, 1200) whose " +
			"objects are the churned Endpoints (the CI's own writes minutes before explain nothing later), and a " +
			"watch-rv-regression finding for each Services watcher that went back to 1200.",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: func(s *sim) {
			buildVariant(s, variant{creator: s.ciDeployer(), trigger: s.cleanupOperator(), victims: [2]int{2, 4}, subset: true,
				delay: [2]time.Duration{10 * time.Millisecond, 3 * time.Second}, recreate: [2]time.Duration{5 * time.Millisecond, s.scale.RecreateMax},
				userEnds: [2]int{5, 7}, periods: 12})
		},
	},
	{
		Name: "incident-ha",
		Doc: "Kubernetes 1.9.2 with two kube-apiservers (apiserver-a, apiserver-b: each request is served by one, and " +
			"Trace.APIServers says which). kube-controller-manager reaches them through a load balancer that source-NATs: " +
			"half-way through the loop its connection moves to the other apiserver and its address changes. Its endpoints " +
			"controller writes with its own service account (--use-service-account-credentials) and the " +
			"kube-controller-manager user agent. Each apiserver's loopback informers watch ConfigMaps and Namespaces. " +
			"After 6–8 iterations the leader changes: the new kube-controller-manager instance lists Services and watches " +
			"from a fresh resourceVersion, which ends the loop. Expect one watch-loop finding (kube-controller-manager from " +
			"both addresses, services, 1200) whether the logs are imported together or each under its apiserver, and a " +
			"watch-rv-regression finding for each Services watcher that went back to 1200 (the second address never watched " +
			"from higher).",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: buildHA,
	},
	{
		Name: "incident-drifting",
		Doc: "Kubernetes 1.9.2 in a cluster that keeps deploying. As in incident-ci-victims a CI pipeline re-creates 2–4 " +
			"Services and a cleanup operator's delete of legacy/legacy-api (resourceVersion 1200) starts the loop. While it " +
			"runs, the operator deletes 2–4 more early-created Services (of legacy and archive, resourceVersions 900 to 15000) " +
			"at random times: each DELETE event carries the deleted Service's old resourceVersion, so the reflectors' resume " +
			"point drifts to it, down or up, always far below the store. Half-way the CI re-creates one more Service: its " +
			"ADDED event is fresh, so kube-controller-manager resumes from a current resourceVersion (a pause) until the " +
			"operator's next delete sends it back, and from then on that Service churns too. After each restart from a stale " +
			"resourceVersion the endpoints controller deletes and re-creates a random subset of the re-created Services' " +
			"Endpoints. Expect one watch-loop finding (kube-controller-manager, services) from 1200 listing every stale " +
			"resourceVersion it resumed from and every victim, and a watch-rv-regression finding for each Services watcher " +
			"and resourceVersion it went back to.",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: buildDrifting,
	},
	{
		Name: "loop-already-running",
		Doc: "Kubernetes 1.9.2, a loop older than the trace: every Services watcher already resumes from 1200 when the " +
			"log starts, so there is no trigger and no regression to see. kube-controller-manager's endpoints controller " +
			"churns a random subset of default/api, payments/billing, web/frontend and batch/worker after each restart, " +
			"for 40 restart periods (about 5 hours at the real scale). Half-way kube-dns is restarted and watches from a " +
			"fresh resourceVersion. Expect one watch-loop finding (kube-controller-manager, services, 1200) and no " +
			"watch-rv-regression.",
		version: "v1.9.2", commit: "5fa2db2", buggy: true,
		build: func(s *sim) {
			buildVariant(s, variant{running: true, pool: [][2]string{{"default", "api"}, {"payments", "billing"}, {"web", "frontend"}, {"batch", "worker"}},
				subset: true, delay: [2]time.Duration{10 * time.Millisecond, 2 * time.Second},
				recreate: [2]time.Duration{5 * time.Millisecond, s.scale.RecreateMax}, periods: 40, dnsRestart: true})
		},
	},
	{
		Name: "incident-k8s-1.8",
		Doc: "The incident on Kubernetes 1.8.7, written as 1.8 wrote audit logs: audit.k8s.io/v1beta1 with one " +
			"second-precision timestamp per event, no stageTimestamp, requestReceivedTimestamp or userAgent. The " +
			"endpoints controller writes as system:kube-controller-manager; it re-creates each Endpoints 5 ms to 0.8 s " +
			"after deleting it, so a delete and its create often share a second. An admin re-creates 2–4 Services, then " +
			"deletes legacy/legacy-api (1200); kube-proxy on two nodes restarts from 1200 too. Expect one watch-loop " +
			"finding (system:kube-controller-manager, services, 1200) with the churned Endpoints, and a " +
			"watch-rv-regression finding for each Services watcher that went back to 1200.",
		version: "v1.8.7", commit: "b30876a", buggy: true, format: V1beta1K8s18,
		build: func(s *sim) {
			buildVariant(s, variant{creator: s.admin(), trigger: s.admin(), victims: [2]int{2, 4}, subset: true, asKCM: true,
				delay: [2]time.Duration{10 * time.Millisecond, 2 * time.Second}, recreate: [2]time.Duration{5 * time.Millisecond, 800 * time.Millisecond},
				periods: 9})
		},
	},
	{
		Name: "incident-k8s-1.8-many-nodes",
		Doc: "The incident on Kubernetes 1.8.7 in v1beta1 (no userAgent, whole seconds) on 40 nodes: every node's " +
			"kube-proxy re-watches Services from 1200 too, so some kube-proxy restarts within seconds of almost every " +
			"kube-controller-manager restart. The endpoints controller (as system:kube-controller-manager) churns all " +
			"re-created Services 10 ms to 1 s after each restart. Without user agents all kube-proxies are one program " +
			"(system:kube-proxy), whose restarts from 1200 come seconds apart. Expect one watch-loop finding " +
			"(system:kube-controller-manager, services, 1200), every churn event given to kube-controller-manager's " +
			"restart, and a watch-rv-regression finding for each of the 41 Services watchers that went back to 1200.",
		version: "v1.8.7", commit: "b30876a", buggy: true, format: V1beta1K8s18,
		build: func(s *sim) {
			buildVariant(s, variant{creator: s.admin(), trigger: s.admin(), victims: [2]int{2, 3}, asKCM: true, nodes: 40,
				delay: [2]time.Duration{10 * time.Millisecond, time.Second}, recreate: [2]time.Duration{5 * time.Millisecond, 800 * time.Millisecond},
				periods: 8})
		},
	},
	{
		Name: "modern-user-recreates",
		Doc: "Kubernetes 1.37 with watch bookmarks: kube-controller-manager's first sync of Services is a watch-list, " +
			"later watches resume from bookmarks. A user deletes and re-creates a random Service 100 ms to 3 s after " +
			"most of kube-controller-manager's restarts; the endpoints controller deletes its Endpoints (200, then a " +
			"second delete 404, as a real 1.37 did), and re-creates them after the Service; the garbage collector " +
			"deletes the EndpointSlice and the EndpointSlice controller creates a new one. Expect no finding.",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildModernUserRecreates,
	},
	{
		Name: "janitor-idle",
		Doc: "Kubernetes 1.10, Services idle: kube-controller-manager and kube-proxy re-watch them from one constant " +
			"resourceVersion, legitimately, while the rest of the cluster moves on (nodes, pods: the cluster is past it). " +
			"An endpoints janitor (its own service account and program, watching Endpoints) deletes a random 1–3 " +
			"Endpoints 10 ms to 3 s after most kube-controller-manager restarts and re-creates most of them. Expect no " +
			"finding: the churn is not written by the program that restarted.",
		version: "v1.10.13", commit: "fd7ec1c",
		build: buildJanitorIdle,
	},
	{
		Name: "watch-list-relists",
		Doc: "Kubernetes 1.37: kube-controller-manager's and kube-state-metrics' watch-lists of Services " +
			"(sendInitialEvents=true) keep failing before their initial events end and are sent again from the same " +
			"resourceVersion, many times; after most of kube-controller-manager's, a user deletes and re-creates a Service " +
			"and the endpoints controller follows. Expect no finding: a watch-list is a relist, not a restart (and the " +
			"Service writes explain the Endpoints writes).",
		version: "v1.37.2", commit: "abc1234", bookmarks: true,
		build: buildWatchListRelists,
	},
	{
		Name: "incident-k8s-1.7",
		Doc: "The incident on Kubernetes 1.7.12, written as 1.7 wrote audit logs: audit.k8s.io/v1alpha1 (second-precision " +
			"timestamp, no userAgent, objectRef.apiVersion \"group/version\"). A CI pipeline re-creates 2–3 Services, a " +
			"cleanup operator deletes legacy/legacy-api (1200); the endpoints controller (as system:kube-controller-manager) " +
			"churns all of them after each restart, 10 ms to 1 s later. Expect one watch-loop finding " +
			"(system:kube-controller-manager, services, 1200) and a watch-rv-regression finding for each Services " +
			"watcher that went back to 1200. Without user agents, the users tell " +
			"kube-controller-manager's churn from the kube-proxies restarting from 1200 beside it.",
		version: "v1.7.12", commit: "3bda299", buggy: true, format: V1alpha1K8s17,
		build: func(s *sim) {
			buildVariant(s, variant{creator: s.ciDeployer(), trigger: s.cleanupOperator(), victims: [2]int{2, 3}, asKCM: true,
				delay: [2]time.Duration{10 * time.Millisecond, time.Second}, recreate: [2]time.Duration{5 * time.Millisecond, 2 * time.Second},
				periods: 8})
		},
	},
}

func init() {
	for _, v := range variants {
		v.salted = true
		all = append(all, v)
	}
}

// More of the cast.

func (s *sim) ciDeployer() Client {
	return podClient("ci", "deployer", "helm/v2.8.2 (linux/amd64) kubernetes/a80231648", "10.244.3.51")
}

func (s *sim) cleanupOperator() Client {
	return podClient("ops", "cleanup-operator", "cleanup-operator/0.9.0 (linux/amd64) kubernetes/$Format", "10.244.2.44")
}

// kcmUser is the endpoints controller without service account
// credentials: it writes as kube-controller-manager.
func (s *sim) kcmUser() Client {
	c := s.kcm()
	c.UserAgent = s.agent("kube-controller-manager", "endpoint-controller")
	return c
}

// variant is one incident's free parameters.
type variant struct {
	// creator deletes and re-creates the victims' Services and creates
	// and deletes a preview Service after the stale resourceVersion;
	// trigger deletes legacy/legacy-api. Unused when running.
	creator, trigger Client
	// victims bounds how many Services the creator re-creates (chosen at
	// random from the pool of long-lived Services).
	victims [2]int
	// pool is the victims of a running loop.
	pool [][2]string
	// running: the loop began before the trace.
	running bool
	// subset: a random non-empty subset of the victims churns at each
	// restart, else all of them.
	subset bool
	// asKCM: the endpoints controller writes as
	// system:kube-controller-manager, not with its service account.
	asKCM bool
	// delay bounds the time from a restart to the first churned delete,
	// recreate from a delete to its re-create.
	delay, recreate [2]time.Duration
	// userEnds: after a random number of iterations in this range a user
	// deletes and re-creates monitoring/prometheus, which ends the loop
	// (0: never).
	userEnds [2]int
	// periods is about how many restart periods the loop lasts.
	periods int
	// dnsRestart: kube-dns restarts half-way and watches from a fresh
	// resourceVersion.
	dnsRestart bool
	// nodes: kube-proxy runs on this many nodes (default: the two of
	// servicesWatchers), each watching Services.
	nodes int
}

// victimPool is the long-lived Services a CI or an admin may re-create
// (not monitoring/prometheus, which a user re-creates to end the loop).
var victimPool = [][2]string{{"default", "api"}, {"payments", "billing"}, {"batch", "worker"}, {"web", "frontend"}, {"web", "promo"}, {"web", "shop"}}

// stale is legacy/legacy-api's resourceVersion.
const stale = "1200"

// replay is what a replay from a stale resourceVersion makes the endpoints
// controller do after one restart.
type replay struct {
	writer   func(t time.Time) Client
	victims  [][2]string // deleted and re-created since the stale resourceVersion
	gone     [][2]string // deleted since then: their Endpoints are gone (404)
	subset   bool
	delay    [2]time.Duration
	recreate [2]time.Duration
	// stale, when set, tells the stale resourceVersions (any of them
	// replays: the loop drifts), else only loop.ResourceVersion is;
	// victimsAt, when set, the victims of a replay at t.
	stale     func(t time.Time, rv string) bool
	victimsAt func(t time.Time) [][2]string
}

// replayChurn returns the onWatch of a reflector stuck at stale: after
// each restart from it, the churn, recorded in loop.
func (s *sim) replayChurn(loop *Loop, rp replay) func(t time.Time, rv, watchID string) {
	return func(t time.Time, rv, watchID string) {
		if rp.stale != nil {
			if !rp.stale(t, rv) {
				return
			}
			if !slices.Contains(loop.StaleRVs, rv) {
				loop.StaleRVs = append(loop.StaleRVs, rv)
			}
		} else if rv != loop.ResourceVersion {
			return
		}
		if rp.victimsAt != nil {
			rp.victims = rp.victimsAt(t)
		}
		w := rp.writer(t)
		d := t.Add(s.between(rp.delay[0], rp.delay[1]))
		for _, g := range rp.gone {
			s.write(d, w, "delete", endpoints, g[0], g[1], false)
			d = d.Add(s.between(time.Millisecond, 20*time.Millisecond))
		}
		order := s.rng.Perm(len(rp.victims))
		if rp.subset {
			order = order[:1+s.rng.IntN(len(order))]
		}
		followed := false
		for _, i := range order {
			ns, name := rp.victims[i][0], rp.victims[i][1]
			delID, _ := s.write(d, w, "delete", endpoints, ns, name, true)
			c := d.Add(s.between(rp.recreate[0], rp.recreate[1]))
			createID, _ := s.write(c, w, "create", endpoints, ns, name, true)
			if d.Add(100 * time.Millisecond).Before(s.end) {
				loop.ChurnAfter[delID] = watchID
				loop.Objects = append(loop.Objects, ns+"/"+name)
				followed = true
			}
			if c.Add(100 * time.Millisecond).Before(s.end) {
				loop.ChurnAfter[createID] = watchID
			}
			d = d.Add(s.between(time.Millisecond, 60*time.Millisecond))
		}
		if followed {
			loop.Iterations++
		}
	}
}

// epWriter returns who writes Endpoints for kube-controller-manager.
func (s *sim) epWriter(asKCM bool) Client {
	if asKCM {
		return s.kcmUser()
	}
	return s.endpointController()
}

// prelude writes, from t, what puts the cluster in the loop: creator
// deletes and re-creates the victims and creates and deletes a preview
// Service, the endpoints controller following each; then trigger deletes
// legacy/legacy-api. It returns the victims, the gone Services and when
// the trigger's DELETE was delivered.
func (s *sim) prelude(t time.Time, v variant, epc Client) (victims, gone [][2]string, triggered time.Time) {
	n := v.victims[0] + s.rng.IntN(v.victims[1]-v.victims[0]+1)
	for _, i := range s.rng.Perm(len(victimPool))[:n] {
		victims = append(victims, victimPool[i])
	}
	preview := [2]string{"ci-preview", "pr-" + strconv.Itoa(100+s.rng.IntN(900))}
	gone = [][2]string{preview}
	type step struct {
		verb string
		svc  [2]string
	}
	var steps []step
	for _, vc := range victims {
		steps = append(steps, step{"delete", vc}, step{"create", vc})
	}
	steps = append(steps, step{"create", preview}, step{"delete", preview})
	for i, st := range steps {
		s.write(t, v.creator, st.verb, services, st.svc[0], st.svc[1], true)
		s.write(t.Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, st.verb, endpoints, st.svc[0], st.svc[1], true)
		if i%2 == 0 {
			// helm --force replaces a Service: delete, then create at once.
			t = t.Add(s.between(20*time.Millisecond, 300*time.Millisecond))
		} else {
			t = t.Add(s.between(s.scale.Step/2, s.scale.Step*3/2))
		}
	}
	// The trigger comes later: the pipeline's writes are long done when
	// the loop starts (so none of them explains its churn).
	t = t.Add(max(12*time.Second, s.period()/2) + s.between(0, s.period()))
	s.write(t, v.trigger, "delete", services, "legacy", "legacy-api", true)
	s.write(t.Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, "delete", endpoints, "legacy", "legacy-api", true)
	return victims, gone, t.Add(30 * time.Millisecond)
}

// buildVariant is the incident with v's parameters.
func buildVariant(s *sim, v variant) {
	s.seedCluster()
	p := s.period()
	epc, kcm := s.epWriter(v.asKCM), s.kcm()
	var victims, gone [][2]string
	var loopStart time.Time
	if v.running {
		s.initials["services"] = 1200 // every Services watcher already resumes from it
		victims = v.pool
		loopStart = s.t0
		s.end = s.at(time.Duration(v.periods) * p)
	} else {
		// Victims first (write their RVs), trigger after.
		victims, gone, loopStart = s.prelude(s.at(p/2), v, epc)
		s.end = loopStart.Add(time.Duration(v.periods) * p)
	}
	s.background()

	loop := Loop{Client: kcm, Resource: "services", ResourceVersion: stale, ChurnAfter: map[string]string{}}
	churn := s.replayChurn(&loop, replay{writer: func(time.Time) Client { return epc }, victims: victims, gone: gone,
		subset: v.subset, delay: v.delay, recreate: v.recreate})
	ends := 0
	if v.userEnds[1] > 0 {
		ends = v.userEnds[0] + s.rng.IntN(v.userEnds[1]-v.userEnds[0]+1)
	}
	admin := s.admin()
	s.run(reflector{c: kcm, res: "services", rvAt: s.follow("services"), onWatch: func(t time.Time, rv, id string) {
		churn(t, rv, id)
		if ends > 0 && rv == stale && loop.Iterations == ends {
			// A user deletes and re-creates an unrelated Service, at a
			// random point of the restart period: the loop's last.
			u := t.Add(s.between(100*time.Millisecond, s.scale.RestartMin/2))
			s.write(u, admin, "delete", services, "monitoring", "prometheus", true)
			s.write(u.Add(s.between(100*time.Millisecond, 600*time.Millisecond)), epc, "delete", endpoints, "monitoring", "prometheus", true)
			u = u.Add(s.between(50*time.Millisecond, 400*time.Millisecond)) // kubectl replace --force
			s.write(u, admin, "create", services, "monitoring", "prometheus", true)
			s.write(u.Add(s.between(100*time.Millisecond, 600*time.Millisecond)), epc, "create", endpoints, "monitoring", "prometheus", true)
		}
	}}, s.startup(), s.end)
	s.want.Loops = append(s.want.Loops, loop)
	s.servicesWatchers()
	for i := nodeCount - 1; i < v.nodes; i++ {
		c := s.kubeProxy(i)
		c.SourceIP = "10.0." + strconv.Itoa(1+i/200) + "." + strconv.Itoa(1+i%200)
		s.run(reflector{c: c, res: "services", rvAt: s.follow("services")}, s.startup(), s.end)
	}
	if v.dnsRestart {
		dnsAgent := "kube-dns/1.14.8 (linux/amd64) kubernetes/$Format"
		restart := loopStart.Add(time.Duration(v.periods) * p / 2)
		s.run(reflector{c: podClient("kube-system", "kube-dns", dnsAgent, "10.244.1.7"), res: "services", rvAt: s.follow("services")}, s.startup(), restart)
		dns := podClient("kube-system", "kube-dns", dnsAgent, "10.244.2.9")
		listT := restart.Add(2 * time.Second)
		listRV := s.list(listT, dns, "services", "")
		s.run(reflector{c: dns, res: "services", rvAt: s.followFrom("services", listT, listRV)}, listT.Add(100*time.Millisecond), s.end)
	}
}

// driftServices are early-created Services the cleanup operator deletes
// while the loop of incident-drifting runs.
var driftServices = []struct {
	ns, name string
	rv       int64
}{
	{"legacy", "old-reports", 900}, {"legacy", "old-search", 1500}, {"legacy", "old-cache", 2300},
	{"archive", "exporter", 8800}, {"archive", "mailer", 15000},
}

// buildDrifting is the incident in a cluster whose other Services are
// deleted while the loop runs, so its stale resourceVersion drifts.
func buildDrifting(s *sim) {
	s.seedCluster()
	for i, d := range driftServices {
		s.seed("services", d.ns, d.name, d.rv)
		s.seed("endpoints", d.ns, d.name, s.rev0-70000+int64(i)*977)
	}
	p := s.period()
	epc, kcm, ci, ops := s.endpointController(), s.kcm(), s.ciDeployer(), s.cleanupOperator()
	v := variant{creator: ci, trigger: ops, victims: [2]int{2, 4}}
	victims, gone, loopStart := s.prelude(s.at(p/2), v, epc)
	const periods = 16
	s.end = loopStart.Add(periods * p)
	s.background()

	// Half-way the CI re-creates one more Service (helm --force); the
	// operator's deletes come at random times, at least one after it.
	var late [2]string
	for _, c := range s.rng.Perm(len(victimPool)) {
		if !slices.Contains(victims, victimPool[c]) {
			late = victimPool[c]
			break
		}
	}
	lateAt := loopStart.Add(periods * p / 2).Add(s.between(0, p))
	s.write(lateAt, ci, "delete", services, late[0], late[1], true)
	s.write(lateAt.Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, "delete", endpoints, late[0], late[1], true)
	created := lateAt.Add(s.between(20*time.Millisecond, 300*time.Millisecond))
	s.write(created, ci, "create", services, late[0], late[1], true)
	s.write(created.Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, "create", endpoints, late[0], late[1], true)

	n := 2 + s.rng.IntN(3)
	var times []time.Time
	for i := range n {
		if i == n-1 {
			times = append(times, created.Add(p+s.between(0, s.end.Sub(created)/2)))
		} else {
			times = append(times, loopStart.Add(p+s.between(0, s.end.Sub(loopStart)-4*p)))
		}
	}
	slices.SortFunc(times, time.Time.Compare)
	for i, j := range s.rng.Perm(len(driftServices))[:n] {
		d := driftServices[j]
		s.write(times[i], ops, "delete", services, d.ns, d.name, true)
		s.write(times[i].Add(s.between(200*time.Millisecond, 800*time.Millisecond)), epc, "delete", endpoints, d.ns, d.name, true)
	}

	loop := Loop{Client: kcm, Resource: "services", ResourceVersion: stale, ChurnAfter: map[string]string{}}
	churn := s.replayChurn(&loop, replay{writer: func(time.Time) Client { return epc }, victims: victims, gone: gone, subset: true,
		delay: [2]time.Duration{10 * time.Millisecond, 3 * time.Second}, recreate: [2]time.Duration{5 * time.Millisecond, s.scale.RecreateMax},
		// After the trigger, every resourceVersion from before the
		// trace is stale: the replay from it holds the CI's re-creates.
		stale: func(t time.Time, rv string) bool {
			n, err := strconv.ParseInt(rv, 10, 64)
			return err == nil && n < s.rev0 && t.After(loopStart)
		},
		victimsAt: func(t time.Time) [][2]string {
			if t.After(created) {
				return append(slices.Clone(victims), late)
			}
			return victims
		}})
	s.run(reflector{c: kcm, res: "services", rvAt: s.follow("services"), onWatch: churn}, s.startup(), s.end)
	s.want.Loops = append(s.want.Loops, loop)
	s.servicesWatchers()
}

// buildHA is the incident on a control plane of two apiservers.
func buildHA(s *sim) {
	s.seedCluster()
	p := s.period()
	s.servers = map[string]string{}
	// Clients keep a connection to one apiserver; the load balancer
	// spreads them by address.
	s.route = func(c Client, _ time.Time) string {
		if n := len(c.SourceIP); n > 0 && (c.SourceIP[n-1]-'0')%2 == 1 {
			return "apiserver-b"
		}
		return "apiserver-a"
	}
	lbA, lbB := "10.0.0.200", "10.0.0.201" // the load balancer's source NAT addresses
	kcmAt := func(ip string) Client { c := s.kcm(); c.SourceIP = ip; return c }
	epcAt := func(ip string) Client { c := s.endpointController(); c.SourceIP = ip; return c }
	v := variant{creator: s.admin(), trigger: s.admin(), victims: [2]int{2, 4}}
	victims, gone, triggered := s.prelude(s.at(p/2), v, epcAt(lbA))
	s.end = triggered.Add(13 * p)
	s.background()

	// Each apiserver's own informers.
	for _, srv := range []string{"apiserver-a", "apiserver-b"} {
		api := s.apiserver()
		api.via = srv
		for _, res := range []string{"configmaps", "namespaces"} {
			s.run(reflector{c: api, res: res, rvAt: s.follow(res)}, s.startup(), s.end)
		}
	}

	var snat, leader time.Time // the address change, the leader change
	addr := func(t time.Time) string {
		if !snat.IsZero() && !t.Before(snat) {
			return lbB
		}
		return lbA
	}
	loop := Loop{Client: kcmAt(""), Resource: "services", ResourceVersion: stale, ChurnAfter: map[string]string{}}
	churn := s.replayChurn(&loop, replay{writer: func(t time.Time) Client { return epcAt(addr(t)) }, victims: victims, gone: gone,
		subset: true, delay: [2]time.Duration{10 * time.Millisecond, 2 * time.Second},
		recreate: [2]time.Duration{5 * time.Millisecond, s.scale.RecreateMax}})
	switchAt, lead := 3+s.rng.IntN(2), 6+s.rng.IntN(3)
	s.run(reflector{c: kcmAt(lbA), clientAt: func(t time.Time) Client { return kcmAt(addr(t)) }, res: "services", rvAt: s.follow("services"),
		onWatch: func(t time.Time, rv, id string) {
			if !leader.IsZero() {
				return
			}
			churn(t, rv, id)
			switch {
			case rv == stale && loop.Iterations == switchAt && snat.IsZero():
				snat = t.Add(s.between(s.scale.RestartMin/2, s.scale.RestartMin))
			case rv == stale && loop.Iterations == lead:
				leader = t.Add(s.between(s.scale.RestartMin/2, s.scale.RestartMin))
			}
		}}, s.startup(), s.end)
	if leader.IsZero() {
		panic("scenario: incident-ha: no leader change")
	}
	// The old leader stopped at the leader change (kube-controller-manager
	// exits when it loses its lease); its last watch ends there.
	s.events = slices.DeleteFunc(s.events, func(e auditv1.Event) bool {
		return e.User.Username == "system:kube-controller-manager" && e.Verb == "watch" && e.ObjectRef.Resource == "services" &&
			e.RequestReceivedTimestamp.Time.After(leader)
	})
	// The new leader, on another master, lists and watches from a fresh
	// resourceVersion.
	kcm2 := kcmAt("10.0.0.11")
	listT := leader.Add(s.between(2*time.Second, 4*time.Second))
	listRV := s.list(listT, kcm2, "services", "")
	s.run(reflector{c: kcm2, res: "services", rvAt: s.followFrom("services", listT, listRV)}, listT.Add(50*time.Millisecond), s.end)
	s.want.Loops = append(s.want.Loops, loop)
	s.servicesWatchers()
}

// buildModernUserRecreates: a user re-creates Services right after the
// restarts of a current kube-controller-manager.
func buildModernUserRecreates(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(10 * p)
	s.background()
	kcm, epc, admin := s.kcm(), s.endpointController(), s.admin()
	gc, slicer := s.controllerSA("generic-garbage-collector"), s.controllerSA("endpointslice-controller")
	sliceWrite := func(t time.Time, c Client, verb, ns, name string) {
		uri := "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices"
		if verb == "delete" {
			uri += "/" + name
		}
		code := int32(200)
		if verb == "create" {
			code = 201
		}
		s.do(t, s.between(2*time.Millisecond, 15*time.Millisecond), request{c: c, verb: verb, uri: uri, level: auditv1.LevelMetadata,
			ref:    auditv1.ObjectReference{Resource: "endpointslices", Namespace: ns, Name: name, APIGroup: "discovery.k8s.io", APIVersion: "v1"},
			status: &metav1.Status{Code: code}})
	}
	pool := [][2]string{{"web", "shop"}, {"web", "promo"}, {"batch", "worker"}, {"default", "api"}}
	// The first sync is a watch-list; every later watch resumes from the
	// last event or bookmark.
	start := s.startup()
	listRV := strconv.FormatInt(s.currentRev(start), 10)
	s.watchList(start, s.between(s.scale.RestartMin, s.scale.RestartMax), kcm, "services", "", "")
	n := 0
	s.run(reflector{c: kcm, res: "services", rvAt: func(t time.Time) string {
		if n == 0 {
			return listRV
		}
		return s.follow("services")(t)
	}, onWatch: func(t time.Time, _, _ string) {
		if n++; s.rng.IntN(4) == 0 {
			return
		}
		svc := pool[s.rng.IntN(len(pool))]
		ns, name := svc[0], svc[1]
		u := t.Add(s.between(100*time.Millisecond, 3*time.Second))
		s.write(u, admin, "delete", services, ns, name, true)
		d := u.Add(s.between(5*time.Millisecond, 40*time.Millisecond))
		s.write(d, epc, "delete", endpoints, ns, name, true)
		s.write(d.Add(s.between(5*time.Millisecond, 30*time.Millisecond)), epc, "delete", endpoints, ns, name, false) // 404
		slice := name + "-" + s.suffix()
		sliceWrite(u.Add(s.between(50*time.Millisecond, 900*time.Millisecond)), gc, "delete", ns, slice)
		c := u.Add(s.between(s.scale.Step/2, 2*s.scale.Step))
		s.write(c, admin, "create", services, ns, name, true)
		s.write(c.Add(s.between(20*time.Millisecond, 400*time.Millisecond)), epc, "create", endpoints, ns, name, true)
		sliceWrite(c.Add(s.between(20*time.Millisecond, 400*time.Millisecond)), slicer, "create", ns, name+"-"+s.suffix())
	}}, start.Add(s.between(s.scale.RestartMin, s.scale.RestartMax)), s.end)
	s.servicesWatchers()
}

// buildJanitorIdle: a janitor churns Endpoints after the restarts of an
// idle Services watcher.
func buildJanitorIdle(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(10 * p)
	s.background()
	j := podClient("ops", "endpoints-janitor", "endpoints-janitor/1.2.0 (linux/amd64) kubernetes/$Format", "10.244.3.40")
	s.run(reflector{c: j, res: "endpoints", rvAt: s.follow("endpoints")}, s.startup(), s.end)
	pool := [][2]string{{"default", "api"}, {"payments", "billing"}, {"web", "frontend"}, {"web", "shop"}}
	s.run(reflector{c: s.kcm(), res: "services", rvAt: s.follow("services"), onWatch: func(t time.Time, _, _ string) {
		if s.rng.IntN(5) == 0 {
			return
		}
		d := t.Add(s.between(10*time.Millisecond, 3*time.Second))
		order := s.rng.Perm(len(pool))
		for _, i := range order[:1+s.rng.IntN(3)] {
			ns, name := pool[i][0], pool[i][1]
			s.write(d, j, "delete", endpoints, ns, name, true)
			if s.rng.IntN(4) != 0 {
				// Most are re-created before the next restart.
				s.write(d.Add(s.between(5*time.Millisecond, s.scale.RecreateMax)), j, "create", endpoints, ns, name, true)
			}
			d = d.Add(s.between(time.Millisecond, 80*time.Millisecond))
		}
	}}, s.startup(), s.end)
	s.servicesWatchers()
}

// buildWatchListRelists: watch-lists sent again and again from one
// resourceVersion.
func buildWatchListRelists(s *sim) {
	s.seedCluster()
	p := s.period()
	s.end = s.at(10 * p)
	s.background()
	kcm, epc, admin := s.kcm(), s.endpointController(), s.admin()
	ksm := podClient("monitoring", "kube-state-metrics", "kube-state-metrics/v2.15.0", "10.244.2.31")
	pinned := strconv.FormatInt(s.initial("services"), 10)
	pool := [][2]string{{"web", "shop"}, {"web", "promo"}, {"batch", "worker"}, {"default", "api"}}
	for _, c := range []Client{kcm, ksm} {
		for t := s.startup(); t.Before(s.end); {
			// The initial events never finish: the stream breaks after
			// a while and the reflector sends the watch-list again.
			d := s.between(s.scale.RestartMin, s.scale.RestartMax)
			s.watchList(t, d, c, "services", "", pinned)
			if c.User == kcm.User && s.rng.IntN(4) != 0 {
				// A user re-creates a Service right after it; the
				// endpoints controller follows.
				svc := pool[s.rng.IntN(len(pool))]
				ns, name := svc[0], svc[1]
				u := t.Add(s.between(100*time.Millisecond, 2*time.Second))
				s.write(u, admin, "delete", services, ns, name, true)
				s.write(u.Add(s.between(5*time.Millisecond, 500*time.Millisecond)), epc, "delete", endpoints, ns, name, true)
				u = u.Add(s.between(s.scale.Step/2, s.scale.Step))
				s.write(u, admin, "create", services, ns, name, true)
				s.write(u.Add(s.between(5*time.Millisecond, 500*time.Millisecond)), epc, "create", endpoints, ns, name, true)
			}
			t = t.Add(d + s.between(time.Second, 3*time.Second))
		}
	}
	// kube-proxy watches plainly; Services are deleted, so it advances.
	s.servicesWatchers()
}
