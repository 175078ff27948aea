package policy_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/policy"
)

// exposures lists "resource body verbs@rules[i]" for each exposure.
func exposures(es []policy.Exposure) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Resource+" "+string(e.Body)+" "+strings.Join(e.Verbs, ",")+" "+strings.Join(e.Namespaces, ",")+"@"+e.RuleText[:strings.Index(e.RuleText, " ")])
	}
	return out
}

func TestSensitive(t *testing.T) {
	const head = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n"
	for _, tc := range []struct {
		name, rules string
		want        []string
	}{
		{"everything at Metadata", "- level: Metadata\n", nil},
		{"everything at Request: request bodies only", "- level: Request\n", []string{
			"secrets request create,update,patch default,kube-system@rules[0]",
			"configmaps request create,update,patch default,kube-system@rules[0]",
			"tokenreviews request create @rules[0]",
			"subjectaccessreviews request create @rules[0]",
		}},
		{"everything at RequestResponse: responses too (a token request's answer is the token)", "- level: RequestResponse\n", []string{
			"secrets request create,update,patch default,kube-system@rules[0]",
			"secrets response get,list default,kube-system@rules[0]",
			"configmaps request create,update,patch default,kube-system@rules[0]",
			"configmaps response get,list default,kube-system@rules[0]",
			"serviceaccounts/token response create default,kube-system@rules[0]",
			"tokenreviews request create @rules[0]",
			"subjectaccessreviews request create @rules[0]",
		}},
		{"secrets kept at Metadata first, the rest at RequestResponse",
			"- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [secrets, configmaps, serviceaccounts/token]\n" +
				"  - group: authentication.k8s.io\n    resources: [tokenreviews]\n" +
				"  - group: authorization.k8s.io\n    resources: [subjectaccessreviews]\n" +
				"- level: RequestResponse\n", nil},
		{"one namespace's secrets, one user",
			"- level: RequestResponse\n  users: [alice]\n  namespaces: [kube-system]\n  resources:\n  - group: \"\"\n    resources: [secrets]\n- level: Metadata\n",
			[]string{"secrets request create,update,patch kube-system@rules[0]", "secrets response get,list kube-system@rules[0]"}},
		{"bodies recorded but every stage omitted", "omitStages: [RequestReceived, ResponseStarted, ResponseComplete, Panic]\n- level: RequestResponse\n", nil},
		{"level None", "- level: None\n  resources:\n  - group: \"\"\n    resources: [secrets]\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := head + tc.rules
			if strings.HasPrefix(tc.rules, "omitStages") {
				first, rest, _ := strings.Cut(tc.rules, "\n")
				src = "apiVersion: audit.k8s.io/v1\nkind: Policy\n" + first + "\nrules:\n" + rest
			}
			p, err := policy.Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			got := exposures(policy.Sensitive(p))
			if !slices.Equal(got, tc.want) {
				t.Errorf("exposures:\n  got  %q\n  want %q", got, tc.want)
			}
			rep := policy.Check(p, nil)
			if (len(rep.Sensitive) > 0) != (rep.SensitiveFix != "") {
				t.Errorf("%d exposures with fix %q", len(rep.Sensitive), rep.SensitiveFix)
			}
			if len(rep.Sensitive) == 0 {
				return
			}
			// The proposed rule, put first, removes every exposure.
			fixed, err := policy.Parse([]byte(head + rep.SensitiveFix + "\n" + tc.rules))
			if err != nil {
				t.Fatalf("the fix does not parse: %v", err)
			}
			if left := exposures(policy.Sensitive(fixed)); len(left) > 0 {
				t.Errorf("with the fix first, still exposed: %q", left)
			}
		})
	}
}

// TestSensitivePublished holds what the published policies and ours
// record of secret-holding bodies.
func TestSensitivePublished(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"../deploy/audit-policy.yaml", nil},
		// "Log the request body of configmap changes in kube-system."
		{"testdata/k8s-docs-example.yaml", []string{"configmaps request create,update,patch kube-system@rules[5]"}},
		{"testdata/falco-k8saudit.yaml", []string{
			"configmaps request create,update,patch default@rules[7]",
			"configmaps request create,update,patch kube-system@rules[6]",
			"configmaps response get,list default@rules[7]",
		}},
		// GCE keeps secrets, configmaps and token reviews at Metadata,
		// but its catch-all for known groups records access reviews.
		{"testdata/gce-configure-helper.yaml", []string{"subjectaccessreviews request create @rules[15]"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policy.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if got := exposures(policy.Sensitive(p)); !slices.Equal(got, tc.want) {
				t.Errorf("exposures:\n  got  %q\n  want %q", got, tc.want)
			}
		})
	}
}
