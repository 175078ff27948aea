package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// collectorConfig is the collector configuration docs/sending.md shows for
// self-managed control planes: the test runs that very file.
const collectorConfig = "../otelcol/config.yaml"

// TestOTelCollector ships a real kube-apiserver's --audit-log-path file to
// auditlens with a real OpenTelemetry Collector (filelog receiver, otlphttp
// exporter; built by build.sh at the versions in versions.env) while the
// same apiserver's audit webhook sends to the same auditlens under another
// cluster name, and checks:
//
//   - the events stored via OTLP (cluster e2e-otel) are those of the log
//     file, by (auditID, stage), each once, and so equal the webhook's copy
//     (cluster e2e-otel-webhook) but for the events the apiserver dropped
//     from its webhook at shutdown (checkEvents);
//   - no log record was rejected;
//   - a second collector, which reads the whole file again and ships it
//     under the webhook's cluster, adds exactly the events the webhook had
//     missed and nothing else: the same event via the webhook and via OTLP
//     is stored once per cluster.
func TestOTelCollector(t *testing.T) {
	t.Parallel()
	prepare(t)
	dir := filepath.Join(tempRoot, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const webhookCluster, otelCluster = "e2e-otel-webhook", "e2e-otel"
	ca := newCA(t, dir)
	recv := startReceiverToken(t, ca, filepath.Join(dir, "auditlens"), webhookCluster, otelCluster)
	c := startCluster(t, ca, filepath.Join(dir, "cluster"), webhookCluster, recv.forCluster(webhookCluster), nil)

	start := time.Now()
	col := startCollector(t, dir, "otelcol", c.auditLog, recv, ca, otelCluster)
	otelTraffic(t, c)
	// Stopping the apiserver completes the log file and flushes the webhook.
	c.stop(t)
	t.Logf("apiserver ran with the collector for %s", time.Since(start).Round(100*time.Millisecond))
	if t.Failed() {
		return
	}
	file, err := fileKeys(c.auditLog)
	if err != nil {
		t.Fatal(err)
	}

	// The OTLP copy is the whole file.
	var otel map[eventKey]int
	var diff string
	if !poll(90*time.Second, 500*time.Millisecond, func() bool {
		otel, err = recv.storedKeys(otelCluster)
		if err != nil {
			diff = err.Error()
			return false
		}
		diff = diffKeys(file, otel)
		return diff == ""
	}) {
		t.Fatalf("events stored via OTLP differ from the apiserver's audit log: %s\ncollector log:\n%s\nauditlens log:\n%s",
			diff, col.logTail(20), recv.proc.logTail(20))
	}
	// The webhook copy is the file less what the apiserver says it dropped.
	checkEvents(t, recv, c)
	webhook, err := recv.storedKeys(webhookCluster)
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := apiserverDrops(c.apiserver.logPath)
	if err != nil {
		t.Fatal(err)
	}
	missed := 0
	for k := range otel {
		if webhook[k] == 0 {
			missed++
			if dropped[k] == 0 {
				t.Errorf("%s/%s came by OTLP only, and the apiserver does not say it dropped it from its webhook", k.auditID, k.stage)
			}
		}
	}
	for k := range webhook {
		if otel[k] == 0 {
			t.Errorf("the webhook stored %s/%s, which the collector did not ship", k.auditID, k.stage)
		}
	}
	t.Logf("via OTLP: %d events, each once, equal by (auditID, stage) to the webhook's %d plus the %d the apiserver dropped from its webhook at shutdown",
		len(otel), len(webhook), missed)

	m, err := recv.metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := m.sum("auditlens_otlp_log_records_rejected_total"); n != 0 {
		t.Errorf("auditlens rejected %v log records of the collector's", n)
	}
	if n := m.sum(`auditlens_otlp_requests_total{code="200"}`); n == 0 {
		t.Errorf("no OTLP request was answered 200: %v", m)
	}
	if err := col.stop(30 * time.Second); err != nil {
		t.Errorf("otelcol: %v\n%s", err, col.logTail(20))
	}

	// The same file again, under the webhook's cluster: only the events the
	// webhook missed are new.
	dupBefore := m.sum("auditlens_events_duplicate_total")
	col2 := startCollector(t, dir, "otelcol-again", c.auditLog, recv, ca, webhookCluster)
	var dups float64
	if !poll(90*time.Second, 500*time.Millisecond, func() bool {
		stored, err := recv.storedKeys(webhookCluster)
		if err != nil {
			diff = err.Error()
			return false
		}
		if diff = diffKeys(file, stored); diff != "" {
			return false
		}
		m, err := recv.metrics()
		if err != nil {
			diff = err.Error()
			return false
		}
		dups = m.sum("auditlens_events_duplicate_total") - dupBefore
		diff = fmt.Sprintf("%v duplicates dropped, want %d", dups, len(webhook))
		return dups == float64(len(webhook))
	}) {
		t.Fatalf("shipping the file again under %s: %s\ncollector log:\n%s", webhookCluster, diff, col2.logTail(20))
	}
	t.Logf("shipped again under the webhook's cluster: %d events stored, each once; the %v the webhook had stored were dropped as duplicates", len(file), dups)
	if err := col2.stop(30 * time.Second); err != nil {
		t.Errorf("otelcol: %v\n%s", err, col2.logTail(20))
	}
	if err := recv.proc.stop(60 * time.Second); err != nil {
		t.Errorf("auditlens serve: %v\n%s", err, recv.proc.logTail(30))
	}
}

// startCollector runs otelcol with the documented configuration, tailing
// auditLog and shipping to recv as cluster (its token, and the resource
// attribute k8s.cluster.name).
func startCollector(t *testing.T, dir, name, auditLog string, recv *receiver, ca *testCA, cluster string) *proc {
	t.Helper()
	cfg, err := filepath.Abs(collectorConfig)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"AUDIT_LOG=" + auditLog,
		"CLUSTER=" + cluster,
		"AUDITLENS_ENDPOINT=" + recv.base,
		"AUDITLENS_TOKEN=" + webhookToken(cluster),
		"AUDITLENS_CA=" + ca.pemPath,
	}
	p := startProcEnv(t, dir, name, otelcolBin, env, "--config", "file:"+cfg)
	if !poll(30*time.Second, 100*time.Millisecond, func() bool {
		b, _ := os.ReadFile(p.logPath)
		return p.exited() || bytes.Contains(b, []byte("Everything is ready"))
	}) || p.exited() {
		t.Fatalf("%s did not start:\n%s", name, p.logTail(30))
	}
	return p
}

// otelTraffic makes a few seconds of API traffic: writes, reads, lists and
// a watch that the apiserver ends, so that the log holds every stage.
func otelTraffic(t *testing.T, c *cluster) {
	t.Helper()
	admin := c.actor(adminID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := admin.create("", "namespaces", namespace("otel"))
	must(err)
	watched := make(chan error, 1)
	go func() {
		_, err := c.actor(proxyID).watch(ctx, "/api/v1/namespaces/otel/configmaps", "0", 3, false, nil)
		watched <- err
	}()
	for i := range 10 {
		name := fmt.Sprintf("cm-%d", i)
		_, err := admin.create("otel", "configmaps", configMap(name, map[string]string{"i": strconv.Itoa(i)}))
		must(err)
		_, err = admin.patch("otel", "configmaps", name, map[string]any{"data": map[string]string{"patched": "yes"}})
		must(err)
		_, err = admin.get("otel", "configmaps", name)
		must(err)
		_, err = admin.list(ctx, "/api/v1/namespaces/otel/configmaps")
		must(err)
		if i%3 == 0 {
			must(admin.delete("otel", "configmaps", name))
		}
		time.Sleep(200 * time.Millisecond)
	}
	must(<-watched)
}

// metricValues are the samples of a /metrics page, by name with labels.
type metricValues map[string]float64

// sum adds the samples whose name with labels starts with prefix.
func (m metricValues) sum(prefix string) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

func (r *receiver) metrics() (metricValues, error) {
	code, body, err := r.get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /metrics: %d", code)
	}
	m := metricValues{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// TestCollectorConfigInDocs: the configuration docs/sending.md shows for
// self-managed control planes is deploy/otelcol/config.yaml, the file
// TestOTelCollector runs, less its comments. Runs with -short.
func TestCollectorConfigInDocs(t *testing.T) {
	page, err := os.ReadFile("../../docs/sending.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "### Self-managed control planes")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/sending.md has no yaml block under ### Self-managed control planes")
	}
	file, err := os.ReadFile(collectorConfig)
	if err != nil {
		t.Fatal(err)
	}
	var inDocs, inFile any
	if err := yaml.Unmarshal([]byte(block), &inDocs); err != nil {
		t.Fatalf("docs/sending.md's collector configuration: %v", err)
	}
	if err := yaml.Unmarshal(file, &inFile); err != nil {
		t.Fatalf("%s: %v", collectorConfig, err)
	}
	if !reflect.DeepEqual(inDocs, inFile) {
		got, _ := yaml.Marshal(inDocs)
		want, _ := yaml.Marshal(inFile)
		t.Errorf("docs/sending.md's collector configuration differs from %s:\ndocs:\n%s\nfile:\n%s", collectorConfig, got, want)
	}
}
