package heartbeatloss_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
)

// TestHeartbeatLossSlidingWindows evaluates a wave that lasts hours as
// serve does — one-hour windows every five minutes, findings and the
// detector's memory in the store, serve restarted half-way — at the real
// time scale (the nodes stay cut off for 2.5–3.5 hours, far beyond a
// window and its one-hour lookback). It must be one finding from the
// first window that shows the wave to the last, whose last_seen follows
// the wave while nodes are still lost, and which ends with every node's
// return and every evicted pod. The same evaluations without memory, as a
// control, lose the wave's identity once its start leaves the lookback.
func TestHeartbeatLossSlidingWindows(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	sc, _ := scenario.ByName("heartbeat-loss-hours")
	tr := sc.Generate(scenario.Real, scenario.Start, 1)
	if len(tr.Want.HeartbeatWaves) != 1 {
		t.Fatalf("%d waves in the trace", len(tr.Want.HeartbeatWaves))
	}
	truth := tr.Want.HeartbeatWaves[0]
	var lastBack time.Time
	for _, b := range truth.Back {
		lastBack = later(lastBack, b)
	}
	if d := lastBack.Sub(truth.Start); d < 2*time.Hour || len(truth.Back) != len(truth.Nodes) {
		t.Fatalf("the wave lasts %s and %d of %d nodes come back: want hours, all back", d, len(truth.Back), len(truth.Nodes))
	}
	const cluster = "heartbeat-longrun"
	detecttest.ImportTrace(t, st, tr, cluster)

	repo := detect.NewRepository(st, nil)
	newRunner := func(fs detect.FindingStore, state detect.StateStore) *detect.Runner {
		r, err := detect.NewRunner(st, fs, detect.RunnerConfig{Window: time.Hour, Interval: 5 * time.Minute, Clusters: []string{cluster},
			State: state, Detectors: []detect.Detector{heartbeatloss.New(heartbeatloss.Config{})}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runner := newRunner(repo, repo)
	forgotten := detecttest.MemFindings{}
	forgetful := newRunner(forgotten, nil)
	var waveID string
	restartAt := truth.Start.Add(90 * time.Minute)
	end := tr.End.Add(5 * time.Minute)
	for now := tr.Start.Add(5 * time.Minute); !now.After(end); now = now.Add(5 * time.Minute) {
		if !restartAt.IsZero() && now.After(restartAt) {
			runner = newRunner(repo, repo)
			restartAt = time.Time{}
		}
		w := detect.Window{Since: now.Add(-time.Hour), Until: now, Clusters: []string{cluster}}
		res, err := runner.RunOnce(ctx, w)
		if err != nil {
			t.Fatalf("evaluation at %s: %v", now, err)
		}
		if _, err := forgetful.RunOnce(ctx, w); err != nil {
			t.Fatalf("evaluation without memory at %s: %v", now, err)
		}
		for _, f := range res.Findings {
			if waveID == "" {
				waveID = f.ID
				if d := now.Sub(truth.Start); d > 10*time.Minute {
					t.Errorf("found at %s, %s after the wave began", now, d)
				}
			} else if f.ID != waveID {
				t.Fatalf("at %s a second finding %s (%s), the first was %s", now, f.ID, f.Title, waveID)
			}
		}
		if waveID == "" || now.After(lastBack) {
			continue
		}
		// While nodes are still cut off, the finding follows the feed.
		f, err := repo.Get(ctx, waveID)
		if err != nil {
			t.Fatal(err)
		}
		if f.LastSeen.Before(now.Add(-3 * time.Minute)) {
			t.Fatalf("at %s the wave's last_seen is %s: left behind while nodes are still lost", now, f.LastSeen)
		}
	}
	all, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{heartbeatloss.Name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("%d heartbeat-loss findings stored, want 1", len(all))
	}
	f := all[0]
	t.Logf("%s %s … %s: %s", f.Severity, f.FirstSeen, f.LastSeen, f.Title)
	detecttest.CheckHeartbeat(t, tr.Want.HeartbeatWaves, all)
	if !f.LastSeen.Equal(lastBack.Truncate(time.Microsecond)) {
		t.Errorf("last_seen %s, the last node came back at %s", f.LastSeen, lastBack)
	}

	// Without memory the windows that no longer see the wave's start make
	// findings of their own, or none.
	var ids []string
	for id, g := range forgotten {
		ids = append(ids, id)
		t.Logf("without memory: %s %s … %s, %d nodes", id, g.FirstSeen, g.LastSeen, g.Subjects.NodesLost)
	}
	if len(ids) == 1 && ids[0] == waveID && slices.Equal(detecttest.ObjectNames(forgotten[waveID]), detecttest.ObjectNames(f)) {
		t.Errorf("without memory the wave is still one whole finding: the control does not show what memory adds")
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
