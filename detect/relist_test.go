package detect_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/scenario"
)

// TestRelistScenarios imports every scenario at both time scales and holds
// relist-loop and relist-herd, with their default parameters, to what
// scenarioCases and the generator's truth say: a finding for each loop
// (its client, resource, instances and turns) and each herd (its resource,
// every client, when it began), and silence everywhere else.
func TestRelistScenarios(t *testing.T) {
	st := engine(t)
	for _, sc := range scenario.All() {
		tc, ok := scenarioCases[sc.Name]
		if !ok {
			t.Errorf("scenario %s has no expectations in scenarioCases", sc.Name)
			continue
		}
		for _, scale := range scenario.Scales {
			t.Run(sc.Name+"/"+scale.Name, func(t *testing.T) {
				tr, w := importScenario(t, st, sc, scale)
				if len(tr.Want.RelistLoops) != tc.relistLoops || len(tr.Want.RelistHerds) != tc.relistHerds {
					t.Fatalf("the generator put %d relist loops and %d herds in %s, the case expects %d and %d",
						len(tr.Want.RelistLoops), len(tr.Want.RelistHerds), tr, tc.relistLoops, tc.relistHerds)
				}
				checkRelistLoops(t, tr.Want.RelistLoops, evaluate(t, detect.NewRelistLoop(detect.RelistLoopConfig{}), st, w))
				causes := map[string]bool{}
				if tc.herdsLinked {
					// What Default() runs before relist-herd, stored as the
					// Runner stores it.
					repo := detect.NewRepository(st, nil)
					for _, d := range []detect.Detector{detect.NewHeartbeatLoss(detect.HeartbeatLossConfig{}), detect.NewRVRollback(detect.RVRollbackConfig{})} {
						fs := evaluate(t, d, st, w)
						if err := repo.Upsert(context.Background(), fs); err != nil {
							t.Fatal(err)
						}
						for _, f := range fs {
							causes[f.ID] = true
						}
					}
				}
				herds := evaluate(t, detect.NewRelistHerd(detect.RelistHerdConfig{}), st, w)
				var unlinked []detect.Finding
				for _, f := range herds {
					switch {
					case f.Subjects.PartOf == "":
						unlinked = append(unlinked, f)
					case !causes[f.Subjects.PartOf] || f.Severity != detect.Info:
						t.Errorf("herd %q: part of %q (not a finding of this cluster's heartbeat loss or restore), severity %s",
							f.Title, f.Subjects.PartOf, f.Severity)
					}
				}
				checkRelistHerds(t, tr.Want.RelistHerds, unlinked)
				if n := len(herds) - len(unlinked); n > 0 {
					t.Logf("%d herds part of the scenario's incident", n)
				}
			})
		}
	}
}

func checkRelistLoops(t *testing.T, want []scenario.RelistLoop, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s (%s %s, %d turns)", f.Title, f.Subjects.User, f.Subjects.Resource, f.Subjects.Iterations)
		}
		t.Fatalf("%d relist-loop findings, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(f detect.Finding) bool {
			return f.Subjects.User == w.Client.User && f.Subjects.Resource == w.Resource
		})
		if i < 0 {
			t.Errorf("no relist-loop finding for %s on %s", w.Client.User, w.Resource)
			continue
		}
		f := got[i]
		if f.Detector != detect.RelistLoopName || f.Subjects.Iterations != w.Turns {
			t.Errorf("%s on %s: detector %s, %d turns, want %d", w.Client.User, w.Resource, f.Detector, f.Subjects.Iterations, w.Turns)
		}
		wantSev := detect.Warning
		if f.LastSeen.Sub(f.FirstSeen) >= 15*time.Minute {
			wantSev = detect.Critical
		}
		if f.Severity != wantSev || f.Confidence < 0.7 || f.Confidence > 1 {
			t.Errorf("%s: severity %s confidence %v over %s", f.ID, f.Severity, f.Confidence, f.LastSeen.Sub(f.FirstSeen))
		}
		if len(w.Instances) == 1 && f.Subjects.SourceIP != w.Instances[0] || len(w.Instances) > 1 && f.Subjects.SourceIP != "" {
			t.Errorf("%s: source IP %q, instances %v", f.ID, f.Subjects.SourceIP, w.Instances)
		}
		watches := map[string]bool{}
		relists := 0
		for _, e := range f.Evidence {
			switch e.Role {
			case detect.RoleShortWatch:
				watches[e.AuditID] = true
				if e.Verb != "watch" || e.User != w.Client.User || e.Resource != w.Resource {
					t.Errorf("short-watch evidence %+v", e)
				}
			case detect.RoleRelist:
				relists++
			default:
				t.Errorf("evidence role %q", e.Role)
			}
		}
		for _, e := range f.Evidence {
			if e.Role == detect.RoleRelist && !watches[e.WatchAuditID] {
				t.Errorf("relist %s follows %q, not a short watch of the evidence", e.AuditID, e.WatchAuditID)
			}
		}
		if relists != w.Turns || len(watches) != w.Turns {
			t.Errorf("%d relists and %d short watches in the evidence, want %d of each", relists, len(watches), w.Turns)
		}
	}
}

func checkRelistHerds(t *testing.T, want []scenario.RelistHerd, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s", f.Title)
		}
		t.Fatalf("%d relist-herd findings, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(f detect.Finding) bool { return f.Subjects.Resource == w.Resource })
		if i < 0 {
			t.Errorf("no relist-herd finding for %s", w.Resource)
			continue
		}
		f := got[i]
		users := map[string]bool{}
		for _, e := range f.Evidence {
			if e.Role != detect.RoleRelist || e.Resource != w.Resource {
				t.Errorf("evidence %+v", e)
			}
			users[e.User] = true
		}
		if len(users) != w.Clients || len(f.Evidence) != w.Clients {
			t.Errorf("herd on %s: %d clients in %d evidence items, want %d", w.Resource, len(users), len(f.Evidence), w.Clients)
		}
		if !f.FirstSeen.Equal(w.At.Truncate(time.Microsecond)) || f.Severity != detect.Warning || f.Subjects.PartOf != "" {
			t.Errorf("herd on %s: first seen %s (want %s), severity %s, part of %q", w.Resource, f.FirstSeen, w.At, f.Severity, f.Subjects.PartOf)
		}
	}
}

// TestRelistGolden pins the findings' text: the relist loops and the
// kubelet herd of the generated scenarios (compressed scale, seed 1), as
// `scan --format json` prints them.
func TestRelistGolden(t *testing.T) {
	st := engine(t)
	for _, name := range []string{"relist-loop", "relist-herd-kubelets"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := scenario.ByName(name)
			tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
			cluster := "golden-" + name
			w := span(importTrace(t, st, tr, cluster), cluster)
			var all []detect.Finding
			for _, d := range []detect.Detector{detect.NewRelistLoop(detect.RelistLoopConfig{}), detect.NewRelistHerd(detect.RelistHerdConfig{})} {
				all = append(all, evaluate(t, d, st, w)...)
			}
			detect.SortFindings(all)
			var buf bytes.Buffer
			if err := detect.Render(&buf, "json", all); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".golden.json")
			if updating() {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("findings differ from %s (run with -update after checking); got:\n%s", path, buf.Bytes())
			}
		})
	}
}
