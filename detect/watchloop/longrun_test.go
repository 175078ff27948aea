package watchloop_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/report"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// TestWatchLoopSlidingWindowsRealScale is the long-running proof: the seed
// incident at the real time scale (restarts every 5–10 minutes) running
// for over six hours amid background traffic, evaluated as serve does —
// one-hour windows, one evaluation every few minutes, findings and the
// detector's memory in the store — by a serve that was deployed after the
// loop had begun (the trigger is not in the store) and restarted half-way.
// It must yield exactly one watch-loop finding, found as soon as the
// windows show the loop, whose last_seen follows the loop to its end, whose
// counts add up across windows, and that a report over the last day lists
// as ongoing.
func TestWatchLoopSlidingWindowsRealScale(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	sc, _ := scenario.ByName("long-incident")
	tr := sc.Generate(scenario.Real, scenario.Start, 3)
	if d := tr.End.Sub(tr.Start); d < 6*time.Hour {
		t.Fatalf("the trace lasts %s, want over 6 hours", d)
	}
	truth := tr.Want.Loops[0]

	// auditlens is deployed 90 minutes into the trace, after the trigger.
	deployed := tr.Start.Add(90 * time.Minute)
	// In the last 90 minutes the loop's Endpoints no longer churn (their
	// Services were removed, say) while the controller keeps re-watching
	// from the stale resourceVersion: the loop goes on, and so must its
	// finding, although no window of that time shows churn.
	quiet := tr.End.Add(-90 * time.Minute)
	tr.Events = slices.DeleteFunc(tr.Events, func(e auditv1.Event) bool {
		return e.ObjectRef != nil && e.ObjectRef.Resource == "endpoints" && (e.Verb == "delete" || e.Verb == "create") &&
			e.RequestReceivedTimestamp.After(quiet)
	})
	var stale []time.Time // the culprit's restarts from the stale resourceVersion the store holds
	tr.Events = slices.DeleteFunc(tr.Events, func(e auditv1.Event) bool { return e.StageTimestamp.Time.Before(deployed) })
	seen := map[string]bool{}
	for _, e := range tr.Events {
		// Any stage of a watch the store holds makes it a restart.
		if e.Verb == "watch" && !seen[string(e.AuditID)] && e.User.Username == truth.Client.User &&
			e.ObjectRef != nil && e.ObjectRef.Resource == "services" && reqRV(e.RequestURI) == truth.ResourceVersion {
			seen[string(e.AuditID)] = true
			stale = append(stale, e.RequestReceivedTimestamp.Time)
		}
	}
	slices.SortFunc(stale, time.Time.Compare)
	if len(stale) < 36 {
		t.Fatalf("%d restarts from the stale resourceVersion after deployment, want at least 36 (6 hours)", len(stale))
	}
	const cluster = "longrun"
	detecttest.ImportTrace(t, st, tr, cluster)

	repo := detect.NewRepository(st, nil)
	newRunner := func(fs detect.FindingStore, state detect.StateStore) *detect.Runner {
		r, err := detect.NewRunner(st, fs, detect.RunnerConfig{Window: time.Hour, Interval: 5 * time.Minute,
			Clusters: []string{cluster}, State: state, Detectors: []detect.Detector{watchloop.New(watchloop.Config{})}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runner := newRunner(repo, repo)
	// The same evaluations without memory, as a control: windows alone
	// lose the loop once they stop showing churn.
	forgotten := detecttest.MemFindings{}
	forgetful := newRunner(forgotten, nil)
	var foundAt time.Time
	var loopID string
	end := tr.End.Add(5 * time.Minute)
	restartAt := deployed.Add(tr.End.Sub(deployed) / 2)
	for now := deployed.Add(5 * time.Minute); !now.After(end); now = now.Add(5 * time.Minute) {
		if !restartAt.IsZero() && now.After(restartAt) {
			runner = newRunner(repo, repo) // serve restarted: nothing in memory, everything in the store
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
			if f.Detector != watchloop.Name {
				continue
			}
			if loopID == "" {
				loopID, foundAt = f.ID, now
			} else if f.ID != loopID {
				t.Fatalf("at %s a second watch-loop finding %s (%s), the first was %s", now, f.ID, f.Title, loopID)
			}
		}
		if loopID == "" {
			continue
		}
		// Once found, the finding follows every restart the store holds
		// up to the evaluation: the loop is never left behind as over.
		f, err := repo.Get(ctx, loopID)
		if err != nil {
			t.Fatal(err)
		}
		var latest time.Time
		for _, s := range stale {
			if s.Before(now) {
				latest = s
			}
		}
		if f.LastSeen.Before(latest) {
			t.Fatalf("at %s the finding's last_seen is %s, behind the restart at %s", now, f.LastSeen, latest)
		}
	}
	if loopID == "" {
		t.Fatal("no watch-loop finding")
	}
	// Found within the first hour of the deployment: three restarts.
	if foundAt.Sub(deployed) > 35*time.Minute {
		t.Errorf("found at %s, %s after deployment", foundAt, foundAt.Sub(deployed))
	}
	all, err := repo.List(ctx, detect.ListFilter{Clusters: []string{cluster}, Detectors: []string{watchloop.Name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("%d watch-loop findings stored, want 1", len(all))
	}
	f := all[0]
	t.Logf("%s: %s … %s, %d restarts, %d iterations, %d objects", f.Title, f.FirstSeen, f.LastSeen,
		f.Subjects.WatchRestarts, f.Subjects.Iterations, len(f.Objects))
	if !f.LastSeen.After(stale[len(stale)-1].Add(-time.Second)) {
		t.Errorf("last_seen %s, the last restart was at %s", f.LastSeen, stale[len(stale)-1])
	}
	if f.FirstSeen.After(stale[0].Add(time.Second)) {
		t.Errorf("first_seen %s, the first restart in the store was at %s", f.FirstSeen, stale[0])
	}
	// Counts add up across windows: every restart the store holds (a few
	// near the deployment may fall between the first windows' edges),
	// far more than a one-hour window holds.
	if n := f.Subjects.WatchRestarts; n < len(stale)-2 || n > len(stale) {
		t.Errorf("%d restarts counted, the store holds %d", n, len(stale))
	}
	churning := 0 // restarts before the churn stopped
	for _, s := range stale {
		if s.Before(quiet) {
			churning++
		}
	}
	if n := f.Subjects.Iterations; n < churning-3 || n > churning {
		t.Errorf("%d iterations counted, %d restarts before the churn stopped", n, churning)
	}
	if got := detecttest.ObjectNames(f); !slices.Equal(got, truth.Objects) {
		t.Errorf("objects %v, want %v", got, truth.Objects)
	}

	// Without memory the finding stops where the churn stopped.
	if len(forgotten) != 1 {
		t.Fatalf("without memory: %d findings, want 1", len(forgotten))
	}
	for _, g := range forgotten {
		// The last window that held churn ended an hour after it stopped.
		if !g.LastSeen.Before(quiet.Add(time.Hour)) || !g.LastSeen.Before(f.LastSeen.Add(-20*time.Minute)) {
			t.Errorf("without memory last_seen is %s (churn stopped at %s, the loop's last restart %s): the control does not show what memory adds",
				g.LastSeen, quiet, f.LastSeen)
		}
	}

	// A daily report: the one of three hours before the end saw the loop,
	// the one at the end lists it as ongoing, not resolved.
	for i, at := range []time.Time{end.Add(-3 * time.Hour), end} {
		r, err := report.Build(ctx, st, repo, report.Config{Name: "longrun-daily", Clusters: []string{cluster},
			End: at.Truncate(time.Minute), Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := report.Save(ctx, st, r); err != nil {
				t.Fatal(err)
			}
			continue
		}
		ids := func(cs []report.Change) (out []string) {
			for _, c := range cs {
				out = append(out, c.ID)
			}
			return out
		}
		if !slices.Contains(ids(r.Changes.Ongoing), loopID) || slices.Contains(ids(r.Changes.Resolved), loopID) {
			t.Errorf("report changes: new %v, ongoing %v, resolved %v; want %s ongoing",
				ids(r.Changes.New), ids(r.Changes.Ongoing), ids(r.Changes.Resolved), loopID)
		}
	}
}

// reqRV returns the resourceVersion parameter of a request URI.
func reqRV(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return ""
	}
	return u.Query().Get("resourceVersion")
}

// TestRegressionPartOfLoop is a FindingStore in memory, for the control run that must
// not touch the stored findings.
// TestRegressionPartOfLoop: the regression that began a watch loop is the
// same incident: information naming the loop, not a second warning. The
// other Services watchers that went back (kube-proxy, kube-dns) loop
// without churn: their regressions stay warnings.
func TestRegressionPartOfLoop(t *testing.T) {
	st := detecttest.Engine(t)
	sc, _ := scenario.ByName("seed-incident")
	tr := sc.Generate(scenario.Compressed, scenario.Start, 5)
	const cluster = "part-of"
	w := detecttest.Span(detecttest.ImportTrace(t, st, tr, cluster), cluster)
	repo := detect.NewRepository(st, nil)
	r, err := detect.NewRunner(st, repo, detect.RunnerConfig{State: repo,
		Detectors: []detect.Detector{watchloop.New(watchloop.Config{}), watchloop.NewRegression(watchloop.RegressionConfig{})}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunOnce(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	var loopID string
	for _, f := range res.Findings {
		if f.Detector == watchloop.Name {
			loopID = f.ID
		}
	}
	if loopID == "" {
		t.Fatal("no watch-loop finding")
	}
	linked := 0
	for _, f := range res.Findings {
		if f.Detector != watchloop.RegressionName {
			continue
		}
		kcm := f.Subjects.User == "system:kube-controller-manager"
		switch {
		case kcm && (f.Subjects.PartOf != loopID || f.Severity != detect.Info || !strings.Contains(f.Summary, loopID)):
			t.Errorf("kube-controller-manager's regression: part_of %q, %s; want part of %s, info", f.Subjects.PartOf, f.Severity, loopID)
		case !kcm && (f.Subjects.PartOf != "" || f.Severity != detect.Warning):
			t.Errorf("%s's regression: part_of %q, %s; want a warning of its own", f.Subjects.User, f.Subjects.PartOf, f.Severity)
		}
		if kcm {
			linked++
		}
	}
	if linked != 1 {
		t.Errorf("%d regressions of kube-controller-manager, want 1", linked)
	}
}
