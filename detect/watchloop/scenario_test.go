package watchloop_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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

// TestScenarios imports every scenario at both time scales and holds the
// two detectors, with their default parameters, to what it contains.
func TestScenarios(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	for _, sc := range scenario.All() {
		tc, ok := detecttest.ScenarioCases[sc.Name]
		if !ok {
			t.Errorf("scenario %s has no expectations in scenarioCases", sc.Name)
			continue
		}
		for _, scale := range scenario.Scales {
			t.Run(sc.Name+"/"+scale.Name, func(t *testing.T) {
				tr, w := detecttest.ImportScenario(t, st, sc, scale)
				if len(tr.Want.Loops) != tc.Loops || tc.Regressions >= 0 && len(tr.Want.Regressions) != tc.Regressions {
					t.Fatalf("the generator put %d loops and %d regressions in %s, the case expects %d and %d",
						len(tr.Want.Loops), len(tr.Want.Regressions), tr, tc.Loops, tc.Regressions)
				}
				loops := detecttest.Evaluate(t, watchloop.New(watchloop.Config{}), st, w)
				regs := detecttest.Evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w)
				checkLoops(t, tr.Want.Loops, loops)
				checkRegressions(t, tr.Want.Regressions, regs)
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
	}
}

// checkLoops holds watch-loop findings to the generator's truth: the
// client, the static resourceVersion, every churned object, the number of
// iterations, and each churn event linked to the restart it followed.
func checkLoops(t *testing.T, want []scenario.Loop, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s (%s %s %s)", f.Title, f.Subjects.User, f.Subjects.SourceIP, f.Subjects.ResourceVersion)
		}
		t.Fatalf("%d watch-loop findings, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(f detect.Finding) bool {
			s := f.Subjects
			return s.User == w.Client.User && s.UserAgent == w.Client.UserAgent && s.SourceIP == w.Client.SourceIP &&
				s.Resource == w.Resource && s.ResourceVersion == w.ResourceVersion
		})
		if i < 0 {
			t.Errorf("no finding for %s (%s) on %s from %s", w.Client.User, w.Client.SourceIP, w.Resource, w.ResourceVersion)
			continue
		}
		f := got[i]
		if f.Detector != watchloop.Name || f.Severity != detect.Critical || f.Confidence < 0.7 || f.Confidence > 1 {
			t.Errorf("detector %s severity %s confidence %v", f.Detector, f.Severity, f.Confidence)
		}
		if names := detecttest.ObjectNames(f); !slices.Equal(names, w.Objects) {
			t.Errorf("objects %v, want %v", names, w.Objects)
		}
		for _, o := range f.Objects {
			if o.Resource != "endpoints" {
				t.Errorf("object %v is not Endpoints", o)
			}
		}
		if f.Subjects.Iterations != w.Iterations {
			t.Errorf("%d iterations, want %d", f.Subjects.Iterations, w.Iterations)
		}
		staleRVs := w.StaleRVs
		if len(staleRVs) == 0 {
			staleRVs = []string{w.ResourceVersion}
		}
		var listed []string
		for _, r := range f.Subjects.StaleRVs {
			listed = append(listed, r.RV)
		}
		if !slices.Equal(listed, staleRVs) {
			t.Errorf("stale resourceVersions %v, want %v", listed, staleRVs)
		}
		static := map[string]bool{}
		var advanced []detect.Evidence
		linked := 0
		for _, e := range f.Evidence {
			switch e.Role {
			case watchloop.RoleStaticWatch:
				static[e.AuditID] = true
				if e.Verb != "watch" || !slices.Contains(staleRVs, e.ResourceVersion) || e.User != w.Client.User {
					t.Errorf("static watch evidence %+v, want a watch from one of %v", e, staleRVs)
				}
			case watchloop.RoleRVAdvanced:
				advanced = append(advanced, e)
			}
		}
		for _, e := range f.Evidence {
			if e.Role != "endpoints-delete" && e.Role != "endpoints-create" {
				continue
			}
			linked++
			if wantWatch, ok := w.ChurnAfter[e.AuditID]; !ok {
				t.Errorf("churn evidence %s %s/%s (%s) is not churn of the loop", e.Verb, e.Namespace, e.Name, e.AuditID)
			} else if e.WatchAuditID != wantWatch || !static[e.WatchAuditID] {
				t.Errorf("churn %s %s/%s follows watch %q, want %q (a static-watch in the evidence)", e.Verb, e.Namespace, e.Name, e.WatchAuditID, wantWatch)
			}
			if (e.Role == "endpoints-delete") != (e.Verb == "delete") || e.Code < 200 || e.Code > 299 {
				t.Errorf("churn evidence %+v", e)
			}
		}
		if linked != len(w.ChurnAfter) {
			t.Errorf("%d churn events in the evidence, want %d", linked, len(w.ChurnAfter))
		}
		if len(advanced) == 0 {
			t.Errorf("no evidence that %s advanced past %s", w.Resource, w.ResourceVersion)
		}
		for _, e := range advanced {
			for _, rv := range staleRVs {
				if c, _ := strconv.ParseUint(e.ResourceVersion, 10, 64); c <= mustUint(t, rv) {
					t.Errorf("rv-advanced evidence at %s, not past %s", e.ResourceVersion, rv)
				}
			}
		}
		if f.FirstSeen.After(f.LastSeen) {
			t.Errorf("first seen %s after last seen %s", f.FirstSeen, f.LastSeen)
		}
		for _, s := range append(append([]string{"58547"}, staleRVs...), w.Objects...) {
			if !strings.Contains(f.Summary+f.Remediation, s) {
				t.Errorf("summary and remediation do not mention %q", s)
			}
		}
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkRegressions holds watch-rv-regression findings to the truth.
func checkRegressions(t *testing.T, want []scenario.Regression, got []detect.Finding) {
	t.Helper()
	key := func(user, agent, ip, res, ns, rv string) string {
		return strings.Join([]string{user, agent, ip, res, ns, rv}, "|")
	}
	wantBy := map[string]scenario.Regression{}
	for _, w := range want {
		wantBy[key(w.Client.User, w.Client.UserAgent, w.Client.SourceIP, w.Resource, w.Namespace, w.ResourceVersion)] = w
	}
	seen := map[string]bool{}
	for _, f := range got {
		s := f.Subjects
		k := key(s.User, s.UserAgent, s.SourceIP, s.Resource, s.Namespace, s.ResourceVersion)
		w, ok := wantBy[k]
		if !ok {
			t.Errorf("unexpected regression finding: %s (%s)", f.Title, s.SourceIP)
			continue
		}
		seen[k] = true
		if s.PreviousResourceVersion != w.Previous {
			t.Errorf("%s: previous resourceVersion %s, want %s", f.Title, s.PreviousResourceVersion, w.Previous)
		}
		if f.Detector != watchloop.RegressionName || f.Severity != detect.Warning {
			t.Errorf("%s: detector %s severity %s", f.Title, f.Detector, f.Severity)
		}
		regressed, before := 0, 0
		for _, e := range f.Evidence {
			switch e.Role {
			case watchloop.RoleRegressedWatch:
				regressed++
				if e.ResourceVersion != s.ResourceVersion {
					t.Errorf("regressed watch evidence from %s", e.ResourceVersion)
				}
			case watchloop.RoleHighWatch:
				before++
				if e.ResourceVersion != w.Previous || e.Verb != "watch" {
					t.Errorf("watch-before evidence %+v, want a watch from %s", e, w.Previous)
				}
			}
		}
		if before != 1 || regressed != s.WatchRestarts || regressed == 0 {
			t.Errorf("%s: %d watch-before and %d regressed watches (watch_restarts %d)", f.Title, before, regressed, s.WatchRestarts)
		}
	}
	for k := range wantBy {
		if !seen[k] {
			t.Errorf("no regression finding for %s", k)
		}
	}
}

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
	var buf bytes.Buffer
	if err := detect.Render(&buf, "json", all); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "seed-incident.golden.json")
	if detecttest.Updating() {
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
			checkLoops(t, tr.Want.Loops, loops)
			checkRegressions(t, tr.Want.Regressions, regs)
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
