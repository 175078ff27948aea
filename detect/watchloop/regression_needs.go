package watchloop

import "github.com/auditlens/auditlens/policy"

// Needs is what watch-rv-regression must see in the audit log, for
// `auditlens policy check`. It reads the resourceVersion of a watch or
// list from its requestURI, which level Metadata records.
func (d *Regression) Needs() []policy.Need {
	return []policy.Need{
		{
			ID: "controller-watches", Title: "watches of Services by kube-controller-manager", Effect: policy.Blinds,
			Probes: []policy.Probe{policy.NewProbe(policy.ControllerManager, "watch", "", "services", "", policy.WatchStages)},
			Why:    "the DELETE-event bug sent kube-controller-manager's Services reflector back to an old resourceVersion (seed 001); the detector compares the resourceVersion in successive watches' requestURI",
			Loss:   "the regression the detector exists for is never seen",
		},
		{
			ID: "other-watches", Title: "watches by node agents", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.KubeProxy, "watch", "", "services", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxy, "watch", "", "endpoints", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxySA, "watch", "", "services", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxySA, "watch", "discovery.k8s.io", "endpointslices", "", policy.WatchStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "services", "", policy.WatchStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.WatchStages),
				policy.Named(policy.NewProbe(policy.Kubelet, "watch", "", "configmaps", "default", policy.WatchStages), "app-config"),
			},
			Why:  "the bug hit every client and every resource; kube-proxy and kubelets are most of a cluster's watches",
			Loss: "these clients' regressions (and an etcd restored from an old backup, which sends every client back) go unseen",
		},
		{
			ID: "relists", Title: "lists by the same clients", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "list", "", "services", "", policy.RequestStages),
				policy.NewProbe(policy.KubeProxy, "list", "", "services", "", policy.RequestStages),
				policy.NewProbe(policy.Kubelet, "list", "", "pods", "", policy.RequestStages),
			},
			Why:  "a relist legitimately starts a client over, possibly from a lower resourceVersion (an apiserver whose cache is behind); the detector resets its comparison at each list",
			Loss: "a client that relisted from a lagging apiserver can be reported as a regression (a false alarm)",
		},
	}
}
