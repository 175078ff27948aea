package scenario

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Node heartbeat loss (seed 004): kubelets behind a load balancer whose
// failover silently dropped their connections. Each kubelet's single
// HTTP/2 connection hangs, so it sends nothing — no Lease renewal, no node
// status, no list or watch — until the kernel gives up on the connection
// (about 15 minutes) or someone restarts it; the node-lifecycle controller
// marks the nodes NotReady, taints them node.kubernetes.io/unreachable and,
// where the zone is not fully disrupted, evicts their pods after the
// toleration; the kubelets relist everything when they reconnect.
//
// The variations draw what real clusters vary: the number of nodes (5 to
// 200), how kubelets heartbeat (10 s Lease renewals and status every 1–5
// minutes on current releases; status every 10 s and no Lease on 1.10, the
// seed's release; status only, irregular, when a policy drops Leases),
// which share of the nodes is cut off, for how long (1 to 20 minutes at
// the real scale), with and without evictions; and the look-alikes that
// must stay silent: one node lost, nodes drained or scaled down on
// purpose, the whole audit feed silent, a quiet cluster whose nodes post
// status rarely.

// HeartbeatWave is the truth about one wave of heartbeat loss, or, with
// FeedGap, a silence of the whole audit feed that looks like one.
type HeartbeatWave struct {
	// Nodes are the nodes cut off, sorted; Seen counts the nodes that
	// heartbeated before.
	Nodes []string
	Seen  int
	// Start is the first lost node's last heartbeat before the wave.
	Start time.Time
	// Back is when each node's first heartbeat after the gap was made
	// (absent: not back before the trace ends).
	Back map[string]time.Time
	// Evicted are the pods the wave's evictions deleted, "namespace/name",
	// sorted.
	Evicted []string
	// NotReady is set when the node-lifecycle controller marked the nodes
	// NotReady (the gap outlasted its grace period).
	NotReady bool
	// FeedGap: nothing at all was logged over [Start, Until): not a loss.
	FeedGap bool
	// Unconfirmed: the nodes' events are missing (one apiserver's feed
	// lost) but the node-lifecycle controller, active, never reacted: an
	// information finding that says so.
	Unconfirmed bool
	Until       time.Time
}

// hbTiming is a scale's kubelet and controller timing.
type hbTiming struct {
	lease        time.Duration // Lease renewal interval
	grace        time.Duration // --node-monitor-grace-period
	toleration   time.Duration // tolerationSeconds of node.kubernetes.io/unreachable
	evictSpacing time.Duration // 1 / --node-eviction-rate
	warm, tail   time.Duration // before the wave, after the last return
	relistWithin time.Duration // a returning kubelet relists within this
	div          time.Duration // divides the scenario's real-scale durations
}

func (s *sim) hbTiming() hbTiming {
	if s.scale.Name == Real.Name {
		return hbTiming{lease: 10 * time.Second, grace: 40 * time.Second, toleration: 300 * time.Second, evictSpacing: 10 * time.Second,
			warm: 30 * time.Minute, tail: 10 * time.Minute, relistWithin: 3 * time.Second, div: 1}
	}
	return hbTiming{lease: 2 * time.Second, grace: 8 * time.Second, toleration: 30 * time.Second, evictSpacing: time.Second,
		warm: 4 * time.Minute, tail: 90 * time.Second, relistWithin: time.Second, div: 5}
}

// hbVariant is one heartbeat scenario's free parameters, at the real
// scale (the compressed scale divides durations by hbTiming.div, gaps by
// 5 but never below 45 s).
type hbVariant struct {
	nodes [2]int
	// leases: kubelets renew a Lease (1.14 and later); status bounds the
	// interval between two node status posts.
	leases bool
	status [2]time.Duration
	// lost bounds the share of nodes cut off (lostN, when set, is their
	// number instead).
	lost  [2]float64
	lostN int
	// gap bounds how long the nodes stay cut off; each node's own gap
	// varies by ±10% around the wave's (none: no loss at all).
	gap [2]time.Duration
	// evict: the zone is not fully disrupted, the controllers evict the
	// lost nodes' pods after the toleration. taintEvictor: Kubernetes
	// 1.29 and later, where the taint-eviction controller deletes them.
	evict, taintEvictor bool
	// intent: how the nodes are taken away on purpose, when they are
	// ("drain": an admin cordons and drains, the node reboots and comes
	// back; "scale-down": cluster-autoscaler taints, drains and deletes
	// them; "" for a loss).
	intent string
	// feedSilent: the whole audit feed is silent over the gap (nothing is
	// logged), the nodes are fine.
	feedSilent bool
	// apiserverFeedLost: two kube-apiservers, each kubelet connected to
	// one; the audit feed of apiserver-b is lost over the gap (its
	// webhook batches dropped) while the nodes are fine.
	apiserverFeedLost bool
	// minGap bounds the gap from below at the compressed scale.
	minGap time.Duration
	// pods per node.
	pods [2]int
}

var heartbeatScenarios = []Scenario{
	{
		Name: "heartbeat-loss-seed",
		Doc: "Seed 004 on Kubernetes 1.10: 20–60 nodes post status every 10 s (no Leases before 1.14); a load balancer " +
			"failover drops every kubelet's connection and all of them hang for 12–17 minutes (the kernel's TCP " +
			"retries), then come back one by one. The node-lifecycle controller marks each NotReady and taints it; the " +
			"whole zone is down, so it evicts nothing (full disruption). The kubelets relist pods, services and their " +
			"node on return. Expect one heartbeat-loss warning naming every node, no eviction.",
		version: "v1.10.2", commit: "81753b1",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{20, 60}, status: [2]time.Duration{10 * time.Second, 10 * time.Second},
				lost: [2]float64{1, 1}, gap: [2]time.Duration{12 * time.Minute, 17 * time.Minute}, pods: [2]int{3, 6}})
		},
	},
	{
		Name: "heartbeat-loss-partial-evictions",
		Doc: "Kubernetes 1.37, 10–40 nodes renewing Leases every 10 s and posting status every 1–5 minutes. A load " +
			"balancer failover cuts off 30–50% of the kubelets for 8–20 minutes; the zone stays healthy enough, so the " +
			"node-lifecycle controller marks them NotReady and taints them, and the taint-eviction controller deletes " +
			"their pods after the 300 s toleration. Expect one critical heartbeat-loss finding with the evicted pods.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{10, 40}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lost: [2]float64{0.3, 0.5}, gap: [2]time.Duration{8 * time.Minute, 20 * time.Minute}, evict: true, taintEvictor: true,
				pods: [2]int{2, 5}})
		},
	},
	{
		Name: "heartbeat-loss-short",
		Doc: "Kubernetes 1.37, 5–15 nodes with Leases: 60–90% of them lose the apiserver for 1–4 minutes — NotReady " +
			"and tainted, back before the toleration, nothing evicted. Expect one heartbeat-loss warning.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{5, 15}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lost: [2]float64{0.6, 0.9}, gap: [2]time.Duration{time.Minute, 4 * time.Minute}, pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-loss-large",
		Doc: "Kubernetes 1.37, 150–200 nodes with Leases: 70–95% lose the apiserver for 5–9 minutes; the zone is " +
			"partially disrupted and the node-lifecycle controller (1.28: it still evicts itself, as node-controller) " +
			"deletes the pods of the nodes it tainted first. Expect one critical heartbeat-loss finding.",
		version: "v1.28.9", commit: "587f5fe",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{150, 200}, leases: true, status: [2]time.Duration{4 * time.Minute, 5 * time.Minute},
				lost: [2]float64{0.7, 0.95}, gap: [2]time.Duration{5 * time.Minute, 9 * time.Minute}, evict: true, pods: [2]int{1, 2}})
		},
	},
	{
		Name: "heartbeat-loss-status-only",
		Doc: "Kubernetes 1.37 under an audit policy that drops Leases (a common sample policy does): only node status " +
			"posts show, every 10–60 s (status changes often on these nodes). 8–20 nodes, 50–80% lost for 10–20 " +
			"minutes, no evictions. Expect one heartbeat-loss warning.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{8, 20}, status: [2]time.Duration{10 * time.Second, time.Minute},
				lost: [2]float64{0.5, 0.8}, gap: [2]time.Duration{10 * time.Minute, 20 * time.Minute}, pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-loss-hours",
		Doc: "Kubernetes 1.37, 20–40 nodes with Leases: a load balancer failover cuts off 40–60% of the kubelets and nobody " +
			"restarts them; their connections hang for 2.5–3.5 hours (30–42 minutes at the compressed scale), longer than a " +
			"detection window and its lookback. The taint-eviction controller deletes their pods. Expect one critical " +
			"heartbeat-loss finding for the whole wave, however many windows show it.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{20, 40}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lost: [2]float64{0.4, 0.6}, gap: [2]time.Duration{150 * time.Minute, 210 * time.Minute}, evict: true, taintEvictor: true,
				pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-one-node-lost",
		Doc: "Kubernetes 1.37, 5–30 nodes: one node loses the apiserver for 10–20 minutes (NotReady, tainted, its pods " +
			"evicted). A single node going away is not a wave. Expect no finding.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{5, 30}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lostN: 1, gap: [2]time.Duration{10 * time.Minute, 20 * time.Minute}, evict: true, taintEvictor: true, pods: [2]int{2, 4}})
		},
	},
	{
		Name: "heartbeat-drain-maintenance",
		Doc: "Kubernetes 1.37, 6–20 nodes: an admin cordons and drains 2–4 nodes (pods/eviction), they reboot and come " +
			"back 5–10 minutes later; the node-lifecycle controller marks them NotReady meanwhile. Taken away on " +
			"purpose. Expect no finding.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{6, 20}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lost: [2]float64{0.2, 0.3}, gap: [2]time.Duration{5 * time.Minute, 10 * time.Minute}, intent: "drain", pods: [2]int{2, 4}})
		},
	},
	{
		Name: "heartbeat-scale-down",
		Doc: "Kubernetes 1.37, 10–30 nodes: cluster-autoscaler scales 3–5 nodes down at once: it taints them " +
			"ToBeDeletedByClusterAutoscaler, evicts their pods, the VMs are terminated and the nodes deleted. Expect no " +
			"finding.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{10, 30}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				lost: [2]float64{0.15, 0.2}, gap: [2]time.Duration{20 * time.Minute, 20 * time.Minute}, intent: "scale-down", pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-feed-silent",
		Doc: "Kubernetes 1.37, 10–30 healthy nodes with Leases: the audit feed itself stops for 6–12 minutes (nothing at " +
			"all is logged from the cluster: the webhook backend dropped its batches). Every node's heartbeats are " +
			"missing over that stretch, like everything else. Expect one information finding titled as an audit-feed " +
			"gap, no heartbeat-loss warning.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{10, 30}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				gap: [2]time.Duration{6 * time.Minute, 12 * time.Minute}, feedSilent: true, pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-apiserver-feed-lost",
		Doc: "Kubernetes 1.37 with two kube-apiservers (Trace.APIServers), 10–30 healthy nodes with Leases, each kubelet " +
			"connected to one of them: apiserver-b's audit webhook drops its batches for 6–12 minutes, so the events of " +
			"the kubelets it serves vanish while apiserver-a's (kube-controller-manager's among them) go on (4 minutes at " +
			"the compressed scale: the detector waits 3 minutes for the controller's reaction). The " +
			"controller reads the Leases from etcd and marks nobody NotReady. Expect one information finding that the " +
			"nodes' events are missing without a node-lifecycle reaction, no warning.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{10, 30}, leases: true, status: [2]time.Duration{time.Minute, 5 * time.Minute},
				gap: [2]time.Duration{6 * time.Minute, 12 * time.Minute}, apiserverFeedLost: true, minGap: 4 * time.Minute,
				pods: [2]int{1, 3}})
		},
	},
	{
		Name: "heartbeat-quiet-slow-status",
		Doc: "Kubernetes 1.37 under a policy that drops Leases, 5–12 nodes in a quiet cluster: their status posts come " +
			"every 10 s to 5 minutes (only on change, or every nodeStatusReportFrequency), nothing is lost. Expect no " +
			"finding.",
		version: "v1.37.2", commit: "abc1234",
		build: func(s *sim) {
			buildHeartbeat(s, hbVariant{nodes: [2]int{5, 12}, status: [2]time.Duration{10 * time.Second, 5 * time.Minute}, pods: [2]int{1, 3}})
		},
	},
}

func init() {
	for _, sc := range heartbeatScenarios {
		sc.salted = true
		all = append(all, sc)
	}
}

// hbNode is one simulated node and its kubelet.
type hbNode struct {
	name   string
	c      Client
	status [2]time.Duration
	pods   []string // "namespace/name"
	// cut is when the kubelet lost the apiserver, back when it reached it
	// again (zero: never lost, or not back within the trace).
	cut, back time.Time
	// lastBeat is the last heartbeat before the cut, firstBack the first
	// after the return.
	lastBeat, firstBack time.Time
}

func (n *hbNode) offline(t time.Time) bool {
	return !n.cut.IsZero() && !t.Before(n.cut) && (n.back.IsZero() || t.Before(n.back))
}

func (s *sim) hbKubelet(name string, i int) Client {
	return Client{User: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"},
		UserAgent: s.agent("kubelet", ""), SourceIP: "10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(1+i%250)}
}

// ranged returns a random value in r (r[0] when the range is empty).
func (s *sim) ranged(r [2]time.Duration) time.Duration { return s.between(r[0], r[1]+1) }

// buildHeartbeat simulates a cluster of kubelets and controllers with v's
// loss, intent or feed silence.
func buildHeartbeat(s *sim, v hbVariant) {
	tm := s.hbTiming()
	scaled := func(d time.Duration) time.Duration { return d / tm.div }
	gapOf := func(d time.Duration) time.Duration {
		if tm.div == 1 {
			return d
		}
		return max(d/tm.div, 45*time.Second, v.minGap)
	}
	count := v.nodes[0] + s.rng.IntN(v.nodes[1]-v.nodes[0]+1)
	namespaces := []string{"web", "payments", "batch", "monitoring", "search"}
	nodes := make([]*hbNode, count)
	for i := range nodes {
		name := fmt.Sprintf("k8s-node-%03d", i+1)
		n := &hbNode{name: name, c: s.hbKubelet(name, i), status: [2]time.Duration{scaled(v.status[0]), scaled(v.status[1])}}
		for range v.pods[0] + s.rng.IntN(v.pods[1]-v.pods[0]+1) {
			ns := namespaces[s.rng.IntN(len(namespaces))]
			n.pods = append(n.pods, ns+"/"+ns+"-"+s.suffix())
		}
		nodes[i] = n
	}
	waveAt := s.at(tm.warm + s.between(0, scaled(2*time.Minute)))
	gap := gapOf(s.ranged(v.gap))

	// Who is cut off (or taken away), and until when.
	var lost []*hbNode
	switch {
	case v.lostN > 0:
		lost = nodes[:v.lostN]
	case v.lost[1] > 0:
		share := v.lost[0] + s.rng.Float64()*(v.lost[1]-v.lost[0])
		k := max(1, int(float64(count)*share+0.5))
		for _, i := range s.rng.Perm(count)[:k] {
			lost = append(lost, nodes[i])
		}
	}
	slices.SortFunc(lost, func(a, b *hbNode) int { return cmp.Compare(a.name, b.name) })
	var lastBack time.Time
	for _, n := range lost {
		// A load balancer drops every connection at one moment; each
		// kubelet notices (or is restarted) on its own.
		n.cut = waveAt.Add(s.between(0, 200*time.Millisecond))
		own := time.Duration(float64(gap) * (0.9 + 0.2*s.rng.Float64()))
		if v.intent != "scale-down" {
			n.back = n.cut.Add(own)
			lastBack = later(lastBack, n.back)
		}
	}
	s.end = later(waveAt.Add(gap), lastBack).Add(tm.tail)
	feedFrom, feedTo := time.Time{}, time.Time{}
	if v.feedSilent {
		feedFrom, feedTo = waveAt, waveAt.Add(gap)
	}
	if v.apiserverFeedLost {
		// Clients keep one connection each; the load balancer spread them
		// by address.
		s.servers = map[string]string{}
		s.route = func(c Client, _ time.Time) string {
			if n := len(c.SourceIP); n > 0 && (c.SourceIP[n-1]-'0')%2 == 1 {
				return "apiserver-b"
			}
			return "apiserver-a"
		}
	}

	s.hbBackground(nodes)
	for _, n := range nodes {
		s.hbKubeletTraffic(n, v, tm)
	}
	truth := s.hbConsequences(nodes, lost, v, tm)

	if v.apiserverFeedLost {
		from, to := waveAt, waveAt.Add(gap)
		s.silenceWhere(from, to, func(id string) bool { return s.servers[id] == "apiserver-b" })
		w := HeartbeatWave{Seen: count, Unconfirmed: true, Start: to}
		for _, n := range nodes {
			if s.route(n.c, from) != "apiserver-b" {
				continue
			}
			w.Nodes = append(w.Nodes, n.name)
			// The last heartbeat apiserver-b delivered before the gap.
			var last time.Time
			for _, e := range s.events {
				if e.User.Username == n.c.User && e.Stage == auditv1.StageRequestReceived && isHeartbeat(e) && e.RequestReceivedTimestamp.Before(&metav1.MicroTime{Time: from}) {
					last = later(last, e.RequestReceivedTimestamp.Time)
				}
			}
			if last.Before(w.Start) {
				w.Start = last
			}
		}
		s.want.HeartbeatWaves = append(s.want.HeartbeatWaves, w)
		return
	}
	if v.feedSilent {
		s.silence(feedFrom, feedTo)
		w := HeartbeatWave{Seen: count, FeedGap: true, Until: feedTo}
		for _, n := range nodes {
			w.Nodes = append(w.Nodes, n.name)
		}
		w.Start = feedFrom
		s.want.HeartbeatWaves = append(s.want.HeartbeatWaves, w)
		return
	}
	if len(lost) >= 2 && v.intent == "" {
		s.want.HeartbeatWaves = append(s.want.HeartbeatWaves, truth)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// hbKubeletTraffic is one kubelet's requests: Lease renewals and status
// posts, its pods watch, and the relist when it comes back.
func (s *sim) hbKubeletTraffic(n *hbNode, v hbVariant, tm hbTiming) {
	leaseRef := auditv1.ObjectReference{Resource: "leases", Namespace: "kube-node-lease", Name: n.name,
		APIGroup: "coordination.k8s.io", APIVersion: "v1"}
	beat := func(t time.Time, r request) {
		if n.offline(t) {
			return
		}
		s.do(t, s.between(2*time.Millisecond, 12*time.Millisecond), r)
		t = t.UTC().Truncate(time.Microsecond)
		switch {
		case n.cut.IsZero() || t.Before(n.cut):
			n.lastBeat = later(n.lastBeat, t)
		case n.firstBack.IsZero() || t.Before(n.firstBack):
			n.firstBack = t
		}
	}
	if v.leases {
		for t := s.t0.Add(s.between(0, tm.lease)); t.Before(s.end); t = t.Add(s.between(tm.lease*95/100, tm.lease*105/100)) {
			beat(t, request{c: n.c, verb: "update", uri: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + n.name + "?timeout=10s",
				ref: leaseRef, level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
		}
	}
	statusRef := auditv1.ObjectReference{Resource: "nodes", Name: n.name, APIVersion: "v1", Subresource: "status"}
	postStatus := func(t time.Time) {
		beat(t, request{c: n.c, verb: "patch", uri: "/api/v1/nodes/" + n.name + "/status?timeout=10s",
			ref: statusRef, level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
	}
	for t := s.t0.Add(s.between(0, n.status[1])); t.Before(s.end); t = t.Add(s.ranged(n.status)) {
		postStatus(t)
	}
	// The pods of the node, watched back to back (fieldSelector
	// spec.nodeName), every 5–10 minutes at the real scale.
	for t := s.t0.Add(s.between(0, s.scale.RestartMin)); t.Before(s.end); {
		timeout := s.between(s.scale.RestartMin, s.scale.RestartMax).Truncate(time.Second)
		// A watch open when the connection hangs stays open on the
		// apiserver's side until its timeout: its end is logged.
		if !n.offline(t) {
			s.do(t, timeout, request{c: n.c, verb: "watch",
				uri:   "/api/v1/pods?fieldSelector=spec.nodeName%3D" + n.name + "&resourceVersion=" + strconv.FormatInt(s.currentRev(t), 10) + "&timeoutSeconds=" + strconv.Itoa(int(timeout.Seconds())) + "&watch=true",
				ref:   auditv1.ObjectReference{Resource: "pods", APIVersion: "v1"},
				level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
		}
		t = t.Add(timeout + s.between(time.Millisecond, 100*time.Millisecond))
	}
	if !n.back.IsZero() {
		// Back: the kubelet's informers relist on the new connection, its
		// status goes out at once.
		t := n.back
		for _, q := range []struct{ res, uri string }{
			{"pods", "/api/v1/pods?fieldSelector=spec.nodeName%3D" + n.name + "&limit=500&resourceVersion=0"},
			{"services", "/api/v1/services?limit=500&resourceVersion=0"},
			{"nodes", "/api/v1/nodes?fieldSelector=metadata.name%3D" + n.name + "&limit=500&resourceVersion=0"},
		} {
			s.do(t.Add(s.between(0, tm.relistWithin)), s.between(2*time.Millisecond, 30*time.Millisecond), request{c: n.c, verb: "list", uri: q.uri,
				ref: auditv1.ObjectReference{Resource: q.res, APIVersion: "v1"}, level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
		}
		postStatus(t.Add(s.between(0, tm.relistWithin)))
	}
}

// hbBackground is the rest of the cluster: controller and scheduler
// leader leases, the apiserver's own reads, kube-controller-manager's and
// the scheduler's informers, a replicaset controller replacing pods.
func (s *sim) hbBackground(nodes []*hbNode) {
	kcm, sched, api := s.kcm(), s.scheduler(), s.apiserver()
	renew := 2 * time.Second
	for _, l := range []struct {
		c    Client
		name string
	}{{kcm, "kube-controller-manager"}, {sched, "kube-scheduler"}} {
		for t := s.t0.Add(s.between(0, renew)); t.Before(s.end); t = t.Add(s.between(renew*9/10, renew*11/10)) {
			s.do(t, s.between(2*time.Millisecond, 10*time.Millisecond), request{c: l.c, verb: "update",
				uri:   "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + l.name + "?timeout=5s",
				ref:   auditv1.ObjectReference{Resource: "leases", Namespace: "kube-system", Name: l.name, APIGroup: "coordination.k8s.io", APIVersion: "v1"},
				level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
		}
	}
	for t := s.t0.Add(s.between(0, 10*time.Second)); t.Before(s.end); t = t.Add(10 * time.Second) {
		s.do(t, s.between(time.Millisecond, 3*time.Millisecond), request{c: api, verb: "get", uri: "/api/v1/namespaces/default/endpoints/kubernetes",
			ref:   auditv1.ObjectReference{Resource: "endpoints", Namespace: "default", Name: "kubernetes", APIVersion: "v1"},
			level: auditv1.LevelMetadata, status: &metav1.Status{Code: 200}})
	}
	for _, r := range []reflector{
		{c: kcm, res: "pods", rvAt: s.follow("pods")},
		{c: kcm, res: "nodes", rvAt: s.follow("nodes")},
		{c: sched, res: "pods", rvAt: s.follow("pods")},
		{c: sched, res: "nodes", rvAt: s.follow("nodes")},
	} {
		s.run(r, s.startup(), s.end)
	}
}

// hbConsequences writes what the controllers do about the lost nodes and
// returns the truth about the wave.
func (s *sim) hbConsequences(nodes, lost []*hbNode, v hbVariant, tm hbTiming) HeartbeatWave {
	w := HeartbeatWave{Back: map[string]time.Time{}, Seen: len(nodes)}
	lifecycle := s.controllerSA("node-controller")
	evictor := lifecycle
	if v.taintEvictor {
		evictor = s.controllerSA("taint-eviction-controller")
	}
	rs := s.controllerSA("replicaset-controller")
	admin := s.admin()
	ca := podClient("kube-system", "cluster-autoscaler", "cluster-autoscaler/v1.37.0", "10.244.0.12")
	nodeRef := func(name, sub string) auditv1.ObjectReference {
		return auditv1.ObjectReference{Resource: "nodes", Name: name, APIVersion: "v1", Subresource: sub}
	}
	ok := &metav1.Status{Code: 200}
	for i, n := range lost {
		w.Nodes = append(w.Nodes, n.name)
		if w.Start.IsZero() || n.lastBeat.Before(w.Start) {
			w.Start = n.lastBeat
		}
		if !n.firstBack.IsZero() {
			w.Back[n.name] = n.firstBack
		}
		switch v.intent {
		case "drain":
			// Cordon, evict through the API, then the node reboots.
			t := n.cut.Add(-s.between(2*time.Minute, 4*time.Minute) / tm.div)
			s.do(t, s.between(3*time.Millisecond, 9*time.Millisecond), request{c: admin, verb: "patch", uri: "/api/v1/nodes/" + n.name,
				ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
			for _, p := range n.pods {
				t = t.Add(s.between(200*time.Millisecond, 2*time.Second))
				ns, name := splitNS(p)
				s.do(t, s.between(5*time.Millisecond, 20*time.Millisecond), request{c: admin, verb: "create",
					uri:   "/api/v1/namespaces/" + ns + "/pods/" + name + "/eviction",
					ref:   auditv1.ObjectReference{Resource: "pods", Namespace: ns, Name: name, APIVersion: "v1", Subresource: "eviction"},
					level: auditv1.LevelMetadata, status: &metav1.Status{Code: 201}})
			}
			if !n.back.IsZero() {
				s.do(n.back.Add(s.between(30*time.Second, time.Minute)/tm.div), s.between(3*time.Millisecond, 9*time.Millisecond), request{c: admin, verb: "patch",
					uri: "/api/v1/nodes/" + n.name, ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
			}
		case "scale-down":
			t := n.cut.Add(-s.between(time.Minute, 2*time.Minute) / tm.div)
			s.do(t, s.between(3*time.Millisecond, 9*time.Millisecond), request{c: ca, verb: "update", uri: "/api/v1/nodes/" + n.name,
				ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
			for _, p := range n.pods {
				t = t.Add(s.between(100*time.Millisecond, time.Second))
				ns, name := splitNS(p)
				s.do(t, s.between(5*time.Millisecond, 20*time.Millisecond), request{c: ca, verb: "create",
					uri:   "/api/v1/namespaces/" + ns + "/pods/" + name + "/eviction",
					ref:   auditv1.ObjectReference{Resource: "pods", Namespace: ns, Name: name, APIVersion: "v1", Subresource: "eviction"},
					level: auditv1.LevelMetadata, status: &metav1.Status{Code: 201}})
			}
			s.do(n.cut.Add(s.between(30*time.Second, 90*time.Second)/tm.div), s.between(5*time.Millisecond, 20*time.Millisecond), request{c: ca, verb: "delete",
				uri: "/api/v1/nodes/" + n.name, ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
		}
		if v.feedSilent {
			continue
		}
		// The node-lifecycle controller notices after the grace period
		// (it checks every 5 s), marks the node NotReady (Unknown
		// conditions) and taints it unreachable; taints that evict are
		// rate-limited (--node-eviction-rate).
		gap := n.back.Sub(n.cut)
		if n.back.IsZero() {
			gap = s.end.Sub(n.cut)
		}
		noticed := n.lastBeat.Add(tm.grace + s.between(0, 5*time.Second/tm.div))
		if gap <= tm.grace+5*time.Second/tm.div || v.intent == "scale-down" {
			continue
		}
		w.NotReady = true
		s.do(noticed, s.between(3*time.Millisecond, 12*time.Millisecond), request{c: lifecycle, verb: "update",
			uri: "/api/v1/nodes/" + n.name + "/status", ref: nodeRef(n.name, "status"), level: auditv1.LevelMetadata, status: ok})
		taintAt := noticed.Add(s.between(10*time.Millisecond, 500*time.Millisecond))
		if v.evict {
			taintAt = noticed.Add(time.Duration(i) * tm.evictSpacing)
		}
		if !n.back.IsZero() && !taintAt.Before(n.back) {
			continue
		}
		s.do(taintAt, s.between(3*time.Millisecond, 12*time.Millisecond), request{c: lifecycle, verb: "patch",
			uri: "/api/v1/nodes/" + n.name, ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
		if !n.back.IsZero() {
			// Back: the taints go.
			s.do(n.back.Add(s.between(time.Second, 5*time.Second)/tm.div), s.between(3*time.Millisecond, 12*time.Millisecond), request{c: lifecycle, verb: "patch",
				uri: "/api/v1/nodes/" + n.name, ref: nodeRef(n.name, ""), level: auditv1.LevelMetadata, status: ok})
		}
		evictAt := taintAt.Add(tm.toleration)
		if !v.evict || v.intent != "" || (!n.back.IsZero() && !evictAt.Before(n.back)) || !evictAt.Before(s.end) {
			continue
		}
		for _, p := range n.pods {
			ns, name := splitNS(p)
			t := evictAt.Add(s.between(time.Millisecond, 300*time.Millisecond))
			s.do(t, s.between(3*time.Millisecond, 15*time.Millisecond), request{c: evictor, verb: "delete",
				uri: "/api/v1/namespaces/" + ns + "/pods/" + name, ref: auditv1.ObjectReference{Resource: "pods", Namespace: ns, Name: name, APIVersion: "v1"},
				level: auditv1.LevelMetadata, status: ok})
			w.Evicted = append(w.Evicted, p)
			// Its replica set replaces it on a healthy node.
			s.do(t.Add(s.between(20*time.Millisecond, 400*time.Millisecond)), s.between(3*time.Millisecond, 15*time.Millisecond), request{c: rs, verb: "create",
				uri: "/api/v1/namespaces/" + ns + "/pods", ref: auditv1.ObjectReference{Resource: "pods", Namespace: ns, APIVersion: "v1"},
				level: auditv1.LevelMetadata, status: &metav1.Status{Code: 201}})
		}
	}
	slices.Sort(w.Evicted)
	return w
}

func splitNS(p string) (ns, name string) {
	for i := range p {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return "", p
}

// silence drops everything logged in [from, to): the audit feed stopped.
func (s *sim) silence(from, to time.Time) {
	s.silenceWhere(from, to, func(string) bool { return true })
}

// silenceWhere drops what was logged in [from, to) of the requests that
// lost picks (by audit ID). A request made in the stretch loses all its
// stages; one made before keeps the stages logged before.
func (s *sim) silenceWhere(from, to time.Time, lost func(id string) bool) {
	gone := map[string]bool{}
	for _, e := range s.events {
		if e.Stage == auditv1.StageRequestReceived && !e.StageTimestamp.Time.Before(from) && e.StageTimestamp.Time.Before(to) && lost(string(e.AuditID)) {
			gone[string(e.AuditID)] = true
		}
	}
	s.events = slices.DeleteFunc(s.events, func(e auditv1.Event) bool {
		t := e.StageTimestamp.Time
		return gone[string(e.AuditID)] || (!t.Before(from) && t.Before(to) && lost(string(e.AuditID)))
	})
}

// isHeartbeat reports whether e is a kubelet's Lease renewal or node
// status post.
func isHeartbeat(e auditv1.Event) bool {
	r := e.ObjectRef
	return r != nil && (r.Resource == "leases" && r.Namespace == "kube-node-lease" || r.Resource == "nodes" && r.Subresource == "status") &&
		(e.Verb == "update" || e.Verb == "patch")
}
