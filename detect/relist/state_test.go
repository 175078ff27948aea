package relist_test

import (
	"context"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
)

// TestRelistSlidingWindows evaluates the relist scenarios at the real
// scale as serve does — short windows sliding over the trace, findings
// and state in the store — and without state, as a control: each loop and
// each herd stays one finding whatever windows show it, and a loop's
// turns add up to the generator's count.
func TestRelistSlidingWindows(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	for _, tc := range []struct {
		scenario string
		detector func() detect.Detector
		window   time.Duration
		step     time.Duration
	}{
		{"relist-loop", func() detect.Detector { return relist.NewLoop(relist.LoopConfig{}) }, 20 * time.Minute, 5 * time.Minute},
		{"relist-loop-watch-list", func() detect.Detector { return relist.NewLoop(relist.LoopConfig{}) }, 20 * time.Minute, 5 * time.Minute},
		{"relist-herd-kubelets", func() detect.Detector { return relist.NewHerd(relist.HerdConfig{}) }, 20 * time.Minute, time.Minute},
	} {
		for _, withState := range []bool{true, false} {
			name := tc.scenario + "/stateless"
			if withState {
				name = tc.scenario + "/state"
			}
			t.Run(name, func(t *testing.T) {
				sc, _ := scenario.ByName(tc.scenario)
				tr := sc.Generate(scenario.Real, scenario.Start, 2)
				cluster := "relist-sliding-" + name
				detecttest.ImportTrace(t, st, tr, cluster)
				repo := detect.NewRepository(st, nil)
				var fs detect.FindingStore = detecttest.MemFindings{}
				var state detect.StateStore
				if withState {
					fs, state = repo, repo
				}
				r, err := detect.NewRunner(st, fs, detect.RunnerConfig{Window: tc.window, Interval: tc.step,
					Clusters: []string{cluster}, State: state, Detectors: []detect.Detector{tc.detector()}})
				if err != nil {
					t.Fatal(err)
				}
				final := map[string]detect.Finding{}
				for now := tr.Start.Add(tc.step); !now.After(tr.End.Add(tc.window)); now = now.Add(tc.step) {
					res, err := r.RunOnce(ctx, detect.Window{Since: now.Add(-tc.window), Until: now, Clusters: []string{cluster}})
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range res.Findings {
						final[f.ID] = f
					}
				}
				var got []detect.Finding
				for _, f := range final {
					got = append(got, f)
				}
				if len(tr.Want.RelistLoops) > 0 {
					detecttest.CheckRelistLoops(t, tr.Want.RelistLoops, got)
				}
				if len(tr.Want.RelistHerds) > 0 {
					detecttest.CheckRelistHerds(t, tr.Want.RelistHerds, got)
				}
			})
		}
	}
}

// TestRelistHerdPartOf: a herd that a heartbeat-loss or rv-rollback
// finding of its cluster covers (stored before relist-herd runs, as
// Default orders them) is information naming it; one in another cluster
// or long before explains nothing.
func TestRelistHerdPartOf(t *testing.T) {
	st := detecttest.Engine(t)
	ctx := context.Background()
	sc, _ := scenario.ByName("relist-herd-kubelets")
	tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
	at := tr.Want.RelistHerds[0].At
	for _, tc := range []struct {
		name     string
		cause    detect.Finding
		linked   bool
		severity detect.Severity
	}{
		{"heartbeat-loss covering it", detect.Finding{Detector: "heartbeat-loss", FirstSeen: at.Add(-3 * time.Minute), LastSeen: at.Add(-20 * time.Second)}, true, detect.Info},
		{"rv-rollback just before", detect.Finding{Detector: "rv-rollback", FirstSeen: at.Add(-time.Minute), LastSeen: at.Add(-time.Minute)}, true, detect.Info},
		{"heartbeat-loss an hour before", detect.Finding{Detector: "heartbeat-loss", FirstSeen: at.Add(-2 * time.Hour), LastSeen: at.Add(-time.Hour)}, false, detect.Warning},
		{"another detector", detect.Finding{Detector: "watch-loop", FirstSeen: at.Add(-time.Minute), LastSeen: at}, false, detect.Warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := "relist-partof-" + tc.name
			w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
			repo := detect.NewRepository(st, nil)
			cause := tc.cause
			cause.ID, cause.Cluster, cause.Severity, cause.Title = detect.FindingID(cause.Detector, cluster, "cause"), cluster, detect.Critical, "cause"
			if err := repo.Upsert(ctx, []detect.Finding{cause}); err != nil {
				t.Fatal(err)
			}
			herds := detecttest.Evaluate(t, relist.NewHerd(relist.HerdConfig{}), st, w)
			if len(herds) != 2 {
				t.Fatalf("%d herds, want 2", len(herds))
			}
			for _, f := range herds {
				wantPart := ""
				if tc.linked {
					wantPart = cause.ID
				}
				if f.Subjects.PartOf != wantPart || f.Severity != tc.severity {
					t.Errorf("herd on %s: part of %q severity %s, want %q %s", f.Subjects.Resource, f.Subjects.PartOf, f.Severity, wantPart, tc.severity)
				}
			}
		})
	}
}
