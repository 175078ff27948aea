package relist

import "github.com/auditlens/auditlens/policy"

// Needs is what relist-loop must see in the audit log, for `auditlens
// policy check`: when each watch ended (its ResponseComplete stage; the
// requestReceivedTimestamp every stage carries says when it began) and the
// lists after it. Metadata is enough: a watch-list and a list's continue
// token are in the requestURI.
func (d *Loop) Needs() []policy.Need {
	return []policy.Need{
		{
			ID: "controller-watch-ends", Title: "the end of kube-controller-manager's watches", Effect: policy.Blinds,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "watch", "", "configmaps", "", policy.CompleteStages),
				policy.NewProbe(policy.ControllerManager, "watch", "", "secrets", "", policy.CompleteStages),
			},
			Why: "a turn of the loop is a watch that ended within seconds of its start: the detector reads its ResponseComplete stage " +
				"(a watch's other stages come when it starts). Policies that drop controller watches (level None) or omit ResponseComplete hide it",
			Loss: "the controllers' relist loops, the \"too old resource version\" loop of seed 000, are never seen",
		},
		{
			ID: "node-watch-ends", Title: "the end of node agents' watches", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.KubeProxy, "watch", "", "endpoints", "", policy.CompleteStages),
				policy.NewProbe(policy.KubeProxySA, "watch", "discovery.k8s.io", "endpointslices", "", policy.CompleteStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.CompleteStages),
			},
			Why:  "kube-proxy and kubelets loop the same way, on every node at once when the cause is the apiservers'",
			Loss: "relist loops of node agents go unseen",
		},
		{
			ID: "relists", Title: "lists by the same clients", Effect: policy.Blinds,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "list", "", "configmaps", "", policy.RequestStages),
				policy.NewProbe(policy.KubeProxy, "list", "", "endpoints", "", policy.RequestStages),
				policy.NewProbe(policy.Kubelet, "list", "", "pods", "", policy.RequestStages),
			},
			Why: "the turn ends with the client's next request being a relist: a list (its first page) or a watch-list (a watch, " +
				"sendInitialEvents=true in the requestURI); any stage counts",
			Loss: "a watch that ended early cannot be told from one the client re-opens at once: no loop is declared",
		},
	}
}

// Needs is what relist-herd must see in the audit log: the lists (and
// watch-lists) of many clients, each told apart by user, user agent and
// address, at level Metadata, and their watches, which tell a relist from
// a client's first read.
func (d *Herd) Needs() []policy.Need {
	return []policy.Need{
		{
			ID: "node-relists", Title: "lists by kubelets and kube-proxy", Effect: policy.Blinds, Any: true,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Kubelet, "list", "", "pods", "", policy.RequestStages),
				policy.NewProbe(policy.Kubelet, "list", "", "services", "", policy.RequestStages),
				policy.NewProbe(policy.KubeProxy, "list", "", "endpoints", "", policy.RequestStages),
				policy.NewProbe(policy.KubeProxySA, "list", "discovery.k8s.io", "endpointslices", "", policy.RequestStages),
			},
			Why: "a herd is many clients relisting one resource within a minute: in a real cluster, every node's kubelet and kube-proxy " +
				"when they reconnect together; any stage of a list counts",
			Loss: "the herds that follow a load balancer failover or an apiserver restart are never seen",
		},
		{
			ID: "node-watch-lists", Title: "watch-lists by kubelets", Effect: policy.Weakens,
			Probes: []policy.Probe{policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.WatchStages)},
			Why: "clients with watch-list (client-go 1.32+) relist with a watch (sendInitialEvents=true), which policies that drop watches " +
				"hide; and a list is a relist only when its client had read or watched the same target before: a kubelet's watches, " +
				"in the window or the look-back before it, show that it holds its Pods when it lists them again",
			Loss: "herds of watch-list clients go unseen, and so do relists of clients whose earlier list is older than the look-back",
		},
	}
}
