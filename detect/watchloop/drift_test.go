package watchloop_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
)

// TestWatchLoopDrift holds the watch-loop detector to incident-drifting
// over several seeds (which Services the operator deletes and when, which
// ones the CI re-creates, when the loop pauses): one finding per loop,
// from the first stale resourceVersion, listing every stale one and every
// victim, over the whole trace at once and over sliding windows that
// remember the loop, whose stored finding stays one.
func TestWatchLoopDrift(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	sc, ok := scenario.ByName("incident-drifting")
	if !ok {
		t.Fatal("no scenario incident-drifting")
	}
	runs := []struct {
		scale scenario.Scale
		seed  int64
	}{{scenario.Compressed, 2}, {scenario.Compressed, 3}, {scenario.Compressed, 4}, {scenario.Compressed, 5}, {scenario.Real, 6}}
	for _, r := range runs {
		t.Run(fmt.Sprintf("%s/seed-%d", r.scale.Name, r.seed), func(t *testing.T) {
			ctx := context.Background()
			tr := sc.Generate(r.scale, scenario.Start, r.seed)
			if len(tr.Want.Loops) != 1 {
				t.Fatalf("the generator put %d loops in the trace", len(tr.Want.Loops))
			}
			truth := tr.Want.Loops[0]
			cluster := fmt.Sprintf("drift-%s-%d", r.scale.Name, r.seed)
			w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
			detecttest.CheckLoops(t, tr.Want.Loops, detecttest.Evaluate(t, watchloop.New(watchloop.Config{}), st, w))
			detecttest.CheckRegressions(t, tr.Want.Regressions, detecttest.Evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w))

			// Sliding windows of eight restart periods every period,
			// with memory: one finding, all the stale resourceVersions
			// and all the victims.
			period := (r.scale.RestartMin + r.scale.RestartMax) / 2
			repo := detect.NewRepository(st, nil)
			runner, err := detect.NewRunner(st, repo, detect.RunnerConfig{Window: 8 * period, Interval: period,
				Clusters: []string{cluster}, State: repo,
				Detectors: []detect.Detector{watchloop.New(watchloop.Config{}), watchloop.NewRegression(watchloop.RegressionConfig{})}})
			if err != nil {
				t.Fatal(err)
			}
			for now := w.Since.Add(period); now.Before(w.Until.Add(period)); now = now.Add(period) {
				if _, err := runner.RunOnce(ctx, detect.Window{Since: now.Add(-8 * period), Until: now, Clusters: []string{cluster}}); err != nil {
					t.Fatal(err)
				}
			}
			loops, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{watchloop.Name}})
			if err != nil {
				t.Fatal(err)
			}
			if len(loops) != 1 {
				for _, f := range loops {
					t.Logf("stored: %s", f.Title)
				}
				t.Fatalf("%d watch-loop findings stored, want 1", len(loops))
			}
			f := loops[0]
			var stale []string
			for _, s := range f.Subjects.StaleRVs {
				stale = append(stale, s.RV)
			}
			if !slices.Equal(stale, truth.StaleRVs) || f.Subjects.ResourceVersion != truth.ResourceVersion {
				t.Errorf("stale resourceVersions %v (first %s), want %v", stale, f.Subjects.ResourceVersion, truth.StaleRVs)
			}
			if names := detecttest.ObjectNames(f); !slices.Equal(names, truth.Objects) {
				t.Errorf("objects %v, want %v", names, truth.Objects)
			}
			if f.Subjects.Iterations != truth.Iterations {
				t.Errorf("%d iterations, want %d", f.Subjects.Iterations, truth.Iterations)
			}
			// Every regression of the culprit is part of the loop.
			regs, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{watchloop.RegressionName}})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range regs {
				if g.Subjects.User != truth.Client.User {
					continue
				}
				n++
				if g.Subjects.PartOf != f.ID || g.Severity != detect.Info {
					t.Errorf("regression %s (%s) is part of %q, severity %s; want part of %s", g.Subjects.ResourceVersion, g.Title,
						g.Subjects.PartOf, g.Severity, f.ID)
				}
			}
			if n == 0 {
				t.Error("no regression finding of the culprit")
			}
		})
	}
}
