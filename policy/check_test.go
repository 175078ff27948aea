package policy_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/policy"
)

func verdicts(rep policy.Report) map[string]policy.Verdict {
	out := map[string]policy.Verdict{}
	for _, d := range rep.Detectors {
		out[d.Detector] = d.Verdict
	}
	return out
}

// hidden lists "detector/need: probe @rules[i]" for every probe a policy
// hides.
func hidden(rep policy.Report) []string {
	var out []string
	for _, d := range rep.Detectors {
		for _, n := range d.Needs {
			for _, p := range n.Probes {
				if !p.Seen {
					out = append(out, d.Detector+"/"+n.ID+": "+p.Probe+" @rules["+strconv.Itoa(p.Rule)+"]")
				}
			}
		}
	}
	return out
}

// TestPublishedPolicies holds the verdicts on published policies. All
// three drop kube-proxy's watches of Services and Endpoints at level None
// (the docs example's rule 3, Falco's rule 4, GCE's rule 0): kube-proxy's
// own watch regressions go unseen, but kube-controller-manager's watches
// and the endpoints controller's writes are recorded (at Request or
// RequestResponse by each policy's core-group rule), and the watches of
// kube-controller-manager and kubelets show newer resourceVersions, so
// watch-loop sees the incident. None sets a Service write at RequestResponse in the docs
// and Falco examples (their core-group rule is Request), which only
// removes one of the alternatives.
func TestPublishedPolicies(t *testing.T) {
	kubeProxy := func(rule int) []string {
		r := "@rules[" + strconv.Itoa(rule) + "]"
		return []string{
			"watch-loop/rv-advanced: kube-proxy watches endpoints of all namespaces " + r,
			"watch-rv-regression/other-watches: kube-proxy watches services of all namespaces " + r,
			"watch-rv-regression/other-watches: kube-proxy watches endpoints of all namespaces " + r,
		}
	}
	noResponseBody := "watch-loop/rv-advanced: a user creates services in namespace default @rules["
	cases := []struct {
		file       string
		loop, regr policy.Verdict
		hidden     []string
	}{
		{"testdata/k8s-docs-example.yaml", policy.OK, policy.Weakened, append(kubeProxy(3), noResponseBody+"7]")},
		{"testdata/falco-k8saudit.yaml", policy.OK, policy.Weakened, append(kubeProxy(4), noResponseBody+"9]")},
		{"testdata/gce-configure-helper.yaml", policy.OK, policy.Weakened, kubeProxy(0)},
		// Our own policy must let every detector see everything.
		{"../deploy/audit-policy.yaml", policy.OK, policy.OK, nil},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			rep := policy.Check(mustParse(t, string(data)), watchDetectors())
			want := map[string]policy.Verdict{watchloop.Name: c.loop, watchloop.RegressionName: c.regr}
			if got := verdicts(rep); !mapsEqual(got, want) {
				t.Errorf("verdicts %v, want %v", got, want)
			}
			got, wantHidden := hidden(rep), slices.Clone(c.hidden)
			slices.Sort(got)
			slices.Sort(wantHidden)
			if !slices.Equal(got, wantHidden) {
				t.Errorf("hidden probes:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(wantHidden, "\n  "))
			}
			if rep.Blinded {
				t.Error("Blinded set; no detector is blinded")
			}
			checkFixes(t, string(data), rep)
		})
	}
}

func mapsEqual(a, b map[string]policy.Verdict) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSyntheticPolicies covers the ways a policy blinds or weakens each
// detector.
func TestSyntheticPolicies(t *testing.T) {
	cases := []struct {
		name       string
		policy     string // after apiVersion and kind
		loop, regr policy.Verdict
		hidden     string // a substring of hidden(), when set
	}{
		{"everything at Metadata", "rules:\n- level: Metadata\n", policy.OK, policy.OK, ""},
		{"nothing audited", "rules:\n- level: None\n", policy.Blinded, policy.Blinded, ""},
		{"no rule matches resource requests", "rules:\n- level: Metadata\n  nonResourceURLs: ['*']\n", policy.Blinded, policy.Blinded, "@rules[-1]"},
		{"controller watches dropped", `rules:
- level: None
  users: [system:kube-controller-manager]
  verbs: [watch]
- level: Metadata
`, policy.Blinded, policy.Blinded, "watch-loop/static-watch: kube-controller-manager watches services of all namespaces @rules[0]"},
		{"every watch dropped", "rules:\n- level: None\n  verbs: [watch]\n- level: Metadata\n", policy.Blinded, policy.Blinded, ""},
		{"policy-wide omitStages ResponseComplete", "omitStages: [ResponseComplete]\nrules:\n- level: Metadata\n", policy.Blinded, policy.OK,
			"watch-loop/endpoints-churn: kube-controller-manager deletes endpoints in namespace default @rules[0]"},
		{"writes without ResponseComplete", `rules:
- level: RequestResponse
  verbs: [create, delete]
  omitStages: [ResponseComplete]
- level: Metadata
`, policy.Blinded, policy.OK, "watch-loop/endpoints-churn: endpoints controller (service account) deletes endpoints in namespace default @rules[0]"},
		{"service accounts dropped", "rules:\n- level: None\n  userGroups: [system:serviceaccounts]\n- level: Metadata\n", policy.Blinded, policy.Weakened,
			"watch-loop/endpoints-churn: endpoints controller (service account) deletes endpoints in namespace default @rules[0]"},
		{"node agents' watches dropped, no response bodies", `rules:
- level: None
  userGroups: [system:nodes]
  verbs: [watch]
- level: None
  users: [system:kube-proxy, system:serviceaccount:kube-system:kube-proxy]
  verbs: [watch]
- level: Metadata
`, policy.OK, policy.Weakened, "watch-rv-regression/other-watches: kubelet watches pods of all namespaces @rules[0]"},
		{"every watch but the static one dropped, no response bodies", `rules:
- level: Metadata
  users: [system:kube-controller-manager]
  verbs: [watch]
  resources: [{group: "", resources: [services]}]
- level: None
  verbs: [watch]
- level: Metadata
`, policy.Blinded, policy.Weakened, "watch-loop/rv-advanced: a user creates services in namespace default @rules[2]"},
		{"the apiserver's own requests dropped", "rules:\n- level: None\n  users: [system:apiserver]\n- level: Metadata\n", policy.Weakened, policy.OK,
			"watch-loop/apiserver-version: kube-apiserver (loopback) watches services of all namespaces @rules[0]"},
		{"Endpoints creates dropped", `rules:
- level: None
  verbs: [create]
  resources: [{group: "", resources: [endpoints]}]
- level: Metadata
`, policy.Weakened, policy.OK, "watch-loop/endpoints-recreate: kube-controller-manager creates endpoints in namespace default @rules[0]"},
		{"node agents' watches dropped, Service writes with bodies", `rules:
- level: None
  userGroups: [system:nodes]
  verbs: [watch]
- level: None
  users: [system:kube-proxy, system:serviceaccount:kube-system:kube-proxy]
  verbs: [watch]
- level: RequestResponse
  verbs: [create, update, patch, delete]
  resources: [{group: "", resources: [services]}]
- level: Metadata
`, policy.OK, policy.Weakened, "watch-rv-regression/other-watches: kubelet watches pods of all namespaces @rules[0]"},
		{"Service deletes dropped", `rules:
- level: None
  verbs: [delete]
  resources: [{group: "", resources: [services]}]
- level: Metadata
`, policy.Weakened, policy.OK, "watch-loop/owner-changes: a user deletes services in namespace default @rules[0]"},
		{"lists dropped", "rules:\n- level: None\n  verbs: [list]\n- level: Metadata\n", policy.OK, policy.Weakened,
			"watch-rv-regression/relists: kube-controller-manager lists services of all namespaces @rules[0]"},
		{"kube-system dropped", "rules:\n- level: None\n  namespaces: [kube-system]\n- level: Metadata\n", policy.OK, policy.OK, ""},
		{"cluster-scoped and all-namespace requests dropped", "rules:\n- level: None\n  namespaces: ['']\n- level: Metadata\n", policy.Blinded, policy.Blinded, ""},
		{"only ResponseComplete kept", "omitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n", policy.OK, policy.OK, ""},
		{"watches keep only RequestReceived", `rules:
- level: Metadata
  verbs: [watch]
  omitStages: [ResponseStarted, ResponseComplete]
- level: Metadata
`, policy.OK, policy.OK, ""},
		{"watches omit every stage", `omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [watch]
  omitStages: [ResponseStarted, ResponseComplete]
- level: Metadata
`, policy.Blinded, policy.Blinded, "watch-loop/static-watch"},
		{"omitting Panic changes nothing", "omitStages: [Panic]\nrules:\n- level: Metadata\n", policy.OK, policy.OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := header + c.policy
			rep := policy.Check(mustParse(t, src), watchDetectors())
			want := map[string]policy.Verdict{watchloop.Name: c.loop, watchloop.RegressionName: c.regr}
			if got := verdicts(rep); !mapsEqual(got, want) {
				t.Errorf("verdicts %v, want %v; hidden:\n  %s", got, want, strings.Join(hidden(rep), "\n  "))
			}
			if rep.Blinded != (c.loop == policy.Blinded || c.regr == policy.Blinded) {
				t.Errorf("Blinded %v", rep.Blinded)
			}
			if c.hidden != "" && !strings.Contains(strings.Join(hidden(rep), "\n"), c.hidden) {
				t.Errorf("hidden probes do not include %q:\n  %s", c.hidden, strings.Join(hidden(rep), "\n  "))
			}
			checkFixes(t, src, rep)
		})
	}
}

var (
	insertAt    = regexp.MustCompile(`insert before rules\[(\d+)\]:$`)
	removeStage = regexp.MustCompile(`^Remove (.+) from the policy's omitStages`)
)

// checkFixes applies every fix of the report to the policy, as a person
// would, and requires every need to be met afterwards.
func checkFixes(t *testing.T, src string, rep policy.Report) {
	t.Helper()
	p := mustParse(t, src)
	type insert struct {
		at   int
		yaml string
	}
	var inserts []insert
	for _, d := range rep.Detectors {
		for _, n := range d.Needs {
			if n.Met != (n.Fix == "") {
				t.Errorf("%s/%s: met %v, fix %q", d.Detector, n.ID, n.Met, n.Fix)
			}
			for _, line := range strings.Split(n.Fix, "\n") {
				if m := removeStage.FindStringSubmatch(line); m != nil {
					for _, s := range strings.Split(m[1], ", ") {
						p.OmitStages = slices.DeleteFunc(p.OmitStages, func(o auditv1.Stage) bool { return string(o) == s })
					}
				} else if m := insertAt.FindStringSubmatch(line); m != nil {
					at, _ := strconv.Atoi(m[1])
					inserts = append(inserts, insert{at: at})
				} else if strings.HasSuffix(line, "add at the end of rules:") {
					inserts = append(inserts, insert{at: len(p.Rules)})
				} else if line != "" {
					if len(inserts) == 0 {
						t.Fatalf("%s/%s: fix line %q before any insertion", d.Detector, n.ID, line)
					}
					inserts[len(inserts)-1].yaml += line + "\n"
				}
			}
		}
	}
	// Insert from the highest index down: every index names a rule of the
	// original policy.
	slices.SortStableFunc(inserts, func(a, b insert) int { return b.at - a.at })
	for _, in := range inserts {
		var rules []auditv1.PolicyRule
		if err := yaml.UnmarshalStrict([]byte(in.yaml), &rules); err != nil || len(rules) == 0 {
			t.Fatalf("the fix's rules do not decode (%v):\n%s", err, in.yaml)
		}
		p.Rules = slices.Insert(p.Rules, in.at, rules...)
	}
	after := policy.Check(p, watchDetectors())
	for _, d := range after.Detectors {
		if d.Verdict != policy.OK {
			t.Errorf("after applying the fixes %s is still %s; hidden:\n  %s", d.Detector, d.Verdict, strings.Join(hidden(after), "\n  "))
		}
	}
}
