package detectors_test

// Every detector against every scenario of gen/scenario, at both time
// scales: one import of each scenario serves all of them.

import (
	"context"
	"slices"
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"
)

// TestRelistScenarios imports every scenario at both time scales and holds
// relist-loop and relist-herd, with their default parameters, to what
// detecttest.ScenarioCases and the generator's truth say: a finding for each loop
// (its client, resource, instances and turns) and each herd (its resource,
// every client, when it began), and silence everywhere else.
func TestRelistScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	detecttest.EachScenario(t, st, func(t *testing.T, tc detecttest.ScenarioCase, tr scenario.Trace, w detect.Window) {
		if len(tr.Want.RelistLoops) != tc.RelistLoops || len(tr.Want.RelistHerds) != tc.RelistHerds {
			t.Fatalf("the generator put %d relist loops and %d herds in %s, the case expects %d and %d",
				len(tr.Want.RelistLoops), len(tr.Want.RelistHerds), tr, tc.RelistLoops, tc.RelistHerds)
		}
		detecttest.CheckRelistLoops(t, tr.Want.RelistLoops, detecttest.Evaluate(t, relist.NewLoop(relist.LoopConfig{}), st, w))
		causes := map[string]bool{}
		if tc.HerdsLinked {
			// What Default() runs before relist-herd, stored as the
			// Runner stores it.
			repo := detect.NewRepository(st, nil)
			for _, d := range []detect.Detector{heartbeatloss.New(heartbeatloss.Config{}), rollback.New(rollback.Config{})} {
				fs := detecttest.Evaluate(t, d, st, w)
				if err := repo.Upsert(context.Background(), fs); err != nil {
					t.Fatal(err)
				}
				for _, f := range fs {
					causes[f.ID] = true
				}
			}
		}
		herds := detecttest.Evaluate(t, relist.NewHerd(relist.HerdConfig{}), st, w)
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
		detecttest.CheckRelistHerds(t, tr.Want.RelistHerds, unlinked)
		if n := len(herds) - len(unlinked); n > 0 {
			t.Logf("%d herds part of the scenario's incident", n)
		}
	})
}

// TestRVRollbackScenarios holds rv-rollback, with its default parameters,
// to every scenario's truth at both time scales: one critical finding per
// restore without bump, with the resourceVersions before and after and
// the stuck programs; at most an info finding for a restore with bump;
// nothing anywhere else.
func TestRVRollbackScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	detecttest.EachScenario(t, st, func(t *testing.T, tc detecttest.ScenarioCase, tr scenario.Trace, w detect.Window) {
		bumped := 0
		for _, r := range tr.Want.Restores {
			if r.Bumped {
				bumped++
			}
		}
		if len(tr.Want.Restores)-bumped != tc.Rollbacks || bumped != tc.Restores {
			t.Fatalf("the generator put %d restores (%d with bump) in %s, the case expects %d rollbacks and %d restores",
				len(tr.Want.Restores), bumped, tr, tc.Rollbacks, tc.Restores)
		}
		got := detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, w)
		detecttest.CheckRollbacks(t, tr, got)
	})
}

// TestHeartbeatLossScenarios holds the heartbeat-loss detector to every
// scenario's truth at both time scales: one finding per wave with its
// nodes, start, returns and evictions; an information finding titled as an
// audit-feed gap for a silent feed; nothing for the controls and for every
// other scenario (whose background traffic holds kubelets too).
func TestHeartbeatLossScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	detecttest.EachScenario(t, st, func(t *testing.T, _ detecttest.ScenarioCase, tr scenario.Trace, w detect.Window) {
		got := detecttest.Evaluate(t, heartbeatloss.New(heartbeatloss.Config{}), st, w)
		detecttest.CheckHeartbeat(t, tr.Want.HeartbeatWaves, got)
	})
}

// TestScenarios imports every scenario at both time scales and holds the
// two detectors, with their default parameters, to what it contains.
func TestScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	detecttest.EachScenario(t, st, func(t *testing.T, tc detecttest.ScenarioCase, tr scenario.Trace, w detect.Window) {
		if len(tr.Want.Loops) != tc.Loops || tc.Regressions >= 0 && len(tr.Want.Regressions) != tc.Regressions {
			t.Fatalf("the generator put %d loops and %d regressions in %s, the case expects %d and %d",
				len(tr.Want.Loops), len(tr.Want.Regressions), tr, tc.Loops, tc.Regressions)
		}
		loops := detecttest.Evaluate(t, watchloop.New(watchloop.Config{}), st, w)
		regs := detecttest.Evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w)
		detecttest.CheckLoops(t, tr.Want.Loops, loops)
		detecttest.CheckRegressions(t, tr.Want.Regressions, regs)
		if tc.Loops == 1 && len(loops) == 1 {
			f := loops[0]
			if f.Subjects.User != tc.LoopUser || f.Subjects.ResourceVersion != tc.LoopRV || f.Subjects.Resource != "services" {
				t.Errorf("loop of %s on %s from %s, want %s on services from %s", f.Subjects.User, f.Subjects.Resource,
					f.Subjects.ResourceVersion, tc.LoopUser, tc.LoopRV)
			}
			if got := detecttest.ObjectNames(f); tc.LoopObjects != nil && !slices.Equal(got, tc.LoopObjects) {
				t.Errorf("objects %v, want %v", got, tc.LoopObjects)
			}
			if f.Subjects.Iterations < 4 {
				t.Errorf("%d iterations: the scenario loops at least 4 times", f.Subjects.Iterations)
			}
		}
		if tc.RegressionUser != "" && len(regs) == 1 && regs[0].Subjects.User != tc.RegressionUser {
			t.Errorf("regression of %s, want %s", regs[0].Subjects.User, tc.RegressionUser)
		}
	})
}
