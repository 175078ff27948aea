package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// firehoseObject wraps the lines of an audit log as Firehose writes a
// CloudWatch Logs subscription to S3: gzipped payloads of up to 100 log
// events each, concatenated.
func firehoseObject(t *testing.T, log []byte, cluster string) []byte {
	t.Helper()
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<24)
	var events []any
	flush := func() {
		if len(events) == 0 {
			return
		}
		doc, err := json.Marshal(map[string]any{"messageType": "DATA_MESSAGE", "owner": "123456789012",
			"logGroup": "/aws/eks/" + cluster + "/cluster", "logStream": "kube-apiserver-audit-5e4f",
			"subscriptionFilters": []string{"auditlens"}, "logEvents": events})
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(&out)
		zw.Write(doc)
		zw.Close()
		events = nil
	}
	for sc.Scan() {
		events = append(events, map[string]any{"id": "0", "timestamp": 1777885560000, "message": sc.Text()})
		if len(events) == 100 {
			flush()
		}
	}
	flush()
	return out.Bytes()
}

// TestScanEnvelope: scan finds in an EKS export exactly what it finds in
// the plain log of the same events, and the findings name the cluster
// the envelope names.
func TestScanEnvelope(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	log := genScenarioLog(t, dir, "seed-incident")
	plain, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := filepath.Join(dir, "firehose-object")
	if err := os.WriteFile(wrapped, firehoseObject(t, plain, "prod-eks"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "scan", "--format", "json", log)
	if code != 1 {
		t.Fatalf("scan plain: exit %d\n%s", code, stderr)
	}
	want := decodeFindings(t, stdout)
	stdout, stderr, code = runCLI(t, "scan", "--format", "json", wrapped)
	if code != 1 || !strings.Contains(stderr, "events by format: eks-cloudwatch ") || !strings.Contains(stderr, "clusters: prod-eks") {
		t.Fatalf("scan firehose: exit %d\n%s", code, stderr)
	}
	got := decodeFindings(t, stdout)
	if !reflect.DeepEqual(countByDetector(got), countByDetector(want)) || len(got) == 0 {
		t.Fatalf("findings %v, want %v", countByDetector(got), countByDetector(want))
	}
	for _, f := range got {
		if f.Cluster != "prod-eks" {
			t.Errorf("finding %s of cluster %q", f.ID, f.Cluster)
		}
	}
	// --cluster overrides the envelope's.
	stdout, _, _ = runCLI(t, "scan", "--format", "json", "--cluster", "mine", wrapped)
	for _, f := range decodeFindings(t, stdout) {
		if f.Cluster != "mine" {
			t.Errorf("with --cluster: finding %s of cluster %q", f.ID, f.Cluster)
		}
	}
}

// TestImportEnvelopeStdin: import reads AKS records from standard input
// without --cluster; a plain log without --cluster is a usage error that
// says what to pass.
func TestImportEnvelopeStdin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	dir := t.TempDir()
	storeURL := "chdb://" + filepath.Join(dir, "clickhouse")
	aks, err := os.ReadFile("../../ingest/testdata/envelopes/aks-eventhub.json")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "import", "--store", storeURL, "--progress", "never", "-")
	cmd.Env = append(os.Environ(), "AUDITLENS_TEST_MAIN=1")
	cmd.Stdin = bytes.NewReader(aks)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "62 events, 62 stored") || !strings.Contains(string(out), "events by format: aks 62; clusters: aks-demo") ||
		!strings.Contains(string(out), "skipped 2 envelope records") || !strings.Contains(string(out), "detectors:") {
		t.Fatalf("import -: %v\n%s", err, out)
	}
	_, stderr, code := runCLI(t, "import", "--store", storeURL, "--progress", "never", "../../ingest/testdata/envelopes/plain.log")
	if code != 2 || !strings.Contains(stderr, "name no cluster: pass --cluster NAME") {
		t.Fatalf("plain log without --cluster: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", "a/b", "-"); code != 2 || !strings.Contains(stderr, "--cluster") {
		t.Fatalf("--cluster a/b: exit %d %s", code, stderr)
	}
}
