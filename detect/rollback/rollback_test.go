package rollback_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
)

// TestRVRollbackWindows evaluates restores as serve does — hour-long
// windows every 5 minutes — and as back-to-back windows that do not
// overlap (so the drop falls at or near a window's edge and its head
// before is only remembered), with the detector's memory in the store:
// each restore without bump stays one finding, the one a single
// evaluation of the whole trace gives, and the drop is never found twice
// under another identity.
func TestRVRollbackWindows(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	for _, name := range []string{"etcd-restore", "etcd-restore-metadata", "etcd-restore-bump"} {
		for _, scale := range scenario.Scales {
			sc, _ := scenario.ByName(name)
			tr := sc.Generate(scale, scenario.Start, 2)
			base := "rbwin-" + name + "-" + scale.Name
			stats := detecttest.ImportTrace(t, st, tr, base)
			whole := detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, detecttest.Span(stats, base))
			var wantID string
			for _, f := range whole {
				if f.Severity == detect.Critical {
					wantID = f.ID
				}
			}
			if bumped := tr.Want.Restores[0].Bumped; bumped != (wantID == "") {
				t.Fatalf("%s/%s: whole-trace finding %q for a restore (bumped %v)", name, scale.Name, wantID, bumped)
			}
			for _, tc := range []struct {
				name           string
				window, step   time.Duration
				fromTraceStart bool
			}{
				{name: "serve", window: time.Hour, step: 5 * time.Minute},
				{name: "adjacent", window: 7 * time.Minute, step: 7 * time.Minute},
				{name: "adjacent-short", window: 50 * time.Second, step: 50 * time.Second},
			} {
				t.Run(name+"/"+scale.Name+"/"+tc.name, func(t *testing.T) {
					// Each run its own cluster: the detector's memory is per cluster.
					cluster := base + "-" + tc.name
					detecttest.ImportTrace(t, st, tr, cluster)
					repo := detect.NewRepository(st, nil)
					r, err := detect.NewRunner(st, repo, detect.RunnerConfig{Window: tc.window, Interval: tc.window / 2, Clusters: []string{cluster},
						State: repo, Detectors: []detect.Detector{rollback.New(rollback.Config{})}})
					if err != nil {
						t.Fatal(err)
					}
					ids := map[string]detect.Finding{}
					for now := stats.First.Add(tc.step); now.Before(stats.Last.Add(tc.step)); now = now.Add(tc.step) {
						res, err := r.RunOnce(ctx, detect.Window{Since: now.Add(-tc.window), Until: now, Clusters: []string{cluster}})
						if err != nil {
							t.Fatal(err)
						}
						for _, f := range res.Findings {
							if f.Severity != detect.Info {
								ids[f.ID] = f
							}
						}
					}
					if len(ids) != len(whole)-countInfo(whole) {
						for _, f := range ids {
							t.Logf("found %s %s", f.ID, f.Title)
						}
						t.Fatalf("%d findings over the windows, want %d", len(ids), len(whole)-countInfo(whole))
					}
					if wantID == "" {
						return
					}
					// The IDs hash the cluster: compare what they name.
					var got detect.Finding
					for _, f := range ids {
						got = f
					}
					w := whole[0]
					if got.Subjects.PreviousResourceVersion != w.Subjects.PreviousResourceVersion || got.Subjects.ResourceVersion != w.Subjects.ResourceVersion {
						t.Errorf("windows found %s→%s, the whole trace %s→%s", got.Subjects.PreviousResourceVersion, got.Subjects.ResourceVersion,
							w.Subjects.PreviousResourceVersion, w.Subjects.ResourceVersion)
					}
					stored, err := repo.Get(ctx, got.ID)
					if err != nil {
						t.Fatal(err)
					}
					if stored.Severity != detect.Critical || len(stored.Subjects.Stuck) == 0 || stored.Subjects.Conflicts < w.Subjects.Conflicts {
						t.Errorf("stored finding: %s, %d stuck programs, %d conflicts (whole trace %d)", stored.Severity,
							len(stored.Subjects.Stuck), stored.Subjects.Conflicts, w.Subjects.Conflicts)
					}
				})
			}
		}
	}
}

func countInfo(fs []detect.Finding) int {
	n := 0
	for _, f := range fs {
		if f.Severity == detect.Info {
			n++
		}
	}
	return n
}

// TestRVRollbackGolden pins the finding of a generated restore without
// bump (the compressed trace) as the API and `scan --format json` show it.
func TestRVRollbackGolden(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("etcd-restore")
	tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
	w := detecttest.Span(detecttest.ImportTrace(t, st, tr, "golden-rollback"), "golden-rollback")
	got := detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, w)
	detecttest.CheckGolden(t, filepath.Join("testdata", "etcd-restore.golden.json"), got)
}

// TestRVRollbackByAPIServer imports the logs of an HA control plane's two
// apiservers each under its own name into one cluster, as the webhook's
// /audit/{cluster}/{apiserver} paths do: the head is the cluster's, and
// the restore is found as from the merged log.
func TestRVRollbackByAPIServer(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("etcd-restore-ha")
	for _, scale := range scenario.Scales {
		t.Run(scale.Name, func(t *testing.T) {
			tr := sc.Generate(scale, scenario.Start, 1)
			parts := tr.ByAPIServer()
			if len(parts) != 2 {
				t.Fatalf("%d apiservers, want 2", len(parts))
			}
			cluster := "rb-byapiserver-" + scale.Name
			var first, last time.Time
			for _, name := range []string{"apiserver-a", "apiserver-b"} {
				var buf bytes.Buffer
				if err := parts[name].WriteLog(&buf); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(t.TempDir(), name+".log")
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				stats, err := ingest.Import(context.Background(), ingest.NewWriter(st, ingest.WriterConfig{}), []string{path},
					ingest.ImportConfig{Cluster: cluster, APIServer: name})
				if err != nil || stats.Rejected != 0 {
					t.Fatalf("importing %s: %v", name, err)
				}
				if first.IsZero() || stats.First.Before(first) {
					first = stats.First
				}
				last = maxT(last, stats.Last)
			}
			w := detect.Window{Since: first, Until: last.Add(time.Microsecond), Clusters: []string{cluster}}
			detecttest.CheckRollbacks(t, tr, detecttest.Evaluate(t, rollback.New(rollback.Config{}), st, w))
		})
	}
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
