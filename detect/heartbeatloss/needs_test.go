package heartbeatloss_test

import (
	"slices"
	"testing"

	"github.com/auditlens/auditlens/detect/heartbeatloss"

	"github.com/auditlens/auditlens/policy"
)

// TestHeartbeatLossNeeds holds the detector's needs to policies that
// clusters run: one that drops Lease traffic as noise weakens it (status
// posts are left), one that also drops kubelets' node status blinds it.
func TestHeartbeatLossNeeds(t *testing.T) {
	const header = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
	d := heartbeatloss.New(heartbeatloss.Config{})
	for _, tc := range []struct {
		name, rules string
		want        policy.Verdict
		unmet       []string
	}{
		{name: "everything at Metadata", rules: "- level: Metadata\n", want: policy.OK},
		{name: "Leases dropped as noise", want: policy.Weakened, unmet: []string{"lease-renewals"},
			rules: "- level: None\n  resources: [{group: coordination.k8s.io, resources: [leases]}]\n- level: Metadata\n"},
		{name: "Leases and node status dropped", want: policy.Blinded, unmet: []string{"heartbeats", "lease-renewals"},
			rules: "- level: None\n  resources: [{group: coordination.k8s.io, resources: [leases]}]\n" +
				"- level: None\n  userGroups: [system:nodes]\n  verbs: [update, patch]\n  resources: [{group: \"\", resources: [nodes/status]}]\n" +
				"- level: Metadata\n"},
		{name: "controller writes dropped", want: policy.Weakened, unmet: []string{"node-lifecycle", "evictions"},
			rules: "- level: None\n  users: [system:kube-controller-manager, system:serviceaccount:kube-system:node-controller, " +
				"system:serviceaccount:kube-system:taint-eviction-controller]\n  verbs: [update, patch, delete]\n- level: Metadata\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(header + tc.rules))
			if err != nil {
				t.Fatal(err)
			}
			rep := policy.Check(p, []policy.DetectorNeeds{{Detector: d.Name(), Needs: d.Needs()}})
			r := rep.Detectors[0]
			var unmet []string
			for _, n := range r.Needs {
				if !n.Met {
					unmet = append(unmet, n.ID)
				}
			}
			if r.Verdict != tc.want || !slices.Equal(unmet, tc.unmet) {
				t.Errorf("verdict %s, unmet %v; want %s, %v", r.Verdict, unmet, tc.want, tc.unmet)
			}
		})
	}
}
