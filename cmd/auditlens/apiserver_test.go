package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// v1alpha1Item is an event as a Kubernetes 1.7 apiserver's webhook sends
// it: one second-precision timestamp, no userAgent, objectRef.apiVersion
// as group/version.
func v1alpha1Item(id, ts string) string {
	return `{"metadata":{"creationTimestamp":null},"level":"Metadata","timestamp":"` + ts + `","auditID":"` + id + `","stage":"ResponseComplete",` +
		`"requestURI":"/apis/extensions/v1beta1/namespaces/web/deployments/front","verb":"get","user":{"username":"admin","groups":["system:masters"]},` +
		`"sourceIPs":["10.1.0.4"],"objectRef":{"resource":"deployments","namespace":"web","name":"front","apiVersion":"extensions/v1beta1"},"responseStatus":{"metadata":{},"code":200}}`
}

// TestServeAPIServers: the apiservers of an HA control plane post with
// their own token, or a cluster token and their name in the path; the
// API filters and lists by apiserver; a 1.7 apiserver's v1alpha1 batch is
// stored like any other.
func TestServeAPIServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	s := startServe(t, "--data", t.TempDir(), "--batch-wait", "50ms",
		"--webhook-token", "tok-m1=ha/master-1", "--webhook-token", "tok-ha=ha")
	post := func(path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", s.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []struct {
		path, token, body string
		code              int
	}{
		{"/audit", "tok-m1", list("audit.k8s.io/v1", event("e1", "ResponseComplete", "2026-11-29T10:00:00.5Z", "")), 200},
		{"/audit/ha/master-2", "tok-ha", list("audit.k8s.io/v1alpha1", v1alpha1Item("e2", "2026-11-29T10:00:01Z")), 200},
		{"/audit/ha", "tok-ha", list("audit.k8s.io/v1", event("e3", "ResponseComplete", "2026-11-29T10:00:02Z", "")), 200},
		{"/audit/ha/master-2", "tok-m1", list("audit.k8s.io/v1", event("e4", "ResponseComplete", "2026-11-29T10:00:03Z", "")), 403},
		{"/audit/ha/master%202", "tok-ha", list("audit.k8s.io/v1", event("e5", "ResponseComplete", "2026-11-29T10:00:03Z", "")), 400},
	} {
		if code := post(p.path, p.token, p.body); code != p.code {
			t.Errorf("POST %s with %s: %d, want %d\n%s", p.path, p.token, code, p.code, s.logs.String())
		}
	}
	s.waitEvents("/api/v1/events?cluster=ha", 3)
	if _, got := s.get("/api/v1/events?cluster=ha&apiserver=master-2&jq=" + urlQuery(`[.auditID, .objectRef.apiVersion]`)); strings.Join(got, ",") != `["e2","extensions/v1beta1"]` {
		t.Errorf("events of master-2: %q", got)
	}
	_, got := s.get("/api/v1/values?field=apiserver&cluster=ha&since=2026-11-29T00:00:00Z")
	var vals []struct {
		Value string
		Count int
	}
	if err := json.Unmarshal([]byte(strings.Join(got, "")), &vals); err != nil || len(vals) != 3 {
		t.Errorf("apiserver values %q: %v", got, err)
	}
	s.stop()

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--webhook-token", "t=ha/a b"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `apiserver name "a b"`) {
		t.Errorf("serve with a bad token sender: exit %d, %s", code, errb.String())
	}
}

// TestImportAPIServer: import --apiserver tags the events, query
// --apiserver selects them, and a bad name is a usage error.
func TestImportAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "db")
	a, b := filepath.Join(dir, "master-1.log"), filepath.Join(dir, "master-2.log")
	lineA := strings.Replace(event("i1", "ResponseComplete", "2026-11-29T11:00:00Z", ""), "{", `{"kind":"Event","apiVersion":"audit.k8s.io/v1",`, 1)
	lineB := `{"kind":"Event","apiVersion":"audit.k8s.io/v1alpha1",` + v1alpha1Item("i2", "2026-11-29T11:00:01Z")[1:]
	if err := os.WriteFile(a, []byte(lineA+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(lineB+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, imp := range [][]string{{"master-1", a}, {"master-2", b}} {
		if stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", "ha", "--apiserver", imp[0], "--no-detect", "--progress", "never", imp[1]); code != 0 || !strings.Contains(stdout, "1 stored") {
			t.Fatalf("import --apiserver %s: exit %d\n%s\n%s", imp[0], code, stdout, stderr)
		}
	}
	stdout, stderr, code := runCLI(t, "query", "--store", storeURL, "--cluster", "ha", "--apiserver", "master-2", "--jq", ".auditID")
	if code != 0 || strings.TrimSpace(stdout) != `"i2"` {
		t.Errorf("query --apiserver master-2: exit %d %q %s", code, stdout, stderr)
	}
	if _, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", "ha", "--apiserver", "a/b", a); code != 2 || !strings.Contains(stderr, "--apiserver") {
		t.Errorf("import --apiserver a/b: exit %d %s", code, stderr)
	}
}
