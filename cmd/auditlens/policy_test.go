package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/policy"
)

func TestPolicyCheckCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	blinding := write("blinding.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  verbs: [watch]\n- level: Metadata\n")
	broken := write("broken.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  users: [a\n")
	invalid := write("invalid.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Some\n")
	cases := []struct {
		name    string
		args    []string
		code    int
		stdout  string // substrings
		stderr  string
		noStdio bool // stdout must be empty
	}{
		{"our policy passes", []string{"policy", "check", "../../deploy/audit-policy.yaml"}, 0,
			"Result: watch-loop ok, watch-rv-regression ok", "", false},
		{"the docs example weakens watch-rv-regression only", []string{"policy", "check", "../../policy/testdata/k8s-docs-example.yaml"}, 0,
			"watch-rv-regression: WEAKENED", "", false},
		{"a blinding policy exits 1", []string{"policy", "check", blinding}, 1, "watch-loop: BLINDED", "", false},
		{"a YAML error exits 2 naming the line", []string{"policy", "check", broken}, 2, "", "broken.yaml: line 5: ", true},
		{"an invalid policy exits 2 naming the field", []string{"policy", "check", invalid}, 2, "", `rules[0].level: "Some"`, true},
		{"a missing file exits 2", []string{"policy", "check", filepath.Join(dir, "nope.yaml")}, 2, "", "reading the audit policy", true},
		{"no file", []string{"policy", "check"}, 2, "", "name one audit policy file", true},
		{"two files", []string{"policy", "check", blinding, broken}, 2, "", "name one audit policy file", true},
		{"bad format", []string{"policy", "check", "--format", "yaml", blinding}, 2, "", `--format "yaml"`, true},
		{"no subcommand", []string{"policy"}, 2, "", "name a subcommand", true},
		{"unknown subcommand", []string{"policy", "lint"}, 2, "", `unknown subcommand "lint"`, true},
		{"help", []string{"policy", "check", "-h"}, 0, "", "Exit status: 0 when no detector is blinded", true},
		{"policy help", []string{"policy", "-h"}, 0, "auditlens policy check", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := run(t.Context(), c.args, &out, &errs)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out.String(), errs.String())
			}
			if !strings.Contains(out.String(), c.stdout) {
				t.Errorf("stdout does not say %q:\n%s", c.stdout, out.String())
			}
			if !strings.Contains(errs.String(), c.stderr) {
				t.Errorf("stderr does not say %q:\n%s", c.stderr, errs.String())
			}
			if c.noStdio && out.Len() > 0 {
				t.Errorf("stdout not empty:\n%s", out.String())
			}
		})
	}
	// The parse error is printed once, without the "usage" of errUsage.
	var out, errs bytes.Buffer
	run(t.Context(), []string{"policy", "check", broken}, &out, &errs)
	if strings.Contains(errs.String(), "usage") || strings.Count(errs.String(), "line 5") != 1 {
		t.Errorf("stderr: %q", errs.String())
	}
}

func TestPolicyCheckJSON(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"policy", "check", "--format", "json", "../../policy/testdata/gce-configure-helper.yaml"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var rep policy.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	got := map[string]policy.Verdict{}
	for _, d := range rep.Detectors {
		got[d.Detector] = d.Verdict
	}
	if got[watchloop.Name] != policy.OK || got[watchloop.RegressionName] != policy.Weakened || rep.Blinded {
		t.Errorf("verdicts %v, blinded %v", got, rep.Blinded)
	}
}

// Every detector says what it must see (the needs.go files of its package under detect/), and our
// own policy lets every one see all of it.
func TestPolicyEveryDetectorHasNeeds(t *testing.T) {
	for _, d := range detectors.Default() {
		n, ok := d.(needer)
		if !ok || len(n.Needs()) == 0 {
			t.Errorf("detector %s declares no needs: add a Needs method in its package's needs.go under detect/", d.Name())
			continue
		}
		ids := map[string]bool{}
		for _, need := range n.Needs() {
			if need.ID == "" || ids[need.ID] || len(need.Probes) == 0 || need.Title == "" || need.Why == "" || need.Loss == "" ||
				(need.Effect != policy.Blinds && need.Effect != policy.Weakens) {
				t.Errorf("detector %s: need %q is incomplete or repeated (ID, Title, Effect, Probes, Why and Loss are required)", d.Name(), need.ID)
			}
			ids[need.ID] = true
		}
	}
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"policy", "check", "--format", "json", "../../deploy/audit-policy.yaml"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var rep policy.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Detectors) != len(detectors.Default()) {
		t.Errorf("%d detectors checked, %d in detectors.Default()", len(rep.Detectors), len(detectors.Default()))
	}
	for _, d := range rep.Detectors {
		if d.Verdict != policy.OK {
			t.Errorf("deploy/audit-policy.yaml leaves %s %s", d.Detector, d.Verdict)
		}
	}
}
