package policy_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/policy"
)

// FuzzCheck feeds arbitrary bytes to the parser and, when they parse,
// checks and renders the policy: untrusted input must never panic.
func FuzzCheck(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range append(files, "../deploy/audit-policy.yaml") {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"", "null", "[]", "{}", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None}]\n",
		header + "rules:\n- level: Metadata\n  resources: [{group: '*', resources: ['*/status', 'pods/*'], resourceNames: ['']}]\n",
		header + "omitStages: [RequestReceived, ResponseStarted, ResponseComplete, Panic]\nrules:\n- level: RequestResponse\n  nonResourceURLs: ['*']\n",
		header + "rules:\n- level: None\n  level: Metadata\n  users: &a [x]\n  userGroups: *a\n",
		blindingPolicy,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			if _, ok := err.(*policy.ParseError); !ok {
				t.Fatalf("error %v is a %T, not a *ParseError", err, err)
			}
			return
		}
		if len(p.Rules) == 0 {
			t.Fatal("a parsed policy without rules")
		}
		rep := policy.Check(p, watchDetectors())
		for _, format := range policy.Formats {
			if err := policy.Render(io.Discard, format, "fuzz", rep); err != nil {
				t.Fatal(err)
			}
		}
	})
}
