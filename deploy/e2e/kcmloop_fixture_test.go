package e2e

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKCMWatchLoopFixtures proves the reproduction on the recorded audit
// logs of the kcm-watch-loop scenarios, from the raw events and nothing of
// auditlens: with the rewrite, every Services watch the real
// kube-controller-manager started after legacy's deletion asks for legacy's
// stale resourceVersion, and after each the controller-manager itself
// deletes and re-creates the Endpoints of the victims; without it (control),
// its watches move past that resourceVersion and nothing churns. Nobody
// else writes Endpoints in either log. It is fast and runs with -short.
func TestKCMWatchLoopFixtures(t *testing.T) {
	if updateFixtures {
		t.Skip("AUDITLENS_E2E_UPDATE=1 rewrites the fixtures in this run; check them in the next")
	}
	for _, name := range []string{"kcm-watch-loop", "kcm-watch-loop-control"} {
		t.Run(name, func(t *testing.T) { checkKCMLoopFixture(t, name) })
	}
}

// rawEvent is the part of an audit.k8s.io/v1 Event the checks read.
type rawEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource        string `json:"resource"`
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject  *object   `json:"requestObject"`
	ResponseObject *object   `json:"responseObject"`
	Received       time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

func (e rawEvent) resource() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Resource
}

// name is the object's name, from objectRef or, for a create, the bodies.
func (e rawEvent) name() string {
	if e.ObjectRef != nil && e.ObjectRef.Name != "" {
		return e.ObjectRef.Name
	}
	for _, o := range []*object{e.ResponseObject, e.RequestObject} {
		if o != nil && o.Metadata.Name != "" {
			return o.Metadata.Name
		}
	}
	return ""
}

func (e rawEvent) code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// readRawEvents reads an audit log, plain or gzipped (.gz).
func readRawEvents(t *testing.T, path string) []rawEvent {
	t.Helper()
	var out []rawEvent
	eachRawEvent(t, path, func(e rawEvent) { out = append(out, e) })
	return out
}

// eachRawEvent calls fn with each event of the audit log at path (gzip
// when it ends in .gz), one at a time: a soak's log does not fit in
// memory as a slice.
func eachRawEvent(t *testing.T, path string, fn func(rawEvent)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (regenerate with make e2e-fixtures)", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for n := 1; sc.Scan(); n++ {
		var e rawEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		fn(e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func checkKCMLoopFixture(t *testing.T, name string) {
	events := readRawEvents(t, filepath.Join(fixtureDir, name+".log"))
	exp := readExpectation(t, name)
	loop := exp.WatchLoop != nil
	if loop == strings.HasSuffix(name, "-control") {
		t.Fatalf("%s.json: watch_loop set %v", name, loop)
	}

	// legacy's create (its resourceVersion is the stale one) and deletion
	// (the trigger), by alice.
	var legacyRV string
	var trigger time.Time
	for _, e := range events {
		if e.Stage != "ResponseComplete" || e.resource() != "services" || e.User.Username != aliceID.user || e.name() != legacyService {
			continue
		}
		switch {
		case e.Verb == "create" && e.code() == 201 && e.ResponseObject != nil:
			legacyRV = e.ResponseObject.Metadata.ResourceVersion
		case e.Verb == "delete" && e.code() == 200:
			trigger = e.StageTimestamp
		}
	}
	if legacyRV == "" || trigger.IsZero() {
		t.Fatalf("no create (rv %q) and delete (%v) of Service %s by %s", legacyRV, trigger, legacyService, aliceID.user)
	}
	if loop && exp.WatchLoop.ResourceVersion != legacyRV {
		t.Errorf("expectation's resourceVersion %s, legacy was created at %s", exp.WatchLoop.ResourceVersion, legacyRV)
	}

	// The controller-manager's Services watches, and its Endpoints writes.
	type watchStart struct {
		at, end time.Time
		rv      string
		list    bool
	}
	ends := map[string]time.Time{}
	for _, e := range events {
		if e.Verb == "watch" && e.Stage == "ResponseComplete" {
			ends[e.AuditID] = e.StageTimestamp
		}
	}
	var before, after []watchStart
	var writes []epWrite
	for _, e := range events {
		if e.resource() == "endpoints" && e.Stage == "ResponseComplete" && e.Verb != "get" && e.Verb != "list" && e.Verb != "watch" {
			if e.User.Username != kcmID.user {
				t.Errorf("Endpoints %s %s by %s: only the real controller-manager may write Endpoints", e.Verb, e.name(), e.User.Username)
			}
			writes = append(writes, epWrite{At: e.StageTimestamp, Verb: e.Verb, Name: e.name(), Code: e.code()})
		}
		if e.User.Username != kcmID.user || e.Verb != "watch" || e.resource() != "services" || e.Stage != "ResponseStarted" {
			continue
		}
		if loop && e.UserAgent != exp.WatchLoop.UserAgent {
			t.Errorf("Services watch %s by user agent %q, expectation names %q", e.AuditID, e.UserAgent, exp.WatchLoop.UserAgent)
		}
		u, err := url.ParseRequestURI(e.RequestURI)
		if err != nil {
			t.Fatalf("watch %s: %v", e.AuditID, err)
		}
		w := watchStart{at: e.StageTimestamp, end: ends[e.AuditID], rv: u.Query().Get("resourceVersion"), list: u.Query().Get("sendInitialEvents") == "true"}
		if w.at.After(trigger) {
			after = append(after, w)
		} else {
			before = append(before, w)
		}
	}
	var rvsBefore, rvsAfter []string
	for _, w := range before {
		rvsBefore = append(rvsBefore, w.rv)
	}
	for _, w := range after {
		rvsAfter = append(rvsAfter, w.rv)
		if w.list {
			t.Errorf("a watch-list after the trigger (from %q): the reflector relisted", w.rv)
		}
	}
	t.Logf("legacy created at rv %s, deleted at %s; controller-manager's Services watches from %q before, %q after", legacyRV, trigger.Format(time.StampMilli), rvsBefore, rvsAfter)
	if len(before) == 0 || !before[0].list {
		t.Errorf("the controller-manager's first Services watch is not a watch-list: %v", rvsBefore)
	}
	if !slices.ContainsFunc(rvsBefore, func(rv string) bool { return rvLess(legacyRV, rv) }) {
		t.Errorf("before the trigger the controller-manager never watched Services from past legacy's %s: %v", legacyRV, rvsBefore)
	}
	if len(after) < kcmLoopRestarts {
		t.Fatalf("%d Services watches by the controller-manager after the trigger, want at least %d", len(after), kcmLoopRestarts)
	}

	notVictims := []string{legacyService, "frontend", "catalog"}
	if loop {
		notVictims = nil
		for _, o := range exp.WatchLoop.NotObjects {
			notVictims = append(notVictims, o.Name)
		}
	}
	for _, w := range writes {
		if w.Verb == "delete" && w.Code == 200 && w.At.After(after[0].at) && (!loop || slices.Contains(notVictims, w.Name)) {
			t.Errorf("Endpoints %s deleted (200) at %s, after the first restart", w.Name, w.At.Format(time.StampMilli))
		}
	}
	if !loop {
		for _, w := range after {
			if !rvLess(legacyRV, w.rv) {
				t.Errorf("control: a Services watch from %q, not past legacy's %s", w.rv, legacyRV)
			}
		}
		return
	}

	var victims []string
	for _, o := range exp.WatchLoop.Objects {
		victims = append(victims, o.Name)
	}
	var checked []time.Time
	for i, w := range after {
		if w.rv != legacyRV {
			t.Errorf("restart %d watched Services from %q, want legacy's stale %s", i+1, w.rv, legacyRV)
		}
		// A watch the controller-manager's shutdown ended may have come
		// too late to see its churn.
		if w.end.IsZero() || w.end.Sub(w.at) < kcmLoopChurnWithin {
			t.Logf("restart %d at %s lasted %s: not checked for churn", i+1, w.at.Format(time.StampMilli), w.end.Sub(w.at))
			continue
		}
		checked = append(checked, w.at)
		var next time.Time
		if i+1 < len(after) {
			next = after[i+1].at
		}
		delays, churned := churnAfter(writes, w.at, next, victims)
		t.Logf("restart %d at %s from %s (lasted %s): Endpoints deleted→created %s", i+1, w.at.Format(time.StampMilli), w.rv, w.end.Sub(w.at).Round(time.Second), delays)
		if len(churned) == 0 {
			t.Errorf("restart %d at %s: no Endpoints of the victims %v deleted and re-created within %s", i+1, w.at.Format(time.StampMilli), victims, kcmLoopChurnWithin)
		}
	}
	counts := churnCounts(writes, checked, victims)
	for _, v := range victims {
		if counts[v] < exp.WatchLoop.Iterations {
			t.Errorf("Endpoints %s deleted and re-created after %d of %d restarts, want at least %d", v, counts[v], len(checked), exp.WatchLoop.Iterations)
		}
	}
}
