package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const header = "apiVersion: audit.k8s.io/v1\nkind: Policy\n"

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		line int    // 0: no line expected
		want string // substring of the error
	}{
		{"empty", "", 0, "empty document"},
		{"syntax error names its line", header + "rules:\n- level: None\n  users: [a\n", 5, "line 5"},
		{"bad indentation", header + "rules:\n- level: None\n   verbs: [get]\n", 5, "line 5"},
		{"not a mapping", "- a\n- b\n", 0, "want a mapping, got a list"},
		{"missing apiVersion", "kind: Policy\nrules: [{level: None}]\n", 0, "apiVersion: missing"},
		{"other apiVersion", "apiVersion: v1\nkind: Policy\nrules: [{level: None}]\n", 0, `apiVersion: "v1"`},
		{"other kind", "apiVersion: audit.k8s.io/v1\nkind: ConfigMap\nrules: [{level: None}]\n", 0, `kind: "ConfigMap"`},
		{"no rules", header, 0, "no rules"},
		{"empty rules", header + "rules: []\n", 0, "no rules"},
		{"rules not a list", header + "rules: {level: None}\n", 0, "rules: want a list"},
		{"null rule", header + "rules:\n-\n", 0, "rules[0]: want a mapping, got null"},
		{"missing level", header + "rules:\n- verbs: [get]\n", 0, "rules[0].level: missing"},
		{"unknown level", header + "rules:\n- level: Everything\n", 0, `rules[0].level: "Everything"`},
		{"level of the wrong type", header + "rules:\n- level: None\n- level: 3\n", 0, "rules[1].level: want a string, got a number"},
		{"verbs not a list", header + "rules:\n- level: None\n  verbs: get\n", 0, "rules[0].verbs: want a list of strings, got a string"},
		{"verb of the wrong type", header + "rules:\n- level: None\n  verbs: [get, 1]\n", 0, "rules[0].verbs[1]: want a string, got a number"},
		{"users with a boolean (YAML 1.1 yes)", header + "rules:\n- level: None\n  users: [yes]\n", 0, "rules[0].users[0]: want a string, got a boolean"},
		{"unknown stage", header + "omitStages: [RequestRecieved]\nrules:\n- level: None\n", 0, `omitStages[0]: "RequestRecieved"`},
		{"unknown rule stage", header + "rules:\n- level: None\n  omitStages: [Done]\n", 0, `rules[0].omitStages[0]: "Done"`},
		{"URL without slash", header + "rules:\n- level: None\n  nonResourceURLs: [healthz]\n", 0, "must begin with '/'"},
		{"wildcard not last", header + "rules:\n- level: None\n  nonResourceURLs: [\"/a*/b\"]\n", 0, "may only be the last"},
		{"group with its version", header + "rules:\n- level: None\n  resources: [{group: rbac.authorization.k8s.io/v1}]\n", 0, "rules[0].resources[0].group"},
		{"resourceNames without resources", header + "rules:\n- level: None\n  resources: [{group: \"\", resourceNames: [a]}]\n", 0, "resourceNames need at least one resource"},
		{"resources and URLs", header + "rules:\n- level: None\n  namespaces: [a]\n  nonResourceURLs: [/x]\n", 0, "both resources"},
		{"omitManagedFields not a boolean", header + "rules:\n- level: None\n  omitManagedFields: sure\n", 0, "want true or false"},
		{"field names are case-sensitive", header + "rules:\n- Level: None\n", 0, "rules[0].level: missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.src))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.src)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *ParseError wrapping ErrInvalid", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if pe.Line != c.line {
				t.Errorf("error %q: line %d, want %d", err, pe.Line, c.line)
			}
		})
	}
}

func TestParseWarnings(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown field: a typo widens the rule", header + "rules:\n- level: None\n  verb: [watch]\n", "rules[0].verb: unknown field"},
		{"unknown top-level field", header + "rule: []\nrules:\n- level: None\n", "rule: unknown field"},
		{"unknown group field", header + "rules:\n- level: None\n  resources: [{group: \"\", resource: [pods]}]\n", "rules[0].resources[0].resource: unknown field"},
		{"duplicate key names its line", header + "rules:\n- level: None\n  level: Metadata\n", "line 5"},
		{"v1beta1", "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n", "refused by kube-apiserver 1.24"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.src))
			if err != nil {
				t.Fatalf("kube-apiserver loads this policy (leniently), Parse refused it: %v", err)
			}
			if !strings.Contains(strings.Join(p.Warnings, "\n"), c.want) {
				t.Errorf("warnings %q do not say %q", p.Warnings, c.want)
			}
		})
	}
	// The last of duplicate keys wins, as in the apiserver.
	p := mustParse(t, header+"rules:\n- level: None\n  level: Metadata\n")
	if p.Rules[0].Level != "Metadata" {
		t.Errorf("duplicate level: got %q, want the last one, Metadata", p.Rules[0].Level)
	}
}

func TestParseJSONAndNulls(t *testing.T) {
	p := mustParse(t, `{"apiVersion":"audit.k8s.io/v1","kind":"Policy","metadata":{"name":"x"},"omitStages":null,
	  "rules":[{"level":"Metadata","users":null,"resources":[{"group":"","resources":["pods"]}],"omitManagedFields":true}]}`)
	if len(p.Rules) != 1 || p.Rules[0].Level != "Metadata" || len(p.Warnings) != 0 {
		t.Errorf("got %+v", p)
	}
}

func TestParsePublished(t *testing.T) {
	for file, rules := range map[string]int{
		"testdata/k8s-docs-example.yaml":     9,
		"testdata/gce-configure-helper.yaml": 17,
		"testdata/falco-k8saudit.yaml":       11,
		"../deploy/audit-policy.yaml":        4,
	} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rules) != rules || len(p.Warnings) != 0 || p.APIVersion != V1 {
				t.Errorf("%d rules, warnings %q, apiVersion %s; want %d rules, no warnings, %s", len(p.Rules), p.Warnings, p.APIVersion, rules, V1)
			}
		})
	}
}
