package detecttest

// The checks that hold the detectors' findings to the generator's truth
// (Trace.Want) and to ScenarioCases.

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/gen/scenario"
)

func CheckRelistLoops(t *testing.T, want []scenario.RelistLoop, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s (%s %s, %d turns)", f.Title, f.Subjects.User, f.Subjects.Resource, f.Subjects.Iterations)
		}
		t.Fatalf("%d relist-loop findings, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(f detect.Finding) bool {
			return f.Subjects.User == w.Client.User && f.Subjects.Resource == w.Resource
		})
		if i < 0 {
			t.Errorf("no relist-loop finding for %s on %s", w.Client.User, w.Resource)
			continue
		}
		f := got[i]
		if f.Detector != relist.LoopName || f.Subjects.Iterations != w.Turns {
			t.Errorf("%s on %s: detector %s, %d turns, want %d", w.Client.User, w.Resource, f.Detector, f.Subjects.Iterations, w.Turns)
		}
		wantSev := detect.Warning
		if f.LastSeen.Sub(f.FirstSeen) >= 15*time.Minute {
			wantSev = detect.Critical
		}
		if f.Severity != wantSev || f.Confidence < 0.7 || f.Confidence > 1 {
			t.Errorf("%s: severity %s confidence %v over %s", f.ID, f.Severity, f.Confidence, f.LastSeen.Sub(f.FirstSeen))
		}
		if len(w.Instances) == 1 && f.Subjects.SourceIP != w.Instances[0] || len(w.Instances) > 1 && f.Subjects.SourceIP != "" {
			t.Errorf("%s: source IP %q, instances %v", f.ID, f.Subjects.SourceIP, w.Instances)
		}
		watches := map[string]bool{}
		relists := 0
		for _, e := range f.Evidence {
			switch e.Role {
			case relist.RoleShortWatch:
				watches[e.AuditID] = true
				if e.Verb != "watch" || e.User != w.Client.User || e.Resource != w.Resource {
					t.Errorf("short-watch evidence %+v", e)
				}
			case detect.RoleRelist:
				relists++
			default:
				t.Errorf("evidence role %q", e.Role)
			}
		}
		for _, e := range f.Evidence {
			if e.Role == detect.RoleRelist && !watches[e.WatchAuditID] {
				t.Errorf("relist %s follows %q, not a short watch of the evidence", e.AuditID, e.WatchAuditID)
			}
		}
		if relists != w.Turns || len(watches) != w.Turns {
			t.Errorf("%d relists and %d short watches in the evidence, want %d of each", relists, len(watches), w.Turns)
		}
	}
}

func CheckRelistHerds(t *testing.T, want []scenario.RelistHerd, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s", f.Title)
		}
		t.Fatalf("%d relist-herd findings, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(f detect.Finding) bool { return f.Subjects.Resource == w.Resource })
		if i < 0 {
			t.Errorf("no relist-herd finding for %s", w.Resource)
			continue
		}
		f := got[i]
		users := map[string]bool{}
		for _, e := range f.Evidence {
			if e.Role != detect.RoleRelist || e.Resource != w.Resource {
				t.Errorf("evidence %+v", e)
			}
			users[e.User] = true
		}
		if len(users) != w.Clients || len(f.Evidence) != w.Clients {
			t.Errorf("herd on %s: %d clients in %d evidence items, want %d", w.Resource, len(users), len(f.Evidence), w.Clients)
		}
		if !f.FirstSeen.Equal(w.At.Truncate(time.Microsecond)) || f.Severity != detect.Warning || f.Subjects.PartOf != "" {
			t.Errorf("herd on %s: first seen %s (want %s), severity %s, part of %q", w.Resource, f.FirstSeen, w.At, f.Severity, f.Subjects.PartOf)
		}
	}
}

func CheckRollbacks(t *testing.T, tr scenario.Trace, got []detect.Finding) {
	t.Helper()
	for _, f := range got {
		t.Logf("found %s %s: %s\n%s", f.Severity, f.ID, f.Title, f.Summary)
	}
	var want []scenario.Restore
	for _, r := range tr.Want.Restores {
		if !r.Bumped {
			want = append(want, r)
		}
	}
	var critical, info []detect.Finding
	for _, f := range got {
		if f.Detector != rollback.Name {
			t.Errorf("detector %s", f.Detector)
		}
		switch f.Severity {
		case detect.Info:
			info = append(info, f)
		default:
			critical = append(critical, f)
		}
	}
	if len(critical) != len(want) {
		t.Fatalf("%d rollback findings, want %d", len(critical), len(want))
	}
	if len(info) > len(tr.Want.Restores)-len(want) {
		t.Errorf("%d info findings for %d restores with bump", len(info), len(tr.Want.Restores)-len(want))
	}
	for i, w := range want {
		f := critical[i]
		if f.Severity != detect.Critical {
			t.Errorf("severity %s", f.Severity)
		}
		if f.Subjects.ResourceVersion != w.After {
			t.Errorf("after %s, want %s", f.Subjects.ResourceVersion, w.After)
		}
		before, _ := strconv.ParseUint(f.Subjects.PreviousResourceVersion, 10, 64)
		wb, _ := strconv.ParseUint(w.Before, 10, 64)
		if before > wb || before+1000 < wb {
			t.Errorf("before %d, want about %d", before, wb)
		}
		roles := map[string]int{}
		for _, e := range f.Evidence {
			roles[e.Role]++
		}
		if roles[rollback.RoleHeadBefore] != 1 || roles[rollback.RoleHeadAfter] != 1 {
			t.Errorf("roles %v", roles)
		}
		for _, p := range w.Stuck {
			if !strings.Contains(f.Summary, p) {
				t.Errorf("summary does not name stuck %s", p)
			}
		}
		var objs []string
		for _, o := range f.Objects {
			objs = append(objs, o.Resource+" "+o.Namespace+"/"+o.Name)
		}
		for _, c := range w.Churned {
			if !slicesContains(objs, c) {
				t.Errorf("objects %v lack %s", objs, c)
			}
		}
		t.Logf("roles %v objects %d conflicts %d relists %d", roles, len(f.Objects), f.Subjects.Conflicts, f.Subjects.Relists)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func CheckHeartbeat(t *testing.T, want []scenario.HeartbeatWave, got []detect.Finding) {
	t.Helper()
	if len(got) != len(want) {
		for _, f := range got {
			t.Logf("found: %s %s", f.Severity, f.Title)
		}
		t.Fatalf("%d heartbeat-loss findings, want %d", len(got), len(want))
	}
	for i, w := range want {
		f := got[i]
		if f.Detector != heartbeatloss.Name {
			t.Errorf("detector %s", f.Detector)
		}
		if w.Unconfirmed {
			if f.Severity != detect.Info || !strings.Contains(f.Title, "did not react") {
				t.Errorf("nodes of a lost apiserver feed reported as %s %q", f.Severity, f.Title)
			}
			var nodes []string
			for _, o := range f.Objects {
				nodes = append(nodes, o.Name)
			}
			if !slices.Equal(nodes, w.Nodes) || !f.FirstSeen.Equal(w.Start) {
				t.Errorf("nodes %v from %s, want %v from %s", nodes, f.FirstSeen, w.Nodes, w.Start)
			}
			continue
		}
		if w.FeedGap {
			if f.Severity != detect.Info || !strings.HasPrefix(f.Title, "Audit feed gap") {
				t.Errorf("feed silence reported as %s %q", f.Severity, f.Title)
			}
			if f.FirstSeen.Before(w.Start.Add(-time.Second)) || f.LastSeen.After(w.Until.Add(time.Second)) {
				t.Errorf("feed gap [%s, %s], the feed was silent over [%s, %s)", f.FirstSeen, f.LastSeen, w.Start, w.Until)
			}
			continue
		}
		var nodes, pods []string
		for _, o := range f.Objects {
			switch o.Resource {
			case "nodes":
				nodes = append(nodes, o.Name)
			case "pods":
				pods = append(pods, o.Namespace+"/"+o.Name)
			default:
				t.Errorf("object %v", o)
			}
		}
		if !slices.Equal(nodes, w.Nodes) {
			t.Errorf("nodes %v, want %v", nodes, w.Nodes)
		}
		if !slices.Equal(pods, w.Evicted) {
			t.Errorf("evicted pods %v, want %v", pods, w.Evicted)
		}
		s := f.Subjects
		if s.NodesLost != len(w.Nodes) || s.NodesSeen != w.Seen || s.PodsEvicted != len(w.Evicted) {
			t.Errorf("subjects: %d of %d nodes lost, %d pods evicted; want %d of %d, %d", s.NodesLost, s.NodesSeen, s.PodsEvicted,
				len(w.Nodes), w.Seen, len(w.Evicted))
		}
		if !f.FirstSeen.Equal(w.Start) {
			t.Errorf("first seen %s, want the first lost node's last heartbeat %s", f.FirstSeen, w.Start)
		}
		wantSev := detect.Warning
		if len(w.Evicted) > 0 {
			wantSev = detect.Critical
		}
		if f.Severity != wantSev {
			t.Errorf("severity %s, want %s", f.Severity, wantSev)
		}
		last, back := map[string]bool{}, map[string]time.Time{}
		roles := map[string]int{}
		for _, e := range f.Evidence {
			roles[e.Role]++
			switch e.Role {
			case heartbeatloss.RoleLastHeartbeat:
				last[e.Name] = true
			case heartbeatloss.RoleHeartbeatResumed:
				back[e.Name] = e.Time
			case heartbeatloss.RoleNotReady, heartbeatloss.RoleTaint:
				if !slices.Contains(w.Nodes, e.Name) {
					t.Errorf("%s evidence for %s, not a lost node", e.Role, e.Name)
				}
			case detect.RoleRelist:
				if e.Verb != "list" || !slices.Contains(w.Nodes, strings.TrimPrefix(e.User, "system:node:")) {
					t.Errorf("relist evidence %+v", e)
				}
			case heartbeatloss.RoleEviction:
			default:
				t.Errorf("evidence role %q", e.Role)
			}
		}
		if len(last) != len(w.Nodes) {
			t.Errorf("last heartbeats of %d nodes, want %d", len(last), len(w.Nodes))
		}
		for n, bt := range w.Back {
			if got, ok := back[n]; !ok || !got.Equal(bt.Truncate(time.Microsecond)) {
				t.Errorf("%s back at %s, want %s", n, got, bt)
			}
		}
		if len(back) != len(w.Back) {
			t.Errorf("%d nodes back, want %d", len(back), len(w.Back))
		}
		if w.NotReady && roles[heartbeatloss.RoleNotReady] == 0 {
			t.Errorf("no not-ready evidence")
		}
		if len(w.Back) > 0 && roles[detect.RoleRelist] == 0 {
			t.Errorf("no relist evidence")
		}
		for _, s := range []string{"48638", "--node-monitor-grace-period", "--unhealthy-zone-threshold", "load balancer"} {
			if !strings.Contains(f.Summary+f.Remediation, s) {
				t.Errorf("summary and remediation do not mention %q", s)
			}
		}
	}
}

// CheckLoops holds watch-loop findings to the generator's truth: the
// client, the static resourceVersion, every churned object, the number of
// iterations, and each churn event linked to the restart it followed.
func CheckLoops(t *testing.T, want []scenario.Loop, got []detect.Finding) {
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
		if names := ObjectNames(f); !slices.Equal(names, w.Objects) {
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

// CheckRegressions holds watch-rv-regression findings to the truth.
func CheckRegressions(t *testing.T, want []scenario.Regression, got []detect.Finding) {
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
