package policy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run with -update after checking):\n--- got\n%s", path, got)
	}
}

const blindingPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseComplete]
rules:
- level: None
  users: [system:kube-controller-manager, system:kube-proxy]
  verbs: [watch]
- level: None
  resources: [{group: "", resources: [events]}]
- level: Metadata
  verb: [list]
`

func TestRender(t *testing.T) {
	docs, err := os.ReadFile("testdata/k8s-docs-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, src, format, golden string }{
		{"k8s-docs-example.yaml", string(docs), "text", "k8s-docs-example.text.golden"},
		{"k8s-docs-example.yaml", string(docs), "json", "k8s-docs-example.json.golden"},
		{"blinding.yaml", blindingPolicy, "text", "blinding.text.golden"},
	} {
		t.Run(c.golden, func(t *testing.T) {
			var b bytes.Buffer
			if err := policy.Render(&b, c.format, c.name, policy.Check(mustParse(t, c.src), watchDetectors())); err != nil {
				t.Fatal(err)
			}
			if c.format == "json" && !json.Valid(b.Bytes()) {
				t.Fatalf("invalid JSON:\n%s", b.Bytes())
			}
			golden(t, c.golden, b.Bytes())
		})
	}
	if err := policy.Render(&bytes.Buffer{}, "yaml", "x", policy.Report{}); err == nil {
		t.Error("Render accepted the format yaml")
	}
}
