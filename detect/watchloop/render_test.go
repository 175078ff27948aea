package watchloop

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
)

var codeSpan = regexp.MustCompile("`[^`\n]*`")

var t0Render = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
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

// renderSample is a finding whose strings come from a hostile client: a
// user agent with markup and Markdown table syntax.
func renderSample() []detect.Finding {
	loop := New(Config{})
	f := detect.Finding{
		ID: detect.FindingID(Name, "prod", "x"), Detector: Name, Cluster: "prod", Severity: detect.Critical,
		FirstSeen: t0Render.Add(36 * time.Second), LastSeen: t0Render.Add(125 * time.Second),
		Subjects: detect.Subjects{User: "system:kube-controller-manager", UserAgent: "<img src=x onerror=alert(1)> | `evil` *bold*",
			Resource: "services", ResourceVersion: "1200", SourceIP: "10.0.0.10"},
		Objects: []detect.Object{{Resource: "endpoints", Namespace: "web", Name: "frontend"}, {Resource: "endpoints", Namespace: "default", Name: "api"}},
	}
	for i, w := range []string{"w1", "w2"} {
		at := time.Duration(i) * 15 * time.Second
		f.Evidence = append(f.Evidence,
			detect.Evidence{AuditID: w, Stage: "RequestReceived", Time: t0Render.Add(36*time.Second + at), Verb: "watch", Resource: "services",
				User: f.Subjects.User, RequestURI: "/api/v1/services?resourceVersion=1200&timeoutSeconds=11&watch=true", Code: 200,
				Role: RoleStaticWatch, ResourceVersion: "1200"},
			detect.Evidence{AuditID: w + "-d", Stage: "ResponseComplete", Time: t0Render.Add(37*time.Second + at), Verb: "delete", Resource: "endpoints",
				Namespace: "web", Name: "frontend", User: "system:serviceaccount:kube-system:endpoint-controller",
				RequestURI: "/api/v1/namespaces/web/endpoints/frontend", Code: 200, Role: "endpoints-delete", WatchAuditID: w},
			detect.Evidence{AuditID: w + "-c", Stage: "ResponseComplete", Time: t0Render.Add(39*time.Second + at), Verb: "create", Resource: "endpoints",
				Namespace: "web", Name: "frontend", User: "system:serviceaccount:kube-system:endpoint-controller",
				RequestURI: "/api/v1/namespaces/web/endpoints", Code: 201, Role: "endpoints-create", ResourceVersion: "4407510", WatchAuditID: w})
	}
	f.Evidence = append(f.Evidence, detect.Evidence{AuditID: "adv", Stage: "RequestReceived", Time: t0Render.Add(80 * time.Second), Verb: "watch",
		Resource: "services", User: "system:serviceaccount:kube-system:kube-dns", Role: RoleRVAdvanced, ResourceVersion: "4815000"})
	f.Normalize()
	loop.describe(&f)
	reg := detect.Finding{ID: "watch-rv-regression-0", Detector: RegressionName, Cluster: "prod", Severity: detect.Warning, Confidence: 0.6,
		Title:   "kube-proxy resumed its watch of services from resourceVersion 1200, lower than 3702977 it had already used",
		Summary: "A short summary.", Remediation: "Restart kube-proxy.", FirstSeen: t0Render, LastSeen: t0Render,
		Subjects: detect.Subjects{User: "system:kube-proxy", UserAgent: "kube-proxy/v1.9.2", Resource: "services", ResourceVersion: "1200", PreviousResourceVersion: "3702977"}}
	reg.Normalize()
	fs := []detect.Finding{reg, f}
	detect.SortFindings(fs)
	return fs
}

func TestRender(t *testing.T) {
	for _, format := range detect.Formats {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := detect.Render(&buf, format, renderSample()); err != nil {
				t.Fatal(err)
			}
			golden(t, "render."+format+".golden", buf.Bytes())
			// Markup from a client is inert: escaped in text, or inside a
			// code span (where Markdown shows it as it is).
			if outside := codeSpan.ReplaceAllString(buf.String(), ""); format == "markdown" && strings.Contains(outside, "<img") {
				t.Error("markdown output holds the client's markup outside code spans")
			}
		})
	}
	t.Run("json round trip", func(t *testing.T) {
		var buf bytes.Buffer
		if err := detect.Render(&buf, "json", renderSample()); err != nil {
			t.Fatal(err)
		}
		var back []detect.Finding
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if want := renderSample(); len(back) != len(want) || !sameJSON(back[1], want[1]) {
			t.Errorf("decoded %+v", back)
		}
	})
	t.Run("no findings", func(t *testing.T) {
		for format, want := range map[string]string{"json": "[]\n", "text": "No findings.\n", "markdown": "# auditlens findings\n\nNo findings.\n"} {
			var buf bytes.Buffer
			if err := detect.Render(&buf, format, nil); err != nil || buf.String() != want {
				t.Errorf("%s: %q, %v; want %q", format, buf.String(), err, want)
			}
		}
	})
	// A cluster-wide incident names no client and no resource: no empty
	// lines for them, its resourceVersions alone.
	t.Run("no client", func(t *testing.T) {
		f := detect.Finding{ID: "rv-rollback-1", Detector: "rv-rollback", Cluster: "prod", Severity: detect.Critical, Title: "went back",
			Subjects: detect.Subjects{ResourceVersion: "49890", PreviousResourceVersion: "50890"}}
		for format, want := range map[string]string{"text": "  resourceVersion 49890 (before: 50890)\n", "markdown": "| resourceVersion | `49890` (before: `50890`) |\n"} {
			var buf bytes.Buffer
			if err := detect.Render(&buf, format, []detect.Finding{f}); err != nil {
				t.Fatal(err)
			}
			if out := buf.String(); !strings.Contains(out, want) || strings.Contains(out, "client") || strings.Contains(out, "resource:") {
				t.Errorf("%s:\n%s", format, out)
			}
		}
	})
	t.Run("unknown format", func(t *testing.T) {
		if err := detect.Render(&bytes.Buffer{}, "yaml", nil); err == nil || !strings.Contains(err.Error(), "text, json, markdown") {
			t.Errorf("got %v", err)
		}
	})
}

// TestWatchLoopDescribe checks the counts a watch-loop finding derives
// from its evidence: restarts (retries collapsed), iterations (restarts
// followed by churn) and the confidence that follows.
func TestWatchLoopDescribe(t *testing.T) {
	f := renderSample()[0]
	if f.Detector != Name {
		t.Fatalf("first finding is %s", f.Detector)
	}
	if f.Subjects.WatchRestarts != 2 || f.Subjects.Iterations != 2 {
		t.Errorf("restarts %d iterations %d, want 2 and 2", f.Subjects.WatchRestarts, f.Subjects.Iterations)
	}
	// Two iterations (0.7), every restart replayed (+0.05); the user
	// agent names no affected version.
	if f.Confidence != 0.75 {
		t.Errorf("confidence %v, want 0.75", f.Confidence)
	}
	for _, want := range []string{"restarted its watch of services 2 times from the same resourceVersion 1200",
		"resourceVersion 4815000", "default/api, web/frontend", "(2 deletes, 2 re-created)"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, f.Summary)
		}
	}
	// A quick retry of a restart adds no restart and no iteration.
	loop := New(Config{})
	g := f
	g.Evidence = append(append([]detect.Evidence(nil), f.Evidence...), detect.Evidence{AuditID: "w1-retry", Stage: "RequestReceived",
		Time: t0Render.Add(37 * time.Second), Verb: "watch", Resource: "services", Role: RoleStaticWatch, ResourceVersion: "1200"})
	g.Normalize()
	loop.describe(&g)
	if g.Subjects.WatchRestarts != 2 || g.Subjects.Iterations != 2 {
		t.Errorf("with a retry: restarts %d iterations %d, want 2 and 2", g.Subjects.WatchRestarts, g.Subjects.Iterations)
	}
}

// sameJSON compares two findings as stored: their JSON documents.
func sameJSON(a, b detect.Finding) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func TestAffectedVersion(t *testing.T) {
	for _, tc := range []struct {
		agent    string
		ver      string
		affected bool
	}{
		{"kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/5fa2db2/shared-informers", "v1.9.2", true},
		{"kube-controller-manager/v1.9.3 (linux/amd64) kubernetes/d283541", "v1.9.3", false},
		{"kube-proxy/v1.7.0 (linux/amd64) kubernetes/d3ada01", "v1.7.0", true},
		{"kube-proxy/v1.7.12 (linux/amd64) kubernetes/3bda299", "v1.7.12", true},
		{"kube-proxy/v1.7.13 (linux/amd64) kubernetes/a3e4d4b", "v1.7.13", false},
		{"kubelet/v1.8.7 (linux/amd64) kubernetes/b30876a", "v1.8.7", true},
		{"kubelet/v1.8.8 (linux/amd64) kubernetes/2f73858", "v1.8.8", false},
		{"kube-controller-manager/v1.6.13 (linux/amd64) kubernetes/14ea65f", "v1.6.13", false},
		{"kube-controller-manager/v1.10.0 (linux/amd64) kubernetes/fc32d2f", "v1.10.0", false},
		{"kube-dns/1.14.8 (linux/amd64) kubernetes/$Format", "1.14.8", false},
		{"Prometheus/3.2.1", "3.2.1", false},
		{"curl", "", false},
	} {
		ver, affected := affectedVersion(tc.agent)
		if ver != tc.ver || affected != tc.affected {
			t.Errorf("affectedVersion(%q) = %q, %v; want %q, %v", tc.agent, ver, affected, tc.ver, tc.affected)
		}
	}
}
