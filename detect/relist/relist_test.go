package relist_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/store"
)

// TestRelistGolden pins the findings' text: the relist loops and the
// kubelet herd of the generated scenarios (compressed scale, seed 1), as
// `scan --format json` prints them.
func TestRelistGolden(t *testing.T) {
	st := detecttest.Engine(t)
	for _, name := range []string{"relist-loop", "relist-herd-kubelets"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := scenario.ByName(name)
			tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
			cluster := "golden-" + name
			w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
			var all []detect.Finding
			for _, d := range []detect.Detector{relist.NewLoop(relist.LoopConfig{}), relist.NewHerd(relist.HerdConfig{})} {
				all = append(all, detecttest.Evaluate(t, d, st, w)...)
			}
			detect.SortFindings(all)
			detecttest.CheckGolden(t, filepath.Join("testdata", name+".golden.json"), all)
		})
	}
}

// TestRelistHerdLookBack: twelve kubelets list their Pods at once, each
// having listed them once before, minutes before the window starts. The
// earlier lists are in the look-back, so these are relists and a herd;
// with a look-back that does not reach them they are first reads, and
// silent; a herd of first reads of different ConfigMaps (a rollout) is
// silent whatever the look-back.
func TestRelistHerdLookBack(t *testing.T) {
	st := detecttest.Engine(t)
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		before   time.Duration // when each kubelet read first, before the window
		res      string
		lookBack time.Duration
		herd     bool
		// again: each kubelet reads the same ConfigMap (kube-root-ca.crt)
		// early in the window and again later; gone: its namespace is
		// deleted (and created again) in between.
		again, gone bool
	}{
		{"earlier read just before the window", 2 * time.Minute, "pods", 0, true, false, false},
		{"earlier read beyond the look-back", 2 * time.Minute, "pods", time.Minute, false, false, false},
		{"first reads of different configmaps", 0, "configmaps", 0, false, false, false},
		// The Node authorizer refuses a kubelet's watch-list of its new
		// Pod's ConfigMap (403) before its graph knows the Pod, and the
		// kubelet lists it at once: one first read.
		{"a refused watch-list and the list after it", 0, "configmaps-refused", 0, false, false, false},
		// Every Pod mounts its namespace's kube-root-ca.crt: kubelets that
		// read it again, the namespace kept, relisted it; after the
		// namespace was deleted and created again under the same name
		// they read a new object.
		{"the same configmap read again", 0, "configmaps", 0, true, true, false},
		{"the same name read in a namespace created again", 0, "configmaps", 0, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := "relist-lookback-" + tc.name
			var rows []store.Row
			n := 0
			code := int32(200)
			add := func(at time.Duration, verb, user, res, ns, name, fields string) {
				n++
				defer func() { code = 200 }()
				ts := t0.Add(at)
				rows = append(rows, store.Row{Cluster: cluster, AuditID: fmt.Sprintf("%s-%04d", cluster, n), Stage: "ResponseComplete",
					Level: "Metadata", Verb: verb, RequestURI: "/api/v1/" + res, Time: ts.Add(8 * time.Millisecond), ReceivedAt: ts,
					User: user, UserAgent: "kubelet/v1.37.2 (linux/amd64) kubernetes/abc1234", SourceIP: "10.0.1.1",
					Resource: res, APIVersion: "v1", Namespace: ns, Name: name, FieldSelector: fields, Code: code, Watch: verb == "watch"})
			}
			// The cluster's steady traffic over the window: node status.
			for s := time.Duration(0); s < 10*time.Minute; s += 10 * time.Second {
				add(s, "patch", "system:node:node-0", "nodes", "", "node-0", "")
			}
			if tc.gone {
				add(time.Minute, "delete", "load-driver", "namespaces", "", "shop", "")
				add(2*time.Minute, "create", "load-driver", "namespaces", "", "", "")
			}
			for i := range 12 {
				user := fmt.Sprintf("system:node:node-%d", i)
				at := 3*time.Minute + time.Duration(i)*time.Second
				switch tc.res {
				case "pods":
					sel := fmt.Sprintf("spec.nodeName=node-%d", i)
					add(-tc.before, "list", user, "pods", "", "", sel)
					add(at, "list", user, "pods", "", "", sel)
				case "configmaps":
					if tc.again {
						add(30*time.Second, "list", user, "configmaps", "shop", "kube-root-ca.crt", "metadata.name=kube-root-ca.crt")
						add(at, "list", user, "configmaps", "shop", "kube-root-ca.crt", "metadata.name=kube-root-ca.crt")
						break
					}
					// Each kubelet read configmaps before in the window
					// (another object), then the new pod's own.
					add(30*time.Second, "list", user, "configmaps", "shop", "old", "metadata.name=old")
					add(at, "list", user, "configmaps", "shop", fmt.Sprintf("app-%d", i), fmt.Sprintf("metadata.name=app-%d", i))
				case "configmaps-refused":
					name := fmt.Sprintf("app-%d", i%3) // three Deployments' ConfigMaps
					code = 403
					add(at, "watch", user, "configmaps", "shop", name, "metadata.name="+name)
					add(at+100*time.Millisecond, "list", user, "configmaps", "shop", name, "metadata.name="+name)
				}
			}
			if err := st.Insert(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			w := detect.Window{Since: t0, Until: t0.Add(10 * time.Minute), Clusters: []string{cluster}}
			herds := detecttest.Evaluate(t, relist.NewHerd(relist.HerdConfig{LookBack: tc.lookBack}), st, w)
			if !tc.herd {
				for _, f := range herds {
					t.Errorf("herd %s", f.Title)
				}
				return
			}
			if len(herds) != 1 || len(herds[0].Evidence) != 12 || herds[0].Subjects.Resource != tc.res {
				t.Fatalf("%d herds, want one of 12 kubelets on %s: %+v", len(herds), tc.res, herds)
			}
		})
	}
}

// TestRelistHerdRolloutSeeds: whatever the seed draws (kubelets,
// Deployments, when and how fast the rollout lands), the rollout's first
// reads — at least ten kubelets listing ConfigMaps by name within a
// minute, as the trace is checked to hold — make no herd.
func TestRelistHerdRolloutSeeds(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("relist-herd-rollout")
	for seed := int64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			tr := sc.Generate(scenario.Compressed, scenario.Start, seed)
			readers := map[string]bool{}
			var first time.Time
			for _, ev := range tr.Events {
				if ev.Verb != "list" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "configmaps" || ev.ObjectRef.Name == "" {
					continue
				}
				at := ev.RequestReceivedTimestamp.Time
				if first.IsZero() {
					first = at
				}
				if at.Sub(first) <= time.Minute {
					readers[ev.User.Username] = true
				}
			}
			if len(readers) < 10 {
				t.Fatalf("%d kubelets read a ConfigMap within a minute of the first, want 10 or more", len(readers))
			}
			cluster := fmt.Sprintf("relist-rollout-%d", seed)
			w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
			for _, f := range detecttest.Evaluate(t, relist.NewHerd(relist.HerdConfig{}), st, w) {
				t.Errorf("herd %s", f.Title)
			}
		})
	}
}
