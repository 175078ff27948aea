package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The findings checks depend on the detectors (issue 3): GET
// /api/v1/findings?cluster= and `auditlens scan`. While either is missing,
// its checks skip with a message; the event checks always run.

const (
	// findingTimeout bounds the wait for an expected finding to appear.
	findingTimeout = 2 * time.Minute
	// findingSettle is how long after a scenario ended a detector that must
	// stay silent is given to speak up.
	findingSettle = 20 * time.Second
)

func checkFindings(t *testing.T, res *scenarioResult) {
	exp := res.exp
	if _, err := res.recv.findings(exp.Cluster); errors.Is(err, errNoFindingsAPI) {
		t.Skipf("finding checks skipped: %v by this auditlens (the detectors of issue 3 are not in yet)", err)
	}
	var got []finding
	var problems []string
	ok := poll(findingTimeout, time.Second, func() bool {
		var err error
		got, err = res.recv.findings(exp.Cluster)
		if err != nil {
			problems = []string{err.Error()}
			return false
		}
		problems = matchFindings(exp, got)
		return len(problems) == 0 && time.Since(res.ended) > findingSettle
	})
	if !ok || len(problems) > 0 {
		t.Errorf("findings of cluster %s: %s\nscenario: %s\ngot %s", exp.Cluster, strings.Join(problems, "; "), exp.Description, describe(got))
		return
	}
	t.Logf("findings: %s", describe(got))
}

// checkScan runs `auditlens scan --format json` over the scenario's audit
// log: the same detectors over the whole span, deterministically.
func checkScan(t *testing.T, res *scenarioResult) {
	got := scanLogs(t, res.exp.Cluster, res.auditLog)
	if problems := matchFindings(res.exp, got); len(problems) > 0 {
		t.Errorf("auditlens scan %s: %s\nscenario: %s\ngot %s", res.auditLog, strings.Join(problems, "; "), res.exp.Description, describe(got))
	}
}

// scanLogs runs `auditlens scan --format json` over the audit logs, checks
// its exit status against the findings' severities and returns them, their
// cluster set to cluster.
func scanLogs(t *testing.T, cluster string, logs ...string) []finding {
	t.Helper()
	cmd := exec.Command(auditlensBin, append([]string{"scan", "--format", "json"}, logs...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee != nil && ee.ExitCode() == 2 && strings.Contains(stderr.String(), `unknown command "scan"`) {
		t.Skipf("scan checks skipped: this auditlens has no scan command (issue 3): %s", firstLine(stderr.String()))
	}
	var got []finding
	if jerr := json.Unmarshal(stdout.Bytes(), &got); jerr != nil {
		t.Fatalf("auditlens scan: %v, output not a JSON array of findings: %v\n%s\n%s", err, jerr, head([]string{stdout.String()}), tail(stderr.String(), 20))
	}
	for i := range got {
		got[i].Cluster = cluster
	}
	// scan exits 1 when a finding is warning or above, 0 when clean.
	wantExit := 0
	for _, f := range got {
		if f.Severity == "warning" || f.Severity == "critical" {
			wantExit = 1
		}
	}
	if code := cmd.ProcessState.ExitCode(); code != wantExit {
		t.Errorf("auditlens scan exited %d, want %d for findings %s\n%s", code, wantExit, describe(got), tail(stderr.String(), 10))
	}
	return got
}

// matchFindings lists how got falls short of exp; nil when it matches.
func matchFindings(exp expectation, got []finding) []string {
	var problems []string
	check := func(detector string, want *expectedFinding) {
		var candidates []finding
		for _, f := range got {
			if f.Detector == detector {
				candidates = append(candidates, f)
			}
		}
		if len(candidates) == 0 {
			problems = append(problems, fmt.Sprintf("no %s finding", detector))
			return
		}
		if want.Only {
			var same []string
			for _, f := range candidates {
				if f.Subjects.User == want.User && f.Subjects.Resource == want.Resource {
					same = append(same, fmt.Sprintf("%q (rv %s)", f.Title, f.Subjects.ResourceVersion))
				}
			}
			if len(same) != 1 {
				problems = append(problems, fmt.Sprintf("%d %s findings about %s's %s, want exactly one: %s",
					len(same), detector, want.User, want.Resource, strings.Join(same, ", ")))
			}
		}
		var best []string
		for _, f := range candidates {
			p := matchFinding(f, want)
			if len(p) == 0 {
				return
			}
			if best == nil || len(p) < len(best) {
				best = p
			}
		}
		problems = append(problems, fmt.Sprintf("no %s finding matches: %s", detector, strings.Join(best, "; ")))
	}
	if exp.WatchLoop != nil {
		check("watch-loop", exp.WatchLoop)
	}
	if exp.RVRegression != nil {
		check("watch-rv-regression", exp.RVRegression)
	}
	if exp.RelistLoop != nil {
		check("relist-loop", exp.RelistLoop)
	}
	for _, f := range got {
		if slices.Contains(exp.Silent, f.Detector) {
			problems = append(problems, fmt.Sprintf("unexpected %s finding %q (%s, %s)", f.Detector, f.Title, f.Subjects.User, f.Subjects.ResourceVersion))
		}
		if slices.Contains(exp.AtMostInfo, f.Detector) && f.Severity != "info" {
			problems = append(problems, fmt.Sprintf("unexpected %s %s finding %q", f.Severity, f.Detector, f.Title))
		}
	}
	problems = append(problems, matchHeartbeat(exp, got)...)
	return problems
}

func matchFinding(f finding, want *expectedFinding) []string {
	var p []string
	eq := func(field, got, want string) {
		if want != "" && got != want {
			p = append(p, fmt.Sprintf("%s %q, want %q", field, got, want))
		}
	}
	eq("subjects.user", f.Subjects.User, want.User)
	eq("subjects.user_agent", f.Subjects.UserAgent, want.UserAgent)
	eq("subjects.resource", f.Subjects.Resource, want.Resource)
	eq("subjects.resource_version", f.Subjects.ResourceVersion, want.ResourceVersion)
	has := func(o objectRef) bool {
		for _, g := range f.Objects {
			if g.Resource == o.Resource && g.Namespace == o.Namespace && g.Name == o.Name {
				return true
			}
		}
		return false
	}
	for _, o := range want.Objects {
		if !has(o) {
			p = append(p, fmt.Sprintf("objects lack %s %s/%s", o.Resource, o.Namespace, o.Name))
		}
	}
	for _, o := range want.NotObjects {
		if has(o) {
			p = append(p, fmt.Sprintf("objects hold %s %s/%s", o.Resource, o.Namespace, o.Name))
		}
	}
	if len(f.Evidence) == 0 {
		p = append(p, "no evidence")
	}
	switch {
	case want.PartOfLoop:
		if f.Severity != "info" || !strings.HasPrefix(f.Subjects.PartOf, "watch-loop-") {
			p = append(p, fmt.Sprintf("severity %q, part of %q; want info, part of the watch-loop finding", f.Severity, f.Subjects.PartOf))
		}
	case f.Severity != "warning" && f.Severity != "critical":
		p = append(p, fmt.Sprintf("severity %q, want warning or critical", f.Severity))
	}
	return p
}

func describe(fs []finding) string {
	if len(fs) == 0 {
		return "no findings"
	}
	var b strings.Builder
	for _, f := range fs {
		var objs []string
		for i, o := range f.Objects {
			if i == 12 {
				// A wave's evicted Pods run to dozens: the failure's
				// first lines must survive a truncated CI log.
				objs = append(objs, fmt.Sprintf("… %d more", len(f.Objects)-i))
				break
			}
			objs = append(objs, o.Resource+" "+o.Namespace+"/"+o.Name)
		}
		fmt.Fprintf(&b, "\n  %s %s [%s] user=%q ua=%q resource=%q rv=%q objects=%v evidence=%d: %s",
			f.Detector, f.Severity, f.ID, f.Subjects.User, f.Subjects.UserAgent, f.Subjects.Resource,
			f.Subjects.ResourceVersion, objs, len(f.Evidence), f.Title)
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
