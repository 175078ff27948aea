package detect_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/scenario"
)

// TestRVRollbackScenarios holds rv-rollback, with its default parameters,
// to every scenario's truth at both time scales: one critical finding per
// restore without bump, with the resourceVersions before and after and
// the stuck programs; at most an info finding for a restore with bump;
// nothing anywhere else.
func TestRVRollbackScenarios(t *testing.T) {
	st := engine(t)
	for _, sc := range scenario.All() {
		tc, ok := scenarioCases[sc.Name]
		if !ok {
			t.Errorf("scenario %s has no expectations in scenarioCases", sc.Name)
			continue
		}
		for _, scale := range scenario.Scales {
			t.Run(sc.Name+"/"+scale.Name, func(t *testing.T) {
				tr, w := importScenario(t, st, sc, scale)
				bumped := 0
				for _, r := range tr.Want.Restores {
					if r.Bumped {
						bumped++
					}
				}
				if len(tr.Want.Restores)-bumped != tc.rollbacks || bumped != tc.restores {
					t.Fatalf("the generator put %d restores (%d with bump) in %s, the case expects %d rollbacks and %d restores",
						len(tr.Want.Restores), bumped, tr, tc.rollbacks, tc.restores)
				}
				got := evaluate(t, detect.NewRVRollback(detect.RVRollbackConfig{}), st, w)
				checkRollbacks(t, tr, got)
			})
		}
	}
}

func checkRollbacks(t *testing.T, tr scenario.Trace, got []detect.Finding) {
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
		if f.Detector != detect.RVRollbackName {
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
		if roles[detect.RoleHeadBefore] != 1 || roles[detect.RoleHeadAfter] != 1 {
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
