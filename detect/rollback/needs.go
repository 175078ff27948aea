package rollback

import (
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/policy"
)

// Needs is what rv-rollback must see in the audit log, for `auditlens
// policy check`. The head comes from successful writes: at Metadata the
// resourceVersion an update carries (objectRef, from its body), at
// RequestResponse the one a write returns; the code is in every stage with
// a response.
func (d *RVRollback) Needs() []policy.Need {
	anyWrite := policy.NewProbe(policy.Person, "create", "", "services", "default", policy.CompleteStages)
	anyWrite.MinLevel = auditv1.LevelRequestResponse
	return []policy.Need{
		{
			ID: "head", Title: "successful writes that show the cluster's resourceVersion", Effect: policy.Blinds, Any: true,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Kubelet, "update", "coordination.k8s.io", "leases", "kube-node-lease", policy.CompleteStages),
				policy.NewProbe(policy.ControllerManager, "update", "coordination.k8s.io", "leases", "kube-system", policy.CompleteStages),
				anyWrite,
			},
			Why: "the head is the highest resourceVersion successful writes show: an update's objectRef resourceVersion (Metadata is enough; " +
				"kubelets' Lease renewals every 10 s and leader elections every 2 s carry it) or a write's response object (RequestResponse). " +
				"The detector reads their ResponseComplete stage (with its 2xx code)",
			Loss: "the head cannot be followed, so neither its drop nor its jump is seen",
		},
		{
			ID: "future-watch", Title: "watches by the cluster's controllers and agents", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "watch", "", "services", "", policy.WatchStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxy, "watch", "", "services", "", policy.WatchStages),
			},
			Why: "clients stuck watching from resourceVersions above the new head (in the requestURI) are who must be restarted, and what makes " +
				"the drop critical; any stage of a watch counts",
			Loss: "the finding cannot name the clients left in the future; without them (or 409s) a drop is only a warning",
		},
		{
			ID: "conflict", Title: "Lease updates answered 409 Conflict", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Kubelet, "update", "coordination.k8s.io", "leases", "kube-node-lease", policy.CompleteStages),
			},
			Why:  "after a restore without bump every kubelet's first Lease renewal gets 409 with the resourceVersion it held, above the new head",
			Loss: "the finding cannot count the 409s, which also make a drop critical",
		},
		{
			ID: "relist", Title: "lists by controllers", Effect: policy.Weakens,
			Probes: []policy.Probe{policy.NewProbe(policy.ControllerManager, "list", "", "pods", "", policy.CompleteStages)},
			Why:    "relists follow a restore: the 410 herd after a restore with --bump-revision is what makes its jump an info finding",
			Loss:   "a restore done the safe way goes unreported; relists after a rollback are not counted",
		},
		{
			ID: "churn", Title: "creates and deletes by kube-controller-manager", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "delete", "", "endpoints", "default", policy.CompleteStages),
				policy.NewProbe(policy.EndpointController, "delete", "", "endpoints", "default", policy.CompleteStages),
			},
			Why:  "controllers acting on stale caches delete objects they did not create (Endpoints of most Services in seed 003) and re-create ones gone with the restore",
			Loss: "the finding cannot name the objects the rollback hurt",
		},
	}
}
