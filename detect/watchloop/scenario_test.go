package watchloop_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// TestWatchLoopConditionsDecide shows that each silent scenario is silent
// for the reason it was written for: lifting that one condition makes the
// detector fire.
func TestWatchLoopConditionsDecide(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	// asKCM gives a client's events kube-controller-manager's user agent:
	// the program that runs the static reflector then wrote the churn.
	asKCM := func(agent string) func(*auditv1.Event) {
		return func(e *auditv1.Event) {
			if strings.HasPrefix(e.UserAgent, agent) {
				e.UserAgent = "kube-controller-manager/v1.10.13 (linux/amd64) kubernetes/fd7ec1c/" + agent
			}
		}
	}
	for _, tc := range []struct {
		name     string
		scenario string
		cfg      watchloop.Config
		// mutate changes the trace's events before they are imported.
		mutate   func(*auditv1.Event)
		wantUser string // "" for no finding
		// wantObject must be among the objects of wantUser's finding.
		wantObject string
	}{
		{name: "a Service write explains the Endpoints writes right after it", scenario: "user-recreates-service",
			cfg: watchloop.Config{OwnerResource: "configmaps"}, mutate: asKCM("svc-exporter"),
			wantUser: "system:serviceaccount:ops:svc-exporter"},
		{name: "a Service write explains the Endpoints writes right after it (with it)", scenario: "user-recreates-service",
			mutate: asKCM("svc-exporter")},
		{name: "churn written by a program that did not restart follows no restart", scenario: "static-rv-not-advanced",
			mutate: asKCM("janitor"), wantUser: "system:kube-controller-manager"},
		{name: "a user's re-created Service is no object of the loop", scenario: "incident-with-user-recreate",
			cfg: watchloop.Config{OwnerResource: "configmaps"}, wantUser: "system:kube-controller-manager", wantObject: "web/shop"},
		{name: "churn long after a restart does not follow it", scenario: "seed-incident",
			cfg: watchloop.Config{FollowWithin: 150 * time.Millisecond}},
		{name: "three restarts make a static resourceVersion", scenario: "seed-incident",
			cfg: watchloop.Config{MinRestarts: 30}},
	} {
		for _, scale := range scenario.Scales {
			t.Run(tc.name+"/"+scale.Name, func(t *testing.T) {
				sc, _ := scenario.ByName(tc.scenario)
				tr := sc.Generate(scale, scenario.Start, 1)
				if tc.mutate != nil {
					for i := range tr.Events {
						tc.mutate(&tr.Events[i])
					}
				}
				cluster := "decide-" + strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "(", ""), ")", "") + "-" + scale.Name
				w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
				got := detecttest.Evaluate(t, watchloop.New(tc.cfg), st, w)
				if tc.wantUser == "" {
					if len(got) != 0 {
						t.Errorf("found %s", got[0].Title)
					}
					return
				}
				i := slices.IndexFunc(got, func(f detect.Finding) bool { return f.Subjects.User == tc.wantUser })
				if i < 0 {
					t.Fatalf("no finding for %s among %d", tc.wantUser, len(got))
				}
				if objs := detecttest.ObjectNames(got[i]); tc.wantObject != "" && !slices.Contains(objs, tc.wantObject) {
					t.Errorf("objects %v lack %s", objs, tc.wantObject)
				}
			})
		}
	}
}

// TestSeedIncidentGolden pins the findings of the seed incident (the
// compressed trace) as the API and `scan --format json` show them.
func TestSeedIncidentGolden(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("seed-incident")
	tr := sc.Generate(scenario.Compressed, scenario.Start, 1)
	w := detecttest.Span(detecttest.ImportTrace(t, st, tr, "golden"), "golden")
	var all []detect.Finding
	for _, d := range detectors.Default() {
		all = append(all, detecttest.Evaluate(t, d, st, w)...)
	}
	detect.SortFindings(all)
	detecttest.CheckGolden(t, filepath.Join("testdata", "seed-incident.golden.json"), all)
}

// TestScenariosByAPIServer imports the logs of an HA control plane's
// apiservers each under its own name into one cluster, as the webhook's
// /audit/{cluster}/{apiserver} paths do, and holds the detectors to the
// same truth as the merged log: a reflector's watches and its churn are
// correlated across apiservers.
func TestScenariosByAPIServer(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("incident-ha")
	tc := detecttest.ScenarioCases[sc.Name]
	for _, scale := range scenario.Scales {
		t.Run(scale.Name, func(t *testing.T) {
			tr := sc.Generate(scale, scenario.Start, 1)
			parts := tr.ByAPIServer()
			if len(parts) != 2 {
				t.Fatalf("%d apiservers, want 2", len(parts))
			}
			cluster := "byapiserver-" + scale.Name
			var first, last time.Time
			names := make([]string, 0, len(parts))
			for name := range parts {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
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
				if err != nil || stats.Rejected != 0 || stats.Stored != int64(len(parts[name].Events)) {
					t.Fatalf("importing %s: %v (%d stored of %d)", name, err, stats.Stored, len(parts[name].Events))
				}
				if first.IsZero() || stats.First.Before(first) {
					first = stats.First
				}
				if stats.Last.After(last) {
					last = stats.Last
				}
			}
			w := detect.Window{Since: first, Until: last.Add(time.Microsecond), Clusters: []string{cluster}}
			loops := detecttest.Evaluate(t, watchloop.New(watchloop.Config{}), st, w)
			regs := detecttest.Evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w)
			detecttest.CheckLoops(t, tr.Want.Loops, loops)
			detecttest.CheckRegressions(t, tr.Want.Regressions, regs)
			if len(loops) == 1 {
				if got := detecttest.ObjectNames(loops[0]); !slices.Equal(got, tc.LoopObjects) {
					t.Errorf("objects %v, want %v", got, tc.LoopObjects)
				}
			}
		})
	}
}

// TestWatchListRelistsDecide shows that watch-list-relists is silent
// because a watch-list is a relist: with the Service writes explaining
// nothing, the same trace whose watch-lists are turned into plain
// watches from the same resourceVersion makes a loop of
// kube-controller-manager.
func TestWatchListRelistsDecide(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("watch-list-relists")
	plain := func(e *auditv1.Event) {
		if e.Verb == "watch" {
			e.RequestURI = strings.NewReplacer("resourceVersionMatch=NotOlderThan&", "", "sendInitialEvents=true&", "").Replace(e.RequestURI)
		}
	}
	for _, scale := range scenario.Scales {
		for _, tc := range []struct {
			name     string
			mutate   func(*auditv1.Event)
			wantUser string
		}{
			{name: "watch-lists"},
			{name: "plain-watches", mutate: plain, wantUser: "system:kube-controller-manager"},
		} {
			t.Run(tc.name+"/"+scale.Name, func(t *testing.T) {
				tr := sc.Generate(scale, scenario.Start, 1)
				if tc.mutate != nil {
					for i := range tr.Events {
						tc.mutate(&tr.Events[i])
					}
				}
				cluster := fmt.Sprintf("watchlist-%s-%s", tc.name, scale.Name)
				w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
				got := detecttest.Evaluate(t, watchloop.New(watchloop.Config{OwnerResource: "configmaps"}), st, w)
				if tc.wantUser == "" {
					if len(got) != 0 {
						t.Errorf("found %s", got[0].Title)
					}
					return
				}
				if !slices.ContainsFunc(got, func(f detect.Finding) bool { return f.Subjects.User == tc.wantUser }) {
					t.Errorf("no finding for %s among %d", tc.wantUser, len(got))
				}
			})
		}
	}
}
