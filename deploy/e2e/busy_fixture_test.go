package e2e

import (
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBusyFixtures runs `auditlens scan` over the committed recordings of
// the busy cluster (fixtures/busy-<scenario>.log.gz, written by
// `make e2e-fixtures` from TestBusyCluster's runs): the healthy load is
// silent, the heartbeat wave is one finding naming the stopped nodes, and
// the loop amid the load's own Service deletions is one watch-loop
// finding naming every victim, with nothing else above information.
// For the loop it also reads the raw events, with nothing of auditlens,
// for what the finding must hold: every stale resourceVersion the
// controller-manager resumed from after the trigger (the delete wave
// makes it drift: at least two), and the victims' Endpoints deleted and
// re-created by it.
func TestBusyFixtures(t *testing.T) {
	if updateFixtures {
		t.Skip("AUDITLENS_E2E_UPDATE=1 rewrites the fixtures in this run; check them in the next")
	}
	prepare(t) // auditlens itself
	for _, sc := range busyScenarios {
		name := "busy-" + sc.name
		t.Run(name, func(t *testing.T) {
			exp := readExpectation(t, name)
			log := filepath.Join(fixtureDir, name+".log.gz")
			got := scanLogs(t, exp.Cluster, log)
			if problems := matchFindings(exp, got); len(problems) > 0 {
				t.Fatalf("auditlens scan %s (%s):\n  %s\ngot %s", log, exp.Description, strings.Join(problems, "\n  "), describe(got))
			}
			t.Logf("%s", describe(got))
			if exp.WatchLoop != nil {
				checkBusyLoopRecording(t, readRawEvents(t, log), exp, got)
			}
		})
	}
}

// checkBusyLoopRecording holds the watch-loop finding against the raw
// events of the busy loop's recording.
func checkBusyLoopRecording(t *testing.T, events []rawEvent, exp expectation, got []finding) {
	want := exp.WatchLoop
	if len(want.NotObjects) == 0 {
		t.Fatal("the expectation does not name legacy (not_objects)")
	}
	legacy := want.NotObjects[0]
	var trigger time.Time
	for _, e := range events {
		if e.Stage == "ResponseComplete" && e.Verb == "delete" && e.resource() == "services" && e.code() == 200 &&
			e.ObjectRef.Namespace == legacy.Namespace && e.name() == legacy.Name {
			trigger = e.StageTimestamp
		}
	}
	if trigger.IsZero() {
		t.Fatalf("no deletion of Service %s/%s in the recording", legacy.Namespace, legacy.Name)
	}

	// The controller-manager's Services watches: the highest
	// resourceVersion it resumed from before the trigger, and the stale
	// ones it resumed from after it.
	var high string
	stale := map[string]int{}
	var restarts []time.Time
	for _, e := range events {
		if e.User.Username != want.User || e.Verb != "watch" || e.resource() != "services" || e.Stage != "ResponseStarted" {
			continue
		}
		u, err := url.ParseRequestURI(e.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		rv := q.Get("resourceVersion")
		if q.Get("sendInitialEvents") == "true" || rv == "" || rv == "0" {
			continue
		}
		if e.StageTimestamp.Before(trigger) {
			if rvLess(high, rv) {
				high = rv
			}
			continue
		}
		if rvLess(rv, high) {
			stale[rv]++
			restarts = append(restarts, e.StageTimestamp)
		}
	}
	if len(restarts) < want.Iterations {
		t.Fatalf("%d restarts of %s's Services watch from below %s after the trigger, want at least %d", len(restarts), want.User, high, want.Iterations)
	}

	var loop finding
	for _, f := range got {
		if f.Detector == "watch-loop" {
			loop = f
		}
	}
	listed := map[string]bool{}
	for _, s := range loop.Subjects.StaleRVs {
		listed[s.RV] = true
	}
	var rvs []string
	for rv := range stale {
		rvs = append(rvs, rv)
		if !listed[rv] {
			t.Errorf("the controller-manager resumed %d times from stale resourceVersion %s after the trigger; the finding lists %+v",
				stale[rv], rv, loop.Subjects.StaleRVs)
		}
	}
	slices.SortFunc(rvs, func(a, b string) int {
		if rvLess(a, b) {
			return -1
		}
		return 1
	})
	t.Logf("legacy %s/%s deleted at %s; %d restarts from stale resourceVersions %v (highest before: %s); finding: %d restarts, %s → %s",
		legacy.Namespace, legacy.Name, trigger.Format(time.TimeOnly), len(restarts), rvs, high, loop.Subjects.WatchRestarts,
		loop.FirstSeen.Format(time.TimeOnly), loop.LastSeen.Format(time.TimeOnly))
	// A recording of the kind the busy cluster gives: the load's own
	// Service deletions moved the stale resume point while the loop ran.
	if len(stale) < 2 {
		t.Errorf("the recording's loop resumed from one stale resourceVersion only (%v): no drift to prove (regenerate with make e2e-fixtures)", rvs)
	}
	if loop.FirstSeen.Before(trigger) {
		t.Errorf("the finding begins at %s, before the trigger at %s", loop.FirstSeen.Format(time.TimeOnly), trigger.Format(time.TimeOnly))
	}

	// Each victim's Endpoints, deleted and created again by the
	// controller-manager after the trigger.
	churn := map[string]int{}
	for _, e := range events {
		if e.resource() != "endpoints" || e.Stage != "ResponseComplete" || e.User.Username != want.User || e.StageTimestamp.Before(trigger) {
			continue
		}
		if (e.Verb == "delete" && e.code() == 200) || (e.Verb == "create" && e.code() == 201) {
			ns := ""
			if e.ObjectRef != nil {
				ns = e.ObjectRef.Namespace
			}
			churn[e.Verb+" "+ns+"/"+e.name()]++
		}
	}
	for _, o := range want.Objects {
		key := o.Namespace + "/" + o.Name
		if churn["delete "+key] == 0 || churn["create "+key] == 0 {
			t.Errorf("victim %s: %d deletes and %d creates of its Endpoints by %s after the trigger, want both", key,
				churn["delete "+key], churn["create "+key], want.User)
		}
	}
}
