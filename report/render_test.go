package report_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/report"
)

// A report lists the findings of any detector with the subjects it sets
// (and none of the empty ones), whatever the detector: here the
// cluster-wide incidents, whose subjects are not a watch's client.
func TestRenderFindingsOfAnyDetector(t *testing.T) {
	start := time.Date(2026, 5, 6, 0, 0, 0, 0, time.UTC)
	at := start.Add(7 * time.Hour)
	ev := func(role, name string, d time.Duration) detect.Evidence {
		return detect.Evidence{AuditID: role + name, Stage: "ResponseComplete", Time: at.Add(d), Verb: "update", Name: name, Role: role}
	}
	wave := detect.Finding{ID: "heartbeat-loss-1", Detector: "heartbeat-loss", Cluster: "prod", Severity: detect.Critical, Confidence: 0.9,
		Title: "9 of 12 nodes stopped heartbeating at once", Summary: "Nine kubelets stopped renewing their Leases within 8 s.",
		FirstSeen: at, LastSeen: at.Add(2 * time.Minute), Subjects: detect.Subjects{Resource: "nodes", NodesLost: 9, NodesSeen: 12, PodsEvicted: 1},
		Objects:     []detect.Object{{Resource: "nodes", Name: "node-01"}, {Resource: "pods", Namespace: "shop", Name: hostile}},
		Evidence:    []detect.Evidence{ev("last-heartbeat", "node-01", 0), ev("not-ready", "node-01", 40*time.Second), ev("eviction", hostile, time.Minute)},
		Remediation: "Check the load balancer in front of the apiservers."}
	restore := detect.Finding{ID: "rv-rollback-1", Detector: "rv-rollback", Cluster: "prod", Severity: detect.Critical, Confidence: 0.95,
		Title: "The cluster's resourceVersion went back by 1000", Summary: "etcd was restored without --bump-revision.",
		FirstSeen: at.Add(time.Hour), LastSeen: at.Add(time.Hour + time.Minute),
		Subjects: detect.Subjects{PreviousResourceVersion: "50890", ResourceVersion: "49890", User: hostile,
			APIServers: []string{"kube-apiserver/v1.37.2", "kube-apiserver/v1.37.1"}, Conflicts: 7,
			Stuck: []detect.StuckClient{
				{Program: "kube-proxy", Instances: 5, Resources: []string{"services", "endpointslices"}, MinRV: "50001", MaxRV: "50880", From: at.Add(time.Hour), Until: at.Add(time.Hour + time.Minute)},
				{Program: "calico-node", Instances: 3, Resources: []string{"pods"}, MinRV: "50400", MaxRV: "50400", From: at.Add(time.Hour), Until: at.Add(time.Hour + 30*time.Second)},
			}},
		Evidence:    []detect.Evidence{ev("head-before", "leader", time.Hour), ev("head-after", "leader", time.Hour+2*time.Second)},
		Remediation: "Restore with --bump-revision and --mark-compacted."}
	r := report.Report{ID: "incidents-1", Name: "incidents", WindowStart: start, WindowEnd: start.Add(24 * time.Hour), GeneratedAt: start.Add(24 * time.Hour),
		VolumeStep: report.Duration(time.Hour), Findings: []report.Group{
			{Detector: "heartbeat-loss", Severity: detect.Critical, Findings: []detect.Finding{wave}},
			{Detector: "rv-rollback", Severity: detect.Critical, Findings: []detect.Finding{restore}},
		}}

	var md bytes.Buffer
	if err := report.Render(&md, "md", r); err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "incidents.md.golden"), md.Bytes())

	var html bytes.Buffer
	if err := report.Render(&html, "html", r); err != nil {
		t.Fatal(err)
	}
	out := html.String()
	for _, want := range []string{
		"<h3>heartbeat-loss — <span class=\"critical\">critical</span> (1)</h3>",
		"Objects: nodes/node-01, pods shop/mallory&lt;script&gt;",
		"Subjects: user <code>mallory&lt;script&gt;alert(1)&lt;/script&gt;",
		"resource version <code>49890</code>, previous resource version <code>50890</code>",
		"apiservers <code>kube-apiserver/v1.37.2, kube-apiserver/v1.37.1</code>",
		"stuck <code>program kube-proxy, instances 5, resources services, endpointslices, min rv 50001, max rv 50880, from 2026-05-06T08:00:00Z, until 2026-05-06T08:01:00Z; program calico-node,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the HTML lacks %q", want)
		}
	}
	// The heartbeat loss names no client: no empty subjects for it.
	if i, j := strings.Index(out, "9 of 12 nodes"), strings.Index(out, "rv-rollback — "); i < 0 || j < i ||
		!strings.Contains(out[i:j], "Subjects: resource <code>nodes</code>, nodes lost <code>9</code>, nodes seen <code>12</code>, pods evicted <code>1</code></p>") {
		t.Error("the heartbeat-loss finding's subjects are not its counts alone")
	}
	if strings.Contains(out, "<script") {
		t.Error("a hostile string reached the HTML unescaped")
	}
}
