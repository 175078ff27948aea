package heartbeatloss

import "github.com/auditlens/auditlens/policy"

// The node-lifecycle and taint-eviction controllers' own identities, when
// kube-controller-manager runs with --use-service-account-credentials.
var (
	nodeControllerClient = policy.Client{Name: "node-lifecycle controller (service account)",
		User:   "system:serviceaccount:kube-system:node-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	taintEvictionClient = policy.Client{Name: "taint-eviction controller (service account)",
		User:   "system:serviceaccount:kube-system:taint-eviction-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
)

// sub sets a probe's subresource.
func sub(p policy.Probe, subresource string) policy.Probe {
	p.Request.Subresource = subresource
	return p
}

// Needs is what heartbeat-loss must see in the audit log, for `auditlens
// policy check`. Everything it reads — who, verb, resource, name, time,
// response code — is recorded at level Metadata.
func (d *HeartbeatLoss) Needs() []policy.Need {
	lease := policy.Named(policy.NewProbe(policy.Kubelet, "update", "coordination.k8s.io", "leases", "kube-node-lease", policy.RequestStages), "node-1")
	status := policy.Named(sub(policy.NewProbe(policy.Kubelet, "patch", "", "nodes", "", policy.RequestStages), "status"), "node-1")
	return []policy.Need{
		{
			ID: "heartbeats", Title: "kubelets' Lease renewals or node status posts", Effect: policy.Blinds, Any: true,
			Probes: []policy.Probe{lease, status},
			Why: "a node's heartbeats are its kubelet's writes (create, update) of its Lease in kube-node-lease and its patches of " +
				"nodes/<node>/status; the detector learns each node's interval from them and finds the nodes that stop at the same " +
				"moment. Any stage counts (ResponseComplete tells a failed one, which is no heartbeat)",
			Loss: "no heartbeat is seen, so no wave is ever found",
		},
		{
			ID: "lease-renewals", Title: "kubelets' Lease renewals in kube-node-lease", Effect: policy.Weakens,
			Probes: []policy.Probe{lease},
			Why: "kubelets renew their Lease every 10 s: a node is declared lost after 30 s without one. Lease updates are often dropped " +
				"as noise: many published policies (chart templates, hardening guides) set level None for all of coordination.k8s.io " +
				"leases, some also for kubelets' nodes/status updates (GCE's configure-helper policy keeps both at Metadata or Request)",
			Loss: "only node status posts are left (every 10 s up to 1.13, every 1–5 minutes since): a node counts as lost only after " +
				"three of its longer intervals, and waves shorter than that go unseen",
		},
		{
			ID: "node-lifecycle", Title: "the node-lifecycle controller's writes of nodes", Effect: policy.Weakens,
			Probes: []policy.Probe{
				sub(policy.NewProbe(policy.ControllerManager, "update", "", "nodes", "", policy.RequestStages), "status"),
				sub(policy.NewProbe(nodeControllerClient, "update", "", "nodes", "", policy.RequestStages), "status"),
				policy.NewProbe(policy.ControllerManager, "patch", "", "nodes", "", policy.RequestStages),
				policy.NewProbe(nodeControllerClient, "patch", "", "nodes", "", policy.RequestStages),
			},
			Why: "the NotReady marks (its nodes/status updates) and the node.kubernetes.io/unreachable taints (its patches of the " +
				"nodes) are the wave's consequences; it writes as kube-controller-manager, or as its own service account",
			Loss: "without the controller's reaction a node cut off cannot be told from a node whose audit events alone were lost: " +
				"while kube-controller-manager's other requests are logged, a wave that lasts past ReactWithin is reported as " +
				"unconfirmed information",
		},
		{
			ID: "evictions", Title: "pod deletions by the node-lifecycle and taint-eviction controllers", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "delete", "", "pods", "default", policy.RequestStages),
				policy.NewProbe(nodeControllerClient, "delete", "", "pods", "default", policy.RequestStages),
				policy.NewProbe(taintEvictionClient, "delete", "", "pods", "default", policy.RequestStages),
			},
			Why:  "pods deleted from the lost nodes make the wave critical and are listed as its objects",
			Loss: "evictions go unseen: a wave that evicted pods is reported as a warning, not critical",
		},
		{
			ID: "kubelet-requests", Title: "kubelets' other requests (lists and watches of pods)", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Kubelet, "list", "", "pods", "", policy.RequestStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.WatchStages),
			},
			Why: "a kubelet cut off from the apiserver sends nothing at all; one whose other requests keep arriving during a heartbeat gap " +
				"is not cut off. Its lists right after the gap are the relist herd of the reconnect",
			Loss: "a node whose heartbeats stop being logged while it works (a policy change) cannot be told from a lost one, and the " +
				"relists after the return go unseen",
		},
		{
			ID: "rest-of-feed", Title: "other clients' requests", Effect: policy.Weakens, Any: true,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "watch", "", "pods", "", policy.WatchStages),
				policy.NewProbe(policy.Person, "create", "", "configmaps", "default", policy.RequestStages),
				policy.NewProbe(policy.KubeProxy, "watch", "", "endpoints", "", policy.WatchStages),
			},
			Why:  "a heartbeat loss is told from a silent audit feed by other clients' events arriving during the gap",
			Loss: "in a feed where nothing else is logged, a real wave looks like a gap in the feed and is reported as information",
		},
		{
			ID: "intent", Title: "people and autoscalers cordoning, tainting and deleting nodes", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Person, "patch", "", "nodes", "", policy.RequestStages),
				policy.NewProbe(policy.Person, "delete", "", "nodes", "", policy.RequestStages),
			},
			Why:  "nodes drained, cordoned or deleted on purpose (maintenance, scale-down) before their heartbeats stop are not lost",
			Loss: "a drain or a scale-down of several nodes at once can be reported as a wave (a false alarm)",
		},
	}
}
