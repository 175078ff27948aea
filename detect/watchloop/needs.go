package watchloop

import (
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/policy"
)

// Needs is what watch-loop must see in the audit log, for `auditlens
// policy check`. It reads the resourceVersion of a watch or list from its
// requestURI and the response code from responseStatus, which every level
// but None records, so Metadata is enough for all but one alternative (a
// write's response object, RequestResponse).
func (d *WatchLoop) Needs() []policy.Need {
	svcWrite := policy.NewProbe(policy.Person, "create", "", "services", "default", policy.CompleteStages)
	svcWrite.MinLevel = auditv1.LevelRequestResponse
	return []policy.Need{
		{
			ID: "static-watch", Title: "watches of Services by kube-controller-manager", Effect: policy.Blinds,
			Probes: []policy.Probe{policy.NewProbe(policy.ControllerManager, "watch", "", "services", "", policy.WatchStages)},
			Why: "the loop is kube-controller-manager re-watching Services from one resourceVersion (in the requestURI); any stage of a watch counts, " +
				"and a stage with a response code (ResponseStarted or ResponseComplete) tells a failed watch, which is no restart",
			Loss: "the static watches that make the loop are never seen",
		},
		{
			ID: "endpoints-churn", Title: "Endpoints deletes by the endpoints controller", Effect: policy.Blinds,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "delete", "", "endpoints", "default", policy.CompleteStages),
				policy.NewProbe(policy.EndpointController, "delete", "", "endpoints", "default", policy.CompleteStages),
			},
			Why: "the harm is Endpoints of live Services deleted right after each restart, by the same program (user-agent product) whose watch restarted; " +
				"the detector reads their ResponseComplete stage (with its 2xx code). The endpoints controller writes as kube-controller-manager, " +
				"or as its own service account with --use-service-account-credentials",
			Loss: "the churn that proves the loop hurts is never seen",
		},
		{
			ID: "endpoints-recreate", Title: "Endpoints creates by the endpoints controller", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "create", "", "endpoints", "default", policy.CompleteStages),
				policy.NewProbe(policy.EndpointController, "create", "", "endpoints", "default", policy.CompleteStages),
			},
			Why:  "the finding pairs each churned delete with its re-create, to show how long the Endpoints were gone",
			Loss: "the loop is still found, but the finding cannot say when the Endpoints came back",
		},
		{
			ID: "rv-advanced", Title: "any request that shows a newer resourceVersion", Effect: policy.Blinds, Any: true,
			Probes: []policy.Probe{
				policy.NewProbe(policy.ControllerManager, "watch", "", "pods", "", policy.WatchStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "pods", "", policy.WatchStages),
				policy.NewProbe(policy.Kubelet, "watch", "", "services", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxy, "watch", "", "endpoints", "", policy.WatchStages),
				policy.NewProbe(policy.KubeProxySA, "watch", "", "services", "", policy.WatchStages),
				svcWrite,
			},
			Why: "a static resourceVersion is only stale when the cluster moved past it. resourceVersions are etcd revisions, global to the cluster: " +
				"any client's watch or list of any resource from a higher one, at any time, or a write whose response object carries one (RequestResponse), proves it",
			Loss: "the detector can never show that the static resourceVersion is stale, so it reports nothing",
		},
		{
			ID: "owner-changes", Title: "Service deletes and creates by users", Effect: policy.Weakens,
			Probes: []policy.Probe{
				policy.NewProbe(policy.Person, "delete", "", "services", "default", policy.RequestStages),
				policy.NewProbe(policy.Person, "create", "", "services", "default", policy.RequestStages),
			},
			Why:  "a Service deleted or created explains the endpoints controller's Endpoints write within 10 s after it (its reaction); any stage counts",
			Loss: "a user re-creating a Service right after a restart of a static watcher can be reported as the loop (a false alarm)",
		},
		{
			ID: "apiserver-version", Title: "the kube-apiserver's own requests", Effect: policy.Weakens,
			Probes: []policy.Probe{policy.NewProbe(policy.APIServer, "watch", "", "services", "", policy.WatchStages)},
			Why:    "the DELETE-event bug is the apiserver's: its version comes from its own loopback requests (user agent kube-apiserver/vX.Y.Z)",
			Loss:   "the finding cannot say whether the apiservers run an affected version (1.7.0–1.7.12, 1.8.0–1.8.7, 1.9.0–1.9.2)",
		},
	}
}
