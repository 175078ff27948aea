package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/rollback"
)

// rbEvent is the part of an audit event the rollback checks read: the
// fixture checks' rawEvent, which carries objectRef.resourceVersion and
// requestReceivedTimestamp for them.
type rbEvent = rawEvent

func (e rbEvent) query() url.Values {
	u, err := url.ParseRequestURI(e.RequestURI)
	if err != nil {
		return nil
	}
	return u.Query()
}

// requestedRV is the resourceVersion a list or watch asked for.
func (e rbEvent) requestedRV() int64 {
	n, _ := strconv.ParseInt(e.query().Get("resourceVersion"), 10, 64)
	return n
}

// watchList: a watch that starts with the current state (sendInitialEvents).
func (e rbEvent) watchList() bool {
	return e.Verb == "watch" && e.query().Get("sendInitialEvents") == "true"
}

// bodyRV is the resourceVersion a write sent (objectRef, from the body).
func (e rbEvent) bodyRV() int64 {
	if e.ObjectRef == nil {
		return 0
	}
	n, _ := strconv.ParseInt(e.ObjectRef.ResourceVersion, 10, 64)
	return n
}

// responseRV is the resourceVersion a write produced, where the policy
// records the response.
func (e rbEvent) responseRV() int64 {
	if e.ResponseObject == nil || e.code() >= 300 {
		return 0
	}
	n, _ := strconv.ParseInt(e.ResponseObject.Metadata.ResourceVersion, 10, 64)
	return n
}

func readRBEvents(t *testing.T, path string) []rbEvent { return readRawEvents(t, path) }

// rollbackView is what an audit log shows of a restore.
type rollbackView struct {
	// HeadBefore is the highest resourceVersion a write produced before
	// the apiserver stopped; FirstAfter the first one after it restarted,
	// MaxAfter the highest after.
	HeadBefore, FirstAfter, MaxAfter int64
	// CaughtUp is when a write after the restart first produced a
	// resourceVersion above HeadBefore (zero: never).
	CaughtUp time.Time
	// FutureWatches are the watches started after the restart from above
	// the head of their moment.
	FutureWatches []rbWatchView
	// OldWatches are the watches started after the restart from a
	// resourceVersion handed out since the snapshot: above the snapshot's,
	// at most the head before.
	OldWatches []rbWatchView
	// LeaseConflicts are the Lease updates answered 409 after the restart.
	LeaseConflicts []rbEvent
	// LeaseRetries are the successful Lease updates that followed them:
	// their objectRef.resourceVersion is what the re-GET read.
	LeaseRetries []rbEvent
	// Relists count the lists (not from the watch cache's "0") and
	// watch-lists (sendInitialEvents) after the restart, by user.
	Relists map[string]int
	// KCMWrites counts the controller-manager's writes after the restart,
	// by "verb resource code".
	KCMWrites map[string]int
	// Stopped and Restarted bound the apiserver's absence in the log.
	Stopped, Restarted time.Time
}

type rbWatchView struct {
	User, UserAgent, Resource string
	RV, Head                  int64
	Start                     time.Time
	Duration                  time.Duration // zero: still open when the log ends
	Code                      int
}

// viewRollback reads the restore off the audit log: the events received
// before the apiserver's stop, and those after, where the head starts at
// etcd's restored revision; snapshot is the snapshot's revision.
func viewRollback(events []rbEvent, stopped time.Time, snapshot, restoredHead int64) rollbackView {
	v := rollbackView{Relists: map[string]int{}, KCMWrites: map[string]int{}}
	completes := map[string]rbEvent{}
	for _, e := range events {
		if e.Stage == "ResponseComplete" {
			completes[e.AuditID] = e
		}
	}
	head := restoredHead
	conflicted := map[string]bool{} // lease name → a 409 waits for its retry
	for _, e := range events {
		before := e.Received.Before(stopped)
		if rv := e.responseRV(); rv != 0 && e.Stage == "ResponseComplete" {
			if before {
				v.HeadBefore = max(v.HeadBefore, rv)
			} else {
				if v.FirstAfter == 0 {
					v.FirstAfter = rv
					v.Restarted = e.StageTimestamp
				}
				v.MaxAfter = max(v.MaxAfter, rv)
				head = max(head, rv)
				if rv > v.HeadBefore && v.CaughtUp.IsZero() {
					v.CaughtUp = e.StageTimestamp
				}
			}
		}
		if before {
			if v.Stopped.Before(e.StageTimestamp) {
				v.Stopped = e.StageTimestamp
			}
			continue
		}
		if e.Stage == "ResponseComplete" && (e.Verb == "list" && e.query().Get("resourceVersion") != "0" || e.watchList()) {
			v.Relists[e.User.Username]++
		}
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			rv := e.requestedRV()
			w := rbWatchView{User: e.User.Username, UserAgent: e.UserAgent, Resource: e.resource(), RV: rv, Head: head, Start: e.StageTimestamp}
			if c, ok := completes[e.AuditID]; ok {
				w.Duration = c.StageTimestamp.Sub(e.StageTimestamp)
				w.Code = c.code()
			}
			// A watch-list (sendInitialEvents) asks for a state at least as
			// new as rv: a relist, counted below, not a resumption.
			if e.watchList() {
				break
			}
			if rv > head {
				v.FutureWatches = append(v.FutureWatches, w)
			}
			if rv > snapshot && rv <= v.HeadBefore {
				v.OldWatches = append(v.OldWatches, w)
			}
		case e.resource() == "leases" && e.Verb == "update" && e.Stage == "ResponseComplete" && e.ObjectRef.Namespace == "kube-node-lease":
			switch e.code() {
			case 409:
				v.LeaseConflicts = append(v.LeaseConflicts, e)
				conflicted[e.name()] = true
			case 200:
				if conflicted[e.name()] {
					v.LeaseRetries = append(v.LeaseRetries, e)
					conflicted[e.name()] = false
				}
			}
		}
		if e.User.Username == kcmID.user && e.Stage == "ResponseComplete" && slices.Contains([]string{"create", "update", "patch", "delete"}, e.Verb) {
			ctrl := e.UserAgent[strings.LastIndexByte(e.UserAgent, '/')+1:]
			v.KCMWrites[fmt.Sprintf("%s: %s %s %d", ctrl, e.Verb, e.resource(), e.code())]++
		}
	}
	return v
}

func (v rollbackView) describe(t0 time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "head before %d; after the restart first %d, highest %d", v.HeadBefore, v.FirstAfter, v.MaxAfter)
	if !v.CaughtUp.IsZero() {
		fmt.Fprintf(&b, "; passed the old head %.1fs after the restart", v.CaughtUp.Sub(t0).Seconds())
	}
	fmt.Fprintf(&b, "\n  %d watches from above the head:", len(v.FutureWatches))
	for _, w := range v.FutureWatches {
		d := "open at the end"
		if w.Duration > 0 {
			d = fmt.Sprintf("lasted %.1fs (code %d)", w.Duration.Seconds(), w.Code)
		}
		fmt.Fprintf(&b, "\n    %+.1fs %s %s from %d (head %d) %s", w.Start.Sub(t0).Seconds(), w.User, w.Resource, w.RV, w.Head, d)
	}
	short := 0
	for _, w := range v.OldWatches {
		if w.Duration > 0 && w.Duration < 5*time.Second {
			short++
		}
	}
	fmt.Fprintf(&b, "\n  %d watches from resourceVersions handed out since the snapshot, %d of them ended within 5 s", len(v.OldWatches), short)
	fmt.Fprintf(&b, "\n  %d Lease updates answered 409:", len(v.LeaseConflicts))
	for _, e := range v.LeaseConflicts {
		fmt.Fprintf(&b, " %s@%d", e.name(), e.bodyRV())
	}
	fmt.Fprintf(&b, "\n  retried with:")
	for _, e := range v.LeaseRetries {
		fmt.Fprintf(&b, " %s@%d", e.name(), e.bodyRV())
	}
	fmt.Fprintf(&b, "\n  lists and watch-lists after the restart by user: %v", v.Relists)
	keys := make([]string, 0, len(v.KCMWrites))
	for k := range v.KCMWrites {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "\n  kube-controller-manager's writes after the restart:")
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %s ×%d", k, v.KCMWrites[k])
	}
	return b.String()
}

// rollbackObserve logs what the audit log shows of the restore and checks
// it against what the driver saw.
func rollbackObserve(t *testing.T, auditLog string, exp rollbackExpectation) {
	t.Helper()
	rb := exp.RVRollback
	v := viewRollback(readRBEvents(t, auditLog), rb.APIServerStopped, rb.SnapshotRevision, rb.EtcdHeadRestored)
	t.Logf("the audit log of %s shows: %s", exp.Scenario, v.describe(rb.Restarted))
	if v.HeadBefore < rb.SnapshotRevision || v.HeadBefore > rb.EtcdHeadBefore {
		t.Errorf("the head before the restore in the audit log, %d, is not between the snapshot's %d and etcd's %d", v.HeadBefore, rb.SnapshotRevision, rb.EtcdHeadBefore)
	}
	if v.FirstAfter < rb.EtcdHeadRestored {
		t.Errorf("the first resourceVersion after the restore in the audit log, %d, is below the restored etcd's %d", v.FirstAfter, rb.EtcdHeadRestored)
	}
	// Watches from the resourceVersions handed out since the snapshot:
	// without bump the apiserver accepts them and they stay open, silent,
	// until the head passes them; with bump they end at once (410 Gone
	// inside a 200) and the clients relist.
	longest := time.Duration(0)
	for _, w := range v.OldWatches {
		longest = max(longest, w.Duration)
	}
	if rb.Bump == 0 {
		if v.FirstAfter >= v.HeadBefore {
			t.Errorf("no rollback in the audit log: head %d before, %d after", v.HeadBefore, v.FirstAfter)
		}
		if len(v.LeaseConflicts) == 0 || len(v.FutureWatches) == 0 {
			t.Errorf("a restore without bump: %d Lease conflicts and %d watches from above the head in the audit log, want some of each", len(v.LeaseConflicts), len(v.FutureWatches))
		}
		if longest < 15*time.Second {
			t.Errorf("a restore without bump: the longest of %d watches from resourceVersions handed out since the snapshot lasted %s, want them left open (15 s or more)", len(v.OldWatches), longest)
		}
	} else {
		if v.FirstAfter <= v.HeadBefore {
			t.Errorf("a bumped restore: head %d before, %d after", v.HeadBefore, v.FirstAfter)
		}
		if len(v.OldWatches) == 0 || longest > 5*time.Second {
			t.Errorf("a bumped restore: %d watches from resourceVersions handed out before it, the longest lasted %s; want them ended at once", len(v.OldWatches), longest)
		}
	}
}

// rollbackFixtureLead is how much of the log before the snapshot the
// fixture keeps.
const rollbackFixtureLead = 15 * time.Second

// saveRollbackFixture writes the scenario's audit log, from
// rollbackFixtureLead before the snapshot on, and its expectation to
// fixtures/.
func saveRollbackFixture(t *testing.T, name, auditLog string, exp rollbackExpectation) {
	t.Helper()
	all, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	since := exp.RVRollback.Snapshot.Add(-rollbackFixtureLead)
	exp.RVRollback.FixtureSince = since
	var b []byte
	for _, line := range bytes.SplitAfter(all, []byte("\n")) {
		var e struct {
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &e) != nil || e.StageTimestamp.Before(since) {
			continue
		}
		b = append(b, line...)
	}
	if err := os.WriteFile(filepath.Join(fixtureDir, name+".log"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fixtureDir, name+".json"), append(j, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s/%s.log (%d of the log's %d bytes) and %s.json", fixtureDir, name, len(b), len(all), name)
}

func loadRollbackExpectation(t *testing.T, name string) rollbackExpectation {
	t.Helper()
	var exp rollbackExpectation
	j, err := os.ReadFile(filepath.Join(fixtureDir, name+".json"))
	if err != nil {
		t.Fatalf("%v (regenerate with make e2e-fixtures)", err)
	}
	if err := json.Unmarshal(j, &exp); err != nil || exp.RVRollback == nil {
		t.Fatalf("%s.json: %v (no rv_rollback?)", name, err)
	}
	return exp
}

// TestRVRollbackFixtures proves the recorded restores from the raw events
// and nothing of auditlens: without bump the head drops from above the
// snapshot's revision to it, Lease updates get 409 and watches start from
// above the head; with bump the head jumps. It is fast and runs with
// -short.
func TestRVRollbackFixtures(t *testing.T) {
	if updateFixtures {
		t.Skip("AUDITLENS_E2E_UPDATE=1 rewrites the fixtures in this run; check them in the next")
	}
	for _, name := range []string{"rv-rollback", "rv-rollback-bumped"} {
		t.Run(name, func(t *testing.T) {
			exp := loadRollbackExpectation(t, name)
			rollbackObserve(t, filepath.Join(fixtureDir, name+".log"), exp)
			// auditlens decodes every line of it.
			rows, _ := loadFixture(t, name)
			if len(rows) == 0 {
				t.Fatal("no events")
			}
		})
	}
}

// checkRollbackFindings asserts the findings serve made of the webhook's
// events.
func checkRollbackFindings(t *testing.T, res *rollbackResult) {
	var got []detect.Finding
	var problems []string
	ok := poll(findingTimeout, time.Second, func() bool {
		var err error
		got, err = rollbackFindingsAPI(res.recv, res.exp.Cluster)
		if err != nil {
			problems = []string{err.Error()}
			return false
		}
		problems = matchRollback(res.exp, got)
		return len(problems) == 0 && time.Since(res.ended) > findingSettle
	})
	if !ok || len(problems) > 0 {
		t.Errorf("findings of cluster %s: %s\nscenario: %s\ngot %s", res.exp.Cluster, strings.Join(problems, "; "), res.exp.Description, describeRB(got))
		return
	}
	t.Logf("findings: %s", describeRB(got))
}

// checkRollbackScan asserts `auditlens scan` of the apiserver's own log.
func checkRollbackScan(t *testing.T, res *rollbackResult) {
	cmd := exec.Command(auditlensBin, "scan", "--format", "json", "--cluster", res.exp.Cluster, res.auditLog)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	var got []detect.Finding
	if jerr := json.Unmarshal(stdout.Bytes(), &got); jerr != nil {
		t.Fatalf("auditlens scan: %v, output not a JSON array of findings: %v\n%s", err, jerr, tail(stderr.String(), 20))
	}
	if problems := matchRollback(res.exp, got); len(problems) > 0 {
		t.Errorf("auditlens scan %s: %s\nscenario: %s\ngot %s", res.auditLog, strings.Join(problems, "; "), res.exp.Description, describeRB(got))
	} else {
		t.Logf("auditlens scan: %s", describeRB(got))
	}
	wantExit := 0
	for _, f := range got {
		if f.Severity.AtLeast(detect.Warning) {
			wantExit = 1
		}
	}
	if code := cmd.ProcessState.ExitCode(); code != wantExit {
		t.Errorf("auditlens scan exited %d, want %d\n%s", code, wantExit, tail(stderr.String(), 10))
	}
}

func rollbackFindingsAPI(r *receiver, cluster string) ([]detect.Finding, error) {
	code, body, err := r.get("/api/v1/findings?" + url.Values{"cluster": {cluster}}.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /api/v1/findings: %d %s", code, bytes.TrimSpace(body))
	}
	var out []detect.Finding
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var wrap struct {
			Findings []detect.Finding `json:"findings"`
		}
		err = json.Unmarshal(body, &wrap)
		out = wrap.Findings
	} else {
		err = json.Unmarshal(body, &out)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding GET /api/v1/findings: %w: %s", err, head([]string{string(body)}))
	}
	return out, nil
}

// matchRollback lists how got falls short of the rv-rollback contract for
// the scenario; nil when it holds.
//
// Without bump: exactly one critical rv-rollback finding, its
// previous_resource_version the head before the restore (between the
// highest resourceVersion the driver was answered and etcd's revision when
// the apiserver stopped), its resource_version the head after (from the
// snapshot's revision up to etcd's revision rollbackSoonAfter after the
// restart), with evidence of the heads, the watches from the future
// and the Lease conflicts. With bump: no critical finding of any detector;
// an rv-rollback finding at most informational.
func matchRollback(exp rollbackExpectation, got []detect.Finding) []string {
	rb := exp.RVRollback
	var problems []string
	var rollbacks []detect.Finding
	for _, f := range got {
		if f.Detector == rollback.Name {
			rollbacks = append(rollbacks, f)
		}
	}
	if rb.Bump > 0 {
		for _, f := range got {
			if f.Severity == detect.Critical {
				problems = append(problems, fmt.Sprintf("a bumped restore: critical %s finding %q", f.Detector, f.Title))
			}
			if f.Detector == rollback.Name && f.Severity != detect.Info {
				problems = append(problems, fmt.Sprintf("a bumped restore: %s rv-rollback finding %q, want at most info", f.Severity, f.Title))
			}
		}
		return problems
	}
	var critical []detect.Finding
	for _, f := range rollbacks {
		if f.Severity == detect.Critical {
			critical = append(critical, f)
		}
	}
	if len(critical) != 1 {
		return append(problems, fmt.Sprintf("%d critical rv-rollback findings, want exactly one", len(critical)))
	}
	f := critical[0]
	before, _ := strconv.ParseInt(f.Subjects.PreviousResourceVersion, 10, 64)
	after, _ := strconv.ParseInt(f.Subjects.ResourceVersion, 10, 64)
	if before < rb.DriverMaxBefore || before > rb.EtcdHeadBefore {
		problems = append(problems, fmt.Sprintf("previous_resource_version %q, want the head before the restore: between %d (the driver's highest) and %d (etcd's)",
			f.Subjects.PreviousResourceVersion, rb.DriverMaxBefore, rb.EtcdHeadBefore))
	}
	if after < rb.SnapshotRevision || after > rb.EtcdHeadSoonAfter {
		problems = append(problems, fmt.Sprintf("resource_version %q, want the head after the restore: between %d (the snapshot's) and %d (etcd's %s after the restart)",
			f.Subjects.ResourceVersion, rb.SnapshotRevision, rb.EtcdHeadSoonAfter, rollbackSoonAfter))
	}
	roles := map[string]int{}
	for _, e := range f.Evidence {
		roles[e.Role]++
	}
	for _, role := range []string{rollback.RoleHeadBefore, rollback.RoleHeadAfter, rollback.RoleFutureWatch, rollback.RoleConflict} {
		if roles[role] == 0 {
			problems = append(problems, fmt.Sprintf("no evidence with role %s (roles %v)", role, roles))
		}
	}
	return problems
}

func describeRB(fs []detect.Finding) string {
	if len(fs) == 0 {
		return "no findings"
	}
	var b strings.Builder
	for _, f := range fs {
		roles := map[string]int{}
		for _, e := range f.Evidence {
			roles[e.Role]++
		}
		keys := make([]string, 0, len(roles))
		for k := range roles {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var rs []string
		for _, k := range keys {
			rs = append(rs, fmt.Sprintf("%s×%d", k, roles[k]))
		}
		fmt.Fprintf(&b, "\n  %s %s [%s] rv %s→%s objects=%d evidence=%s: %s", f.Detector, f.Severity, f.ID,
			f.Subjects.PreviousResourceVersion, f.Subjects.ResourceVersion, len(f.Objects), strings.Join(rs, ","), f.Title)
	}
	return b.String()
}

// checkRollbackEvents is checkEvents for a cluster whose apiserver was
// stopped while the controller-manager kept watching. With
// --shutdown-send-retry-after the apiserver stops its webhook backend once
// the requests in flight have drained, and ends the watches still open
// about 2 s later: the ResponseComplete of such a watch goes to the log
// file and, racing the backend's shutdown, is at times neither sent nor
// announced as dropped (once in ten stops, one controller-manager watch).
// Those, and only those, may be missing from auditlens: the
// ResponseComplete of a watch that ended while an apiserver was stopping
// (stops holds the windows, SIGTERM to exit).
func checkRollbackEvents(t *testing.T, recv *receiver, c *cluster, stops [][2]time.Time) {
	t.Helper()
	want, err := fileKeys(c.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := apiserverDrops(c.apiserver.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for k := range dropped {
		if want[k] == 0 {
			t.Errorf("the apiserver reports dropping %s/%s, which is not in its audit log", k.auditID, k.stage)
		}
		delete(want, k)
	}
	excusable := map[eventKey]bool{}
	for _, e := range readRBEvents(t, c.auditLog) {
		if e.Verb != "watch" || e.Stage != "ResponseComplete" {
			continue
		}
		for _, w := range stops {
			if !e.StageTimestamp.Before(w[0]) && !e.StageTimestamp.After(w[1]) {
				excusable[eventKey{e.AuditID, e.Stage}] = true
			}
		}
	}
	var diff string
	var lost []string
	ok := poll(90*time.Second, 500*time.Millisecond, func() bool {
		stored, err := recv.storedKeys(c.name)
		if err != nil {
			diff = err.Error()
			return false
		}
		w := make(map[eventKey]int, len(want))
		lost = lost[:0]
		for k, n := range want {
			if excusable[k] && stored[k] == 0 {
				lost = append(lost, k.auditID)
				continue
			}
			w[k] = n
		}
		diff = diffKeys(w, stored)
		return diff == ""
	})
	if !ok {
		t.Errorf("events stored by auditlens differ from the apiserver's audit log: %s\nauditlens log:\n%s", diff, recv.proc.logTail(20))
		return
	}
	t.Logf("auditlens stored the %d events of the apiserver's audit log, each once (the apiserver dropped %d more at its shutdowns, "+
		"and %d watch ends at a shutdown without saying so: %v)", len(want)-len(lost), len(dropped), len(lost), lost)
}
