package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	stdjson "encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/envelopes from deploy/e2e/fixtures/real-controllers.log")

// The fixtures under testdata/envelopes wrap the same real kube-apiserver
// events (every tenth line of an e2e fixture, plain.log) in each provider's
// envelope, written from the providers' documented formats by
// writeEnvelopeFixtures (go test ./ingest -run TestEnvelopeFixtures -update).
const envelopeDir = "testdata/envelopes"

// The names the fixtures' envelopes give.
const (
	fixtureAKSCluster   = "aks-demo"
	fixtureAKSPod       = "kube-apiserver-7c9d5b6f4d-q8x2m"
	fixtureEKSCluster   = "eks-demo"
	fixtureEKSStream    = "kube-apiserver-audit-8f3b2a1c9d7e6f5a4b3c2d1e0f9a8b7c"
	fixtureGKECluster   = "gke-demo"
	fixtureAKSSkipped   = 2 // kube-apiserver records in the Event Hub batches
	fixtureEKSSkipped   = 2 // a control message and an authenticator stream
	fixtureEventsPerBox = 10
)

// fixtureFiles are the files writeEnvelopeFixtures writes, with the kind
// their lines are.
var fixtureFiles = map[string]string{
	"aks-storage.json":   KindAKS,
	"aks-eventhub.json":  KindAKS,
	"eks-firehose.gz":    KindEKSCloudWatch,
	"eks-export.gz":      KindEKSExport,
	"eks-messages.jsonl": KindEKSMessage,
	"gke.jsonl":          KindGKE,
}

func TestEnvelopeFixtures(t *testing.T) {
	if !*update {
		for name := range fixtureFiles {
			if _, err := os.Stat(filepath.Join(envelopeDir, name)); err != nil {
				t.Fatalf("%v: run go test ./ingest -run TestEnvelopeFixtures -update", err)
			}
		}
		return
	}
	src, err := os.ReadFile("../deploy/e2e/fixtures/real-controllers.log")
	if err != nil {
		t.Fatal(err)
	}
	var plain [][]byte
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<24)
	for i := 0; sc.Scan(); i++ {
		if i%10 == 0 {
			plain = append(plain, bytes.Clone(sc.Bytes()))
		}
	}
	if err := os.MkdirAll(envelopeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(envelopeDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plain.log", append(bytes.Join(plain, []byte("\n")), '\n'))
	write("aks-storage.json", aksStorage(t, plain))
	write("aks-eventhub.json", aksEventHub(t, plain))
	write("eks-firehose.gz", eksFirehose(t, plain))
	write("eks-export.gz", eksExport(t, plain))
	write("eks-messages.jsonl", eksMessages(t, plain))
	write("gke.jsonl", gkeEntries(t, plain))
}

// fixtureEvent is what the generators read of an event.
type fixtureEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	SourceIPs      []string   `json:"sourceIPs"`
	UserAgent      string     `json:"userAgent"`
	ObjectRef      *objectRef `json:"objectRef"`
	ResponseStatus struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	RequestObject  stdjson.RawMessage `json:"requestObject"`
	ResponseObject stdjson.RawMessage `json:"responseObject"`
	StageTimestamp string             `json:"stageTimestamp"`
	Annotations    map[string]string  `json:"annotations"`
}

func readFixtureEvent(t *testing.T, line []byte) fixtureEvent {
	t.Helper()
	var ev fixtureEvent
	if err := stdjson.Unmarshal(line, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func stageTime(t *testing.T, ev fixtureEvent) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, ev.StageTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := stdjson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// aksRecord is an Azure Monitor resource log record of an AKS cluster, as
// diagnostic settings write it: the event is a string in properties.log.
func aksRecordOf(t *testing.T, line []byte, category string) map[string]any {
	ev := readFixtureEvent(t, line)
	return map[string]any{
		"time":          ev.StageTimestamp,
		"resourceId":    "/SUBSCRIPTIONS/00000000-0000-0000-0000-000000000000/RESOURCEGROUPS/DEMO-RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/" + strings.ToUpper(fixtureAKSCluster),
		"category":      category,
		"operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
		"properties": map[string]any{
			"log":         string(line),
			"stream":      "stdout",
			"pod":         fixtureAKSPod,
			"containerID": "4f6c1e0b9a7d",
		},
	}
}

// aksStorage is a storage account blob (PT1H.json): one record per line.
func aksStorage(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	for _, line := range plain {
		out.Write(mustJSON(t, aksRecordOf(t, line, "kube-audit")))
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// aksEventHub is what an Event Hub consumer saves: one {"records":[...]}
// batch per line, here with records of another category among them.
func aksEventHub(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(plain); i += fixtureEventsPerBox {
		var records []any
		for _, line := range plain[i:min(i+fixtureEventsPerBox, len(plain))] {
			records = append(records, aksRecordOf(t, line, "kube-audit-admin"))
		}
		if i/fixtureEventsPerBox < fixtureAKSSkipped {
			other := aksRecordOf(t, plain[i], "kube-apiserver")
			other["properties"].(map[string]any)["log"] = "I0504 09:06:00.123456 1 controller.go:615] quota admission added evaluator"
			records = append(records, other)
		}
		out.Write(mustJSON(t, map[string]any{"records": records}))
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// cwPayload is a CloudWatch Logs subscription payload.
func cwPayload(t *testing.T, stream string, lines [][]byte) map[string]any {
	var events []any
	for i, line := range lines {
		ts := stageTime(t, readFixtureEvent(t, line))
		events = append(events, map[string]any{
			"id":        fmt.Sprintf("3795%052d", ts.UnixMilli()*100+int64(i)),
			"timestamp": ts.UnixMilli(),
			"message":   string(line),
		})
	}
	return map[string]any{
		"messageType":         "DATA_MESSAGE",
		"owner":               "123456789012",
		"logGroup":            "/aws/eks/" + fixtureEKSCluster + "/cluster",
		"logStream":           stream,
		"subscriptionFilters": []string{"auditlens"},
		"logEvents":           events,
	}
}

// eksFirehose is an S3 object written by Firehose from a subscription:
// each record a gzipped payload, concatenated with nothing between them,
// led by the control message CloudWatch sends when the subscription is made.
func eksFirehose(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	member := func(doc []byte) {
		zw := gzip.NewWriter(&out)
		zw.Write(doc)
		zw.Close()
	}
	member(mustJSON(t, map[string]any{
		"messageType": "CONTROL_MESSAGE", "owner": "CloudwatchLogs", "logGroup": "", "logStream": "",
		"subscriptionFilters": []string{},
		"logEvents":           []any{map[string]any{"id": "", "timestamp": 1777885560000, "message": "CWL CONTROL MESSAGE: Checking health of destination Firehose."}},
	}))
	for i := 0; i < len(plain); i += fixtureEventsPerBox {
		member(mustJSON(t, cwPayload(t, fixtureEKSStream, plain[i:min(i+fixtureEventsPerBox, len(plain))])))
		if i == 0 {
			auth := cwPayload(t, "authenticator-8f3b2a1c9d7e6f5a4b3c2d1e0f9a8b7c", plain[:1])
			auth["logEvents"].([]any)[0].(map[string]any)["message"] = `time="2026-05-04T09:06:00Z" level=info msg="access granted"`
			member(mustJSON(t, auth))
		}
	}
	return out.Bytes()
}

// eksExport is an object of a CloudWatch Logs export to S3
// (create-export-task): gzipped lines "<timestamp> <message>".
func eksExport(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	for _, line := range plain {
		ts := stageTime(t, readFixtureEvent(t, line))
		fmt.Fprintf(zw, "%s %s\n", ts.UTC().Format("2006-01-02T15:04:05.000Z"), line)
	}
	zw.Close()
	return out.Bytes()
}

// eksMessages is `aws logs filter-log-events ... | jq -c '.events[]'`.
func eksMessages(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	for i, line := range plain {
		ts := stageTime(t, readFixtureEvent(t, line))
		out.Write(mustJSON(t, map[string]any{
			"logStreamName": fixtureEKSStream,
			"timestamp":     ts.UnixMilli(),
			"message":       string(line),
			"ingestionTime": ts.UnixMilli() + 812,
			"eventId":       fmt.Sprintf("3795%052d", ts.UnixMilli()*100+int64(i)),
		}))
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// rpcCode is the google.rpc code GKE writes for an HTTP status.
func rpcCode(http int32) int {
	switch {
	case http < 300:
		return 0
	case http == 400, http == 422:
		return 3
	case http == 401:
		return 16
	case http == 403:
		return 7
	case http == 404:
		return 5
	case http == 409:
		return 10
	case http == 410:
		return 9
	case http == 429:
		return 8
	case http == 503:
		return 14
	case http == 504:
		return 4
	}
	return 13
}

// gkeEntries are Cloud Logging entries as a log sink to Cloud Storage
// writes them, one per line: one per request (its ResponseComplete event),
// the event's fields in Cloud Audit Logs' AuditLog, as GKE writes them.
func gkeEntries(t *testing.T, plain [][]byte) []byte {
	var out bytes.Buffer
	for _, line := range plain {
		ev := readFixtureEvent(t, line)
		if ev.Stage != "ResponseComplete" {
			continue
		}
		resourceName := strings.TrimPrefix(strings.SplitN(ev.RequestURI, "?", 2)[0], "/")
		method := "io.k8s." + ev.Verb
		if r := ev.ObjectRef; r != nil && r.Resource != "" {
			group := r.APIGroup
			if group == "" {
				group = "core"
			}
			resourceName = group + "/" + r.APIVersion
			if r.Namespace != "" {
				resourceName += "/namespaces/" + r.Namespace
			}
			resourceName += "/" + r.Resource
			if r.Name != "" {
				resourceName += "/" + r.Name
			}
			if r.Subresource != "" {
				resourceName += "/" + r.Subresource
			}
			// Groups are reversed domains in method names.
			parts := strings.Split(strings.TrimSuffix(group, ".k8s.io"), ".")
			for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
				parts[i], parts[j] = parts[j], parts[i]
			}
			method = "io.k8s." + strings.Join(parts, ".") + "." + r.APIVersion + "." + r.Resource
			if r.Subresource != "" {
				method += "." + r.Subresource
			}
			method += "." + ev.Verb
		}
		logName := "cloudaudit.googleapis.com%2Factivity"
		if ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch" {
			logName = "cloudaudit.googleapis.com%2Fdata_access"
		}
		status := map[string]any{}
		if c := rpcCode(ev.ResponseStatus.Code); c != 0 {
			status = map[string]any{"code": c, "message": fmt.Sprintf("HTTP %d", ev.ResponseStatus.Code)}
		}
		payload := map[string]any{
			"@type":              "type.googleapis.com/google.cloud.audit.AuditLog",
			"serviceName":        "k8s.io",
			"methodName":         method,
			"resourceName":       resourceName,
			"authenticationInfo": map[string]any{"principalEmail": ev.User.Username},
			"authorizationInfo":  []any{map[string]any{"granted": true, "permission": method, "resource": resourceName}},
			"requestMetadata":    map[string]any{"callerIp": ev.SourceIPs[0], "callerSuppliedUserAgent": ev.UserAgent},
			"status":             status,
		}
		if len(ev.RequestObject) > 0 {
			payload["request"] = ev.RequestObject
		}
		if len(ev.ResponseObject) > 0 {
			payload["response"] = ev.ResponseObject
		}
		ts := stageTime(t, ev)
		entry := map[string]any{
			"protoPayload": payload,
			"insertId":     ev.AuditID,
			"resource": map[string]any{"type": "k8s_cluster", "labels": map[string]any{
				"project_id": "demo-project", "location": "europe-west1", "cluster_name": fixtureGKECluster}},
			"timestamp":        ev.StageTimestamp,
			"severity":         "INFO",
			"logName":          "projects/demo-project/logs/" + logName,
			"operation":        map[string]any{"id": ev.AuditID, "producer": "k8s.io", "first": true, "last": true},
			"receiveTimestamp": ts.Add(1234 * time.Millisecond).Format(time.RFC3339Nano),
		}
		if len(ev.Annotations) > 0 {
			entry["labels"] = ev.Annotations
		}
		out.Write(mustJSON(t, entry))
		out.WriteByte('\n')
	}
	return out.Bytes()
}
