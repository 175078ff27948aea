package detect_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/store"
)

// TestRepository stores findings in the findings table of the real engine
// and reads them back: by ID, with the list filters, after updates in
// place, with strings a hostile client chose.
func TestRepository(t *testing.T) {
	st := detecttest.Engine(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	repo := detect.NewRepository(st, func() time.Time { return now })
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	mk := func(id, det, cluster string, sev detect.Severity, first, last time.Duration) detect.Finding {
		return detect.Finding{ID: id, Detector: det, Cluster: cluster, Severity: sev, Confidence: 0.75,
			Title: "title of " + id, Summary: "summary", FirstSeen: t0.Add(first), LastSeen: t0.Add(last),
			Subjects: detect.Subjects{User: "u", Resource: "services", ResourceVersion: "1"}}
	}
	const hostile = "quote ' double \" backslash \\ tab \t newline \n nul \x00 {x:String} </script>"
	a := mk("repo-a", "repo-test-loop", "prod", detect.Critical, 0, time.Hour)
	a.Title, a.Subjects.UserAgent = hostile, hostile
	a.Objects = []detect.Object{{Resource: "endpoints", Namespace: "web", Name: hostile}}
	b := mk("repo-b", "repo-test-loop", "staging", detect.Warning, 2*time.Hour, 3*time.Hour)
	b.Objects = []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"}, {Resource: "endpoints", Namespace: "default", Name: "shop"}}
	c := mk("repo-c", "repo-test-regression", "prod", detect.Info, 5*time.Hour, 6*time.Hour)
	c.Objects = []detect.Object{{Resource: "nodes", Name: "node-1"}}
	if err := repo.Upsert(ctx, []detect.Finding{a, b, c}); err != nil {
		t.Fatal(err)
	}
	// One INSERT, so one part for the three (a merge could only join it
	// with others).
	err := store.Each(ctx, st, "SELECT uniqExact(_part) FROM findings WHERE id IN ('repo-a', 'repo-b', 'repo-c')", nil, func(parts uint64) error {
		if parts != 1 {
			t.Errorf("the three findings are in %d parts, want the one of a single INSERT", parts)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	got, err := repo.Get(ctx, "repo-a")
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, got, a) {
		t.Errorf("Get returned\n%+v\nwant\n%+v", got, a)
	}
	if _, err := repo.Get(ctx, "repo-nope"); !errors.Is(err, detect.ErrNotFound) {
		t.Errorf("Get of an unknown ID: %v, want ErrNotFound", err)
	}

	// An update in place: a newer version wins, there is still one.
	now = now.Add(time.Minute)
	a2 := a
	a2.LastSeen = t0.Add(4 * time.Hour)
	a2.Title = "updated"
	if err := repo.Upsert(ctx, []detect.Finding{a2}); err != nil {
		t.Fatal(err)
	}
	// The same clock reading again still orders versions.
	a3 := a2
	a3.Summary = "updated twice"
	if err := repo.Upsert(ctx, []detect.Finding{a3}); err != nil {
		t.Fatal(err)
	}
	if got, err := repo.Get(ctx, "repo-a"); err != nil || got.Summary != "updated twice" || !got.LastSeen.Equal(a2.LastSeen) {
		t.Errorf("after updates: %+v, %v", got, err)
	}

	// The newest version's objects count, not an older one's.
	d := mk("repo-d", "repo-test-objects", "prod", detect.Info, 0, time.Hour)
	d.Objects = []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "old"}}
	d2 := d
	d2.Objects = []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "new"}}
	if err := repo.Upsert(ctx, []detect.Finding{d}); err != nil {
		t.Fatal(err)
	}
	if err := repo.Upsert(ctx, []detect.Finding{d2}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"old": 0, "new": 1} {
		fs, err := repo.List(ctx, detect.ListFilter{Detectors: []string{"repo-test-objects"}, Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: name}}})
		if err != nil || len(fs) != want {
			t.Errorf("findings naming endpoints default/%s: %d (%v), want %d", name, len(fs), err, want)
		}
	}

	// A finding stored before the objects column (migration 0011), its
	// objects only in its body, is found by them through the column's
	// default.
	e := mk("repo-e", "repo-test-before-objects", "prod", detect.Info, 0, time.Hour)
	e.Objects = []detect.Object{{Resource: "endpoints", Namespace: "web", Name: hostile}, {Resource: "nodes", Name: "node-9"}}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Exec(ctx, `INSERT INTO findings (id, detector, cluster, severity, confidence, title, first_seen, last_seen, updated_at, body)
VALUES ('repo-e', 'repo-test-before-objects', 'prod', 'info', 0.75, 't', {t:DateTime64(6, 'UTC')}, {t:DateTime64(6, 'UTC')}, {t:DateTime64(6, 'UTC')}, {body:String})`,
		store.Params{"t": store.TimeParam(t0), "body": store.StringParam(string(body))}); err != nil {
		t.Fatal(err)
	}
	for _, o := range append(e.Objects, detect.Object{Resource: "nodes", Name: "node-1"}) {
		want := 1
		if o.Name == "node-1" {
			want = 0
		}
		fs, err := repo.List(ctx, detect.ListFilter{Detectors: []string{"repo-test-before-objects"}, Objects: []detect.Object{o}})
		if err != nil || len(fs) != want {
			t.Errorf("a finding stored before the objects column, by %v: %d (%v), want %d", o, len(fs), err, want)
		}
	}

	dets := []string{"repo-test-loop", "repo-test-regression"}
	for _, tc := range []struct {
		name string
		f    detect.ListFilter
		want []string
	}{
		{"all, latest seen first", detect.ListFilter{Detectors: dets}, []string{"repo-c", "repo-a", "repo-b"}},
		{"one detector", detect.ListFilter{Detectors: []string{"repo-test-loop"}}, []string{"repo-a", "repo-b"}},
		{"one cluster", detect.ListFilter{Detectors: dets, Clusters: []string{"prod"}}, []string{"repo-c", "repo-a"}},
		{"seen since", detect.ListFilter{Detectors: dets, Since: t0.Add(3*time.Hour + 30*time.Minute)}, []string{"repo-c", "repo-a"}},
		// a's first version ended at 1h: its update must count, not the old version.
		{"seen since, by the newest version", detect.ListFilter{Detectors: dets, Since: t0.Add(3*time.Hour + 59*time.Minute)}, []string{"repo-c", "repo-a"}},
		{"seen before", detect.ListFilter{Detectors: dets, Until: t0.Add(2 * time.Hour)}, []string{"repo-a"}},
		{"a range", detect.ListFilter{Detectors: dets, Since: t0.Add(150 * time.Minute), Until: t0.Add(5 * time.Hour)}, []string{"repo-a", "repo-b"}},
		{"warning or worse", detect.ListFilter{Detectors: dets, MinSeverity: detect.Warning}, []string{"repo-a", "repo-b"}},
		{"limit", detect.ListFilter{Detectors: dets, Limit: 1}, []string{"repo-c"}},
		{"hostile detector name", detect.ListFilter{Detectors: []string{hostile}}, nil},
		{"an object", detect.ListFilter{Detectors: dets, Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "shop"}}}, []string{"repo-b"}},
		{"a hostile object name", detect.ListFilter{Detectors: dets, Objects: []detect.Object{{Resource: "endpoints", Namespace: "web", Name: hostile}}}, []string{"repo-a"}},
		{"any of two objects", detect.ListFilter{Detectors: dets, Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"},
			{Resource: "endpoints", Namespace: "web", Name: hostile}}}, []string{"repo-a", "repo-b"}},
		{"a cluster-scoped object", detect.ListFilter{Detectors: dets, Objects: []detect.Object{{Resource: "nodes", Name: "node-1"}}}, []string{"repo-c"}},
		{"an object and a time range", detect.ListFilter{Detectors: dets, Since: t0.Add(150 * time.Minute), Until: t0.Add(5 * time.Hour),
			Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"}, {Resource: "nodes", Name: "node-1"}}}, []string{"repo-b"}},
		{"near misses of an object", detect.ListFilter{Detectors: dets, Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "car"},
			{Resource: "endpoints", Namespace: "web", Name: "cart"}, {Resource: "endpoint", Namespace: "default", Name: "cart"},
			{Resource: "endpoints", Namespace: "default", Name: "cart\x00"}, {Resource: "nodes", Namespace: "default", Name: "node-1"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := repo.List(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, f := range fs {
				ids = append(ids, f.ID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("got %v, want %v", ids, tc.want)
			}
		})
	}
}

func sameJSON(t *testing.T, a, b detect.Finding) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	// b as stored: normalized like every stored finding.
	var nb detect.Finding
	jb, _ := json.Marshal(b)
	if err := json.Unmarshal(jb, &nb); err != nil {
		t.Fatal(err)
	}
	if nb.Objects == nil {
		nb.Objects = []detect.Object{}
	}
	if nb.Evidence == nil {
		nb.Evidence = []detect.Evidence{}
	}
	jb, _ = json.Marshal(nb)
	return string(ja) == string(jb)
}

// TestSlidingWindows evaluates the seed incident the way serve does —
// overlapping windows a few restarts long, one step per restart period —
// and checks that the incident is one finding in the store whose span,
// objects, iterations and linked churn equal what one evaluation over the
// whole trace finds.
func TestSlidingWindows(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	for _, scale := range scenario.Scales {
		t.Run(scale.Name, func(t *testing.T) {
			sc, _ := scenario.ByName("seed-incident")
			tr := sc.Generate(scale, scenario.Start, 1)
			cluster := "windows-" + scale.Name
			whole := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
			once := detecttest.Evaluate(t, watchloop.New(watchloop.Config{}), st, whole)
			if len(once) != 1 {
				t.Fatalf("%d findings over the whole trace", len(once))
			}

			period := (scale.RestartMin + scale.RestartMax) / 2
			r, err := detect.NewRunner(st, detect.NewRepository(st, nil), detect.RunnerConfig{Detectors: detectors.Default(), Window: 4 * period, Interval: period})
			if err != nil {
				t.Fatal(err)
			}
			evaluations, created := 0, 0
			for until := tr.Start.Add(period); until.Before(tr.End.Add(4 * period)); until = until.Add(period) {
				res, err := r.RunOnce(ctx, detect.Window{Since: until.Add(-4 * period), Until: until, Clusters: []string{cluster}})
				if err != nil {
					t.Fatal(err)
				}
				evaluations++
				created += res.New
			}
			repo := detect.NewRepository(st, nil)
			loops, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{watchloop.Name}})
			if err != nil {
				t.Fatal(err)
			}
			regs, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{watchloop.RegressionName}})
			if err != nil {
				t.Fatal(err)
			}
			if len(loops) != 1 || len(regs) != len(tr.Want.Regressions) || created != 1+len(tr.Want.Regressions) {
				t.Fatalf("%d evaluations stored %d loop and %d regression findings (%d created); want 1, %d and %d",
					evaluations, len(loops), len(regs), created, len(tr.Want.Regressions), 1+len(tr.Want.Regressions))
			}
			got, want := loops[0], once[0]
			if got.ID != want.ID || !got.FirstSeen.Equal(want.FirstSeen) || !got.LastSeen.Equal(want.LastSeen) {
				t.Errorf("merged finding %s seen %s to %s; one evaluation: %s seen %s to %s",
					got.ID, got.FirstSeen, got.LastSeen, want.ID, want.FirstSeen, want.LastSeen)
			}
			if !slices.Equal(got.Objects, want.Objects) || got.Subjects.Iterations != want.Subjects.Iterations ||
				got.Subjects.WatchRestarts != want.Subjects.WatchRestarts {
				t.Errorf("merged: objects %v, %d restarts, %d iterations; one evaluation: %v, %d, %d", got.Objects,
					got.Subjects.WatchRestarts, got.Subjects.Iterations, want.Objects, want.Subjects.WatchRestarts, want.Subjects.Iterations)
			}
			if got.Subjects.Iterations != tr.Want.Loops[0].Iterations {
				t.Errorf("%d iterations, the trace has %d", got.Subjects.Iterations, tr.Want.Loops[0].Iterations)
			}
			seen := map[string]bool{}
			for _, e := range got.Evidence {
				if k := e.AuditID + "/" + e.Role; seen[k] {
					t.Errorf("evidence holds %s twice", k)
				} else {
					seen[k] = true
				}
				if e.Role == watchloop.RoleStaticWatch && e.Stage != "RequestReceived" {
					t.Errorf("static watch %s kept stage %s, not when it was made", e.AuditID, e.Stage)
				}
			}
			if n := len(slices.DeleteFunc(slices.Clone(got.Evidence), func(e detect.Evidence) bool { return e.Role != watchloop.RoleRVAdvanced })); n == 0 || n > 2 {
				t.Errorf("%d rv-advanced events, want the one or two of the first window that had them", n)
			}
			links := func(f detect.Finding) map[string]string {
				m := map[string]string{}
				for _, e := range f.Evidence {
					if e.Role != watchloop.RoleRVAdvanced {
						m[e.AuditID+"/"+e.Role] = e.WatchAuditID
					}
				}
				return m
			}
			if g, w := links(got), links(want); len(g) != len(w) {
				t.Errorf("merged evidence has %d watch and churn events, one evaluation %d", len(g), len(w))
			} else {
				for k, v := range w {
					if g[k] != v {
						t.Errorf("evidence %s links to %q, want %q", k, g[k], v)
					}
				}
			}
		})
	}
}
