package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// A real event (kube-controller-manager's endpoints delete) and a watch.
const (
	envEvent = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"6b3f0e1a-0d4c-4a57-9a59-2f1e0c7a9b11","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/endpoints/web","verb":"delete","user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},"sourceIPs":["10.0.0.4"],"userAgent":"kube-controller-manager/v1.33.1 (linux/amd64) kubernetes/8adc0f0/system:serviceaccount:kube-system:endpoint-controller","objectRef":{"resource":"endpoints","namespace":"default","name":"web","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-05-04T09:06:00.101234Z","stageTimestamp":"2026-05-04T09:06:00.123456Z"}`
	envWatch = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"0c2d9b7e-55a1-4f0e-8d3c-7e6a1b2c3d4e","stage":"ResponseStarted","requestURI":"/api/v1/services?allowWatchBookmarks=true\u0026resourceVersion=1042\u0026timeoutSeconds=372\u0026watch=true","verb":"watch","user":{"username":"system:kube-controller-manager"},"sourceIPs":["10.0.0.4"],"userAgent":"kube-controller-manager/v1.33.1","objectRef":{"resource":"services","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-05-04T09:06:01.000001Z","stageTimestamp":"2026-05-04T09:06:01.000201Z"}`
)

func jsonString(s string) string {
	b, _ := stdjson.Marshal(s)
	return string(b)
}

func aksLine(category, resourceID, log string) string {
	return `{"time":"2026-05-04T09:06:00.1234560Z","resourceId":` + jsonString(resourceID) + `,"category":"` + category +
		`","operationName":"Microsoft.ContainerService/managedClusters/diagnosticLogs/Read","properties":{"log":` + jsonString(log) +
		`,"stream":"stdout","pod":"kube-apiserver-5d8f9c7b6-abcde","containerID":"0f1e"}}`
}

const aksID = "/SUBSCRIPTIONS/00000000-0000-0000-0000-000000000000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/PROD-AKS"

func cwLine(messageType, logGroup, logStream string, messages ...string) string {
	var events []string
	for i, m := range messages {
		events = append(events, fmt.Sprintf(`{"id":"%d","timestamp":1777885560123,"message":%s}`, i, jsonString(m)))
	}
	return `{"messageType":"` + messageType + `","owner":"123456789012","logGroup":"` + logGroup + `","logStream":"` + logStream +
		`","subscriptionFilters":["f"],"logEvents":[` + strings.Join(events, ",") + `]}`
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

func gkeLine(service, method, resourceName, status string) string {
	return `{"insertId":"a1b2c3d4-insert","logName":"projects/p/logs/cloudaudit.googleapis.com%2Factivity","operation":{"id":"6b3f0e1a-gke","producer":"k8s.io","first":true,"last":true},` +
		`"protoPayload":{"@type":"type.googleapis.com/google.cloud.audit.AuditLog","serviceName":"` + service + `","methodName":"` + method + `","resourceName":"` + resourceName + `",` +
		`"authenticationInfo":{"principalEmail":"system:kube-controller-manager"},"requestMetadata":{"callerIp":"10.0.0.4","callerSuppliedUserAgent":"kube-controller-manager/v1.33.1"},` +
		`"status":` + status + `,"request":{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"web","resourceVersion":"2077","uid":"u-1"}}},` +
		`"resource":{"type":"k8s_cluster","labels":{"project_id":"p","location":"europe-west1","cluster_name":"prod-gke"}},` +
		`"timestamp":"2026-05-04T09:06:00.123456789Z","labels":{"authorization.k8s.io/decision":"allow"}}`
}

// TestDecodeImportLine covers each envelope, its cluster rule and its
// malformed cases: a bad record is a reject, the rest of the line kept.
func TestDecodeImportLine(t *testing.T) {
	fromEnvelope := LineSource{Cluster: "fallback"}
	noCluster := LineSource{}
	fixed := LineSource{Cluster: "mine", Fixed: true}
	lambda := `{"awslogs":{"data":"` + base64.StdEncoding.EncodeToString(gzipped(cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent))) + `"}}`
	tooLong := strings.Repeat("x", 64)
	type want struct {
		kind      string
		err       error
		rows      int
		rejects   []string // substrings of the reasons, in order
		skipped   int
		cluster   string // of every row
		apiserver string
	}
	cases := []struct {
		name string
		src  LineSource
		line string
		want want
	}{
		{"plain event", fromEnvelope, envEvent, want{kind: KindAudit, rows: 1, cluster: "fallback"}},
		{"plain event, apiserver flag", LineSource{Cluster: "c", APIServer: "m1"}, envEvent, want{kind: KindAudit, rows: 1, cluster: "c", apiserver: "m1"}},
		{"plain event without a cluster", noCluster, envEvent, want{kind: KindAudit, err: ErrNoCluster}},
		{"not JSON", fromEnvelope, "hello", want{kind: KindAudit, err: ErrNotAudit}},
		{"not JSON without a cluster", noCluster, "hello", want{kind: KindAudit, err: ErrNotAudit}},
		{"other object", fromEnvelope, `{"foo":1}`, want{kind: KindAudit, err: ErrNotAudit}},
		{"blank", fromEnvelope, "  ", want{}},

		{"aks record", fromEnvelope, aksLine("kube-audit", aksID, envEvent),
			want{kind: KindAKS, rows: 1, cluster: "prod-aks", apiserver: "kube-apiserver-5d8f9c7b6-abcde"}},
		{"aks record, --cluster", fixed, aksLine("kube-audit-admin", aksID, envEvent),
			want{kind: KindAKS, rows: 1, cluster: "mine", apiserver: "kube-apiserver-5d8f9c7b6-abcde"}},
		{"aks record, no resource id", noCluster, aksLine("kube-audit", "", envEvent),
			want{kind: KindAKS, rejects: []string{noClusterReason}}},
		{"aks record, invalid cluster", fromEnvelope, aksLine("kube-audit", "/x/MANAGEDCLUSTERS/"+tooLong, envEvent),
			want{kind: KindAKS, rejects: []string{"not a valid cluster name"}}},
		{"aks record, bad inner JSON", fromEnvelope, aksLine("kube-audit", aksID, `{"kind":"Event","auditID":`),
			want{kind: KindAKS, rejects: []string{"properties.log: invalid JSON"}}},
		{"aks record, inner text", fromEnvelope, aksLine("kube-audit", aksID, `I0504 started`),
			want{kind: KindAKS, rejects: []string{"properties.log holds no audit event"}}},
		{"aks record, other category", fromEnvelope, aksLine("kube-apiserver", aksID, `I0504 started`),
			want{kind: KindAKS, skipped: 1}},
		{"aks event hub batch", fromEnvelope, `{"records":[` + aksLine("kube-audit", aksID, envEvent) + `,` +
			aksLine("kube-audit", aksID, `{"auditID":"x","stage":"Nope","stageTimestamp":"2026-05-04T09:06:00Z"}`) + `,7,` +
			aksLine("guard", aksID, "x") + `,` + aksLine("kube-audit", aksID, envWatch) + `]}`,
			want{kind: KindAKS, rows: 2, rejects: []string{`records[1].properties.log: unknown stage "Nope"`, "records[2]: field"}, skipped: 1,
				cluster: "prod-aks", apiserver: "kube-apiserver-5d8f9c7b6-abcde"}},

		{"cloudwatch payload", fromEnvelope, cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent, "not json", envWatch),
			want{kind: KindEKSCloudWatch, rows: 2, rejects: []string{"logEvents[1].message holds no audit event"}, cluster: "prod-eks", apiserver: "kube-apiserver-audit-0a1b"}},
		{"cloudwatch payload, malformed log event", fromEnvelope, strings.Replace(
			cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent, "x", envWatch), `"message":"x"`, `"message":5`, 1),
			want{kind: KindEKSCloudWatch, rows: 2, rejects: []string{`logEvents[1]: field "message" is a JSON number`}, cluster: "prod-eks", apiserver: "kube-apiserver-audit-0a1b"}},
		{"cloudwatch control message, malformed log event", fromEnvelope, strings.Replace(
			cwLine("CONTROL_MESSAGE", "", "", "x"), `"message":"x"`, `"message":5`, 1),
			want{kind: KindEKSCloudWatch, skipped: 1}},
		{"cloudwatch payload, other log group", noCluster, cwLine("DATA_MESSAGE", "/aws/lambda/x", "kube-apiserver-audit-0a1b", envEvent),
			want{kind: KindEKSCloudWatch, rejects: []string{noClusterReason}}},
		{"cloudwatch payload, --cluster", fixed, cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent),
			want{kind: KindEKSCloudWatch, rows: 1, cluster: "mine", apiserver: "kube-apiserver-audit-0a1b"}},
		{"cloudwatch control message", fromEnvelope, cwLine("CONTROL_MESSAGE", "", "", "CWL CONTROL MESSAGE: Checking health of destination"),
			want{kind: KindEKSCloudWatch, skipped: 1}},
		{"cloudwatch authenticator stream", fromEnvelope, cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "authenticator-0a1b", "level=info"),
			want{kind: KindEKSCloudWatch, skipped: 1}},
		{"cloudwatch payloads concatenated", fromEnvelope, cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent) +
			cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envWatch),
			want{kind: KindEKSCloudWatch, rows: 2, cluster: "prod-eks", apiserver: "kube-apiserver-audit-0a1b"}},
		{"cloudwatch payloads concatenated, one broken", fromEnvelope, cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent) + `{"messageType":5}`,
			want{err: ErrNotAudit}},
		{"lambda event", fromEnvelope, lambda, want{kind: KindEKSCloudWatch, rows: 1, cluster: "prod-eks", apiserver: "kube-apiserver-audit-0a1b"}},
		{"lambda event, not gzip", fromEnvelope, `{"awslogs":{"data":"aGVsbG8="}}`, want{err: ErrNotAudit}},

		{"export line", fromEnvelope, "2026-05-04T09:06:00.123Z " + envEvent, want{kind: KindEKSExport, rows: 1, cluster: "fallback"}},
		{"export line without a cluster", noCluster, "2026-05-04T09:06:00.123Z " + envEvent, want{kind: KindEKSExport, err: ErrNoCluster}},
		{"export line, bad event", fromEnvelope, "2026-05-04T09:06:00.123Z " + `{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a"}`,
			want{kind: KindEKSExport, rejects: []string{"missing stage"}}},
		{"export line, bad time", fromEnvelope, "2026-13-04T09:06:00Z " + envEvent, want{kind: KindAudit, err: ErrNotAudit}},

		{"message record", fromEnvelope, `{"logStreamName":"kube-apiserver-audit-0a1b","timestamp":1777885560123,"message":` + jsonString(envEvent) + `,"ingestionTime":1777885561000,"eventId":"1"}`,
			want{kind: KindEKSMessage, rows: 1, cluster: "fallback", apiserver: "kube-apiserver-audit-0a1b"}},
		{"message record with its log group", noCluster, `{"logGroupName":"/aws/eks/prod-eks/cluster","logStreamName":"kube-apiserver-audit-0a1b","message":` + jsonString(envEvent) + `}`,
			want{kind: KindEKSMessage, rows: 1, cluster: "prod-eks", apiserver: "kube-apiserver-audit-0a1b"}},
		{"message record, other stream", fromEnvelope, `{"logStreamName":"kube-scheduler-0a1b","message":"I0504 scheduled"}`,
			want{kind: KindEKSMessage, skipped: 1}},

		{"gke entry", noCluster, gkeLine("k8s.io", "io.k8s.core.v1.endpoints.delete", "core/v1/namespaces/default/endpoints/web", `{}`),
			want{kind: KindGKE, rows: 1, cluster: "prod-gke"}},
		{"gke entry, --cluster", fixed, gkeLine("k8s.io", "io.k8s.core.v1.endpoints.delete", "core/v1/namespaces/default/endpoints/web", `{"code":5}`),
			want{kind: KindGKE, rows: 1, cluster: "mine"}},
		{"gke entry of another service", fromEnvelope, gkeLine("container.googleapis.com", "google.container.v1.ClusterManager.GetCluster", "projects/p/clusters/c", `{}`),
			want{kind: KindGKE, skipped: 1}},
		{"gke entry, bad method", fromEnvelope, gkeLine("k8s.io", "delete.", "core/v1/namespaces/default/endpoints/web", `{}`),
			want{kind: KindGKE, rejects: []string{"methodName"}}},
		{"gke entry, bad status", fromEnvelope, gkeLine("k8s.io", "io.k8s.core.v1.endpoints.delete", "core/v1/x", `{"code":"x"}`),
			want{kind: KindGKE, rejects: []string{"protoPayload.status.code"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := Batch{Rejects: []Reject{{Reason: "earlier"}}, Skipped: 1}
			kind, err := DecodeImportLine(c.src, []byte(c.line), &b)
			if c.want.err != nil {
				if !errors.Is(err, c.want.err) {
					t.Fatalf("error %v, want %v", err, c.want.err)
				}
				if len(b.Rows) != 0 || len(b.Rejects) != 1 || b.Skipped != 1 {
					t.Fatalf("batch changed with the error: %+v", b)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v", err)
			}
			if kind != c.want.kind {
				t.Errorf("kind %q, want %q", kind, c.want.kind)
			}
			if len(b.Rows) != c.want.rows || b.Skipped-1 != c.want.skipped {
				t.Errorf("%d rows, %d skipped; want %d, %d (rejects %+v)", len(b.Rows), b.Skipped-1, c.want.rows, c.want.skipped, b.Rejects)
			}
			rejects := b.Rejects[1:]
			if len(rejects) != len(c.want.rejects) {
				t.Fatalf("rejects %+v, want %q", rejects, c.want.rejects)
			}
			for i, rj := range rejects {
				if !strings.Contains(rj.Reason, c.want.rejects[i]) {
					t.Errorf("reject %d: %q, want it to say %q", i, rj.Reason, c.want.rejects[i])
				}
			}
			for _, r := range b.Rows {
				if r.Cluster != c.want.cluster || r.APIServer != c.want.apiserver {
					t.Errorf("row %s: cluster %q apiserver %q, want %q %q", r.AuditID, r.Cluster, r.APIServer, c.want.cluster, c.want.apiserver)
				}
			}
		})
	}
}

// TestGKETranslation checks the fields of a translated entry that the doc
// of envDecoder.gke says are recovered, and those it says are lost.
func TestGKETranslation(t *testing.T) {
	var b Batch
	line := gkeLine("k8s.io", "io.k8s.core.v1.endpoints.delete", "core/v1/namespaces/default/endpoints/web", `{"code":10,"message":"conflict"}`)
	if _, err := DecodeImportLine(LineSource{}, []byte(line), &b); err != nil || len(b.Rows) != 1 {
		t.Fatalf("%v %+v", err, b)
	}
	r := b.Rows[0]
	got := []any{r.Cluster, r.AuditID, r.Stage, r.Level, r.Verb, r.RequestURI, r.Time, r.ReceivedAt, r.User, r.UserAgent, r.SourceIP,
		r.Resource, r.APIGroup, r.APIVersion, r.Namespace, r.Name, r.ObjectRV, r.ObjectUID, r.Code, r.Annotations, len(r.Groups)}
	want := []any{"prod-gke", "6b3f0e1a-gke", "ResponseComplete", "Request", "delete", "/api/v1/namespaces/default/endpoints/web",
		time.Date(2026, 5, 4, 9, 6, 0, 123456000, time.UTC), time.Unix(0, 0).UTC(), "system:kube-controller-manager", "kube-controller-manager/v1.33.1", "10.0.0.4",
		"endpoints", "", "v1", "default", "web", "2077", "u-1", int32(409), map[string]string{"authorization.k8s.io/decision": "allow"}, 0}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("field %d: got %v, want %v", i, got[i], want[i])
		}
	}

	// A watch: the options GKE does not record are lost; the verb still
	// makes it a watch. With ListOptions in request, they are read.
	for _, c := range []struct {
		request, uri, rv string
	}{
		{``, "/apis/apps/v1/namespaces/kube-system/deployments?watch=true", ""},
		{`,"request":{"@type":"k8s.io/ListOptions","resourceVersion":"1042","limit":"500","timeoutSeconds":372,"allowWatchBookmarks":true}`,
			"/apis/apps/v1/namespaces/kube-system/deployments?allowWatchBookmarks=true&limit=500&resourceVersion=1042&timeoutSeconds=372&watch=true", "1042"},
	} {
		entry := `{"insertId":"w1","timestamp":"2026-05-04T09:06:00Z","resource":{"labels":{"cluster_name":"g"}},"protoPayload":{"@type":"type.googleapis.com/google.cloud.audit.AuditLog",` +
			`"serviceName":"k8s.io","methodName":"io.k8s.apps.v1.deployments.watch","resourceName":"apps/v1/namespaces/kube-system/deployments"` + c.request + `}}`
		var b Batch
		if _, err := DecodeImportLine(LineSource{}, []byte(entry), &b); err != nil || len(b.Rows) != 1 {
			t.Fatalf("%v %+v", err, b)
		}
		r := b.Rows[0]
		if r.AuditID != "w1" || r.RequestURI != c.uri || !r.Watch || r.RequestedRV != c.rv || r.APIGroup != "apps" || r.Namespace != "kube-system" || r.Name != "" || r.Code != 200 {
			t.Errorf("watch row %+v", r)
		}
	}

	for _, c := range []struct{ name, resource, ns, obj, sub, path string }{
		{"core/v1/nodes/n1/status", "nodes", "", "n1", "status", "/api/v1/nodes/n1/status"},
		{"core/v1/namespaces/team", "namespaces", "team", "team", "", "/api/v1/namespaces/team"},
		{"core/v1/namespaces/team/finalize", "namespaces", "team", "team", "finalize", "/api/v1/namespaces/team/finalize"},
		{"coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "leases", "kube-node-lease", "n1", "", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"},
		{"core/v1/pods", "pods", "", "", "", "/api/v1/pods"},
	} {
		ref, path := gkeObject(c.name)
		if ref == nil || ref.Resource != c.resource || ref.Namespace != c.ns || ref.Name != c.obj || ref.Subresource != c.sub || path != c.path {
			t.Errorf("%s: %+v %s", c.name, ref, path)
		}
	}
	if ref, path := gkeObject("version"); ref != nil || path != "/version" {
		t.Errorf("non-resource: %+v %s", ref, path)
	}
}

// selectEvents returns the stored events of a cluster as JSON rows,
// ordered, without the columns named in except.
func selectEvents(t *testing.T, st store.Store, cluster string, except string) []string {
	t.Helper()
	return storetest.JSONRows(t, st, "SELECT * EXCEPT ("+except+") FROM audit_events FINAL WHERE cluster = {c:String} ORDER BY audit_id, stage",
		store.Params{"c": cluster})
}

// TestImportEnvelopesRoundTrip imports each provider's fixture into the
// real engine and checks that it stores exactly what the plain log of the
// same events stores, and that importing them again (or through another
// envelope) stores nothing new.
func TestImportEnvelopesRoundTrip(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	w := NewWriter(st, WriterConfig{})
	path := func(name string) string { return filepath.Join(envelopeDir, name) }

	plain, err := Import(ctx, w, []string{path("plain.log")}, ImportConfig{Cluster: "plain"})
	if err != nil || plain.Rejected != 0 || plain.Kinds[KindAudit] != plain.Events || plain.Events == 0 {
		t.Fatalf("plain: %+v %v", plain, err)
	}
	want := selectEvents(t, st, "plain", "cluster, apiserver")

	for _, c := range []struct {
		files     []string
		cfg       ImportConfig
		cluster   string
		apiserver string
		skipped   int64
	}{
		{[]string{"aks-storage.json", "aks-eventhub.json"}, ImportConfig{ClusterFromEnvelope: true}, fixtureAKSCluster, fixtureAKSPod, fixtureAKSSkipped},
		{[]string{"eks-firehose.gz"}, ImportConfig{ClusterFromEnvelope: true}, fixtureEKSCluster, fixtureEKSStream, fixtureEKSSkipped},
		{[]string{"eks-export.gz"}, ImportConfig{Cluster: "eks-export", ClusterFromEnvelope: true}, "eks-export", "", 0},
		{[]string{"eks-messages.jsonl"}, ImportConfig{Cluster: "eks-messages", ClusterFromEnvelope: true}, "eks-messages", fixtureEKSStream, 0},
	} {
		t.Run(c.files[0], func(t *testing.T) {
			var files []string
			for _, f := range c.files {
				files = append(files, path(f))
			}
			stats, err := Import(ctx, w, files, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			kind := fixtureFiles[c.files[0]]
			events := plain.Events * int64(len(c.files))
			if stats.Events != events || stats.Kinds[kind] != events || stats.Rejected != 0 || stats.Skipped != c.skipped ||
				stats.Stored != plain.Events || stats.Duplicates != events-plain.Events || !reflect.DeepEqual(stats.Clusters, []string{c.cluster}) {
				t.Fatalf("stats %+v", stats)
			}
			if got := selectEvents(t, st, c.cluster, "cluster, apiserver"); !reflect.DeepEqual(got, want) {
				t.Fatalf("%d stored events differ from the plain import's %d; first:\n%.600s\n%.600s", len(got), len(want), first(got), first(want))
			}
			apiservers := storetest.JSONRows(t, st, "SELECT DISTINCT apiserver FROM audit_events WHERE cluster = {c:String}", store.Params{"c": c.cluster})
			if wantAS := []string{`{"apiserver":"` + c.apiserver + `"}`}; !reflect.DeepEqual(apiservers, wantAS) {
				t.Errorf("apiservers %v, want %v", apiservers, wantAS)
			}
			again, err := Import(ctx, w, files, c.cfg)
			if err != nil || again.Stored != 0 {
				t.Fatalf("re-import: %+v %v", again, err)
			}
		})
	}

	// The plain events through an envelope with --cluster plain: all
	// duplicates of the plain import.
	stats, err := Import(ctx, w, []string{path("aks-storage.json"), path("eks-firehose.gz")}, ImportConfig{Cluster: "plain"})
	if err != nil || stats.Stored != 0 || stats.Duplicates != 2*plain.Events || !reflect.DeepEqual(stats.Clusters, []string{"plain"}) {
		t.Fatalf("--cluster over envelopes: %+v %v", stats, err)
	}

	// GKE: one entry per request, translated; compare what it recovers.
	stats, err = Import(ctx, w, []string{path("gke.jsonl")}, ImportConfig{ClusterFromEnvelope: true})
	if err != nil || stats.Rejected != 0 || stats.Events == 0 || stats.Kinds[KindGKE] != stats.Events || stats.Stored != stats.Events ||
		!reflect.DeepEqual(stats.Clusters, []string{fixtureGKECluster}) {
		t.Fatalf("gke: %+v %v", stats, err)
	}
	const recovered = `audit_id, stage, verb, ts, user, user_agent, source_ip, resource, subresource, api_group, api_version, namespace, name, response_rv, watch,
		if(code IN (410, 422), 0, code) AS code_known, if(resource = '', '', request_uri) AS resource_uri`
	query := func(cluster, where string) []string {
		return storetest.JSONRows(t, st, "SELECT "+recovered+" FROM audit_events FINAL WHERE cluster = {c:String}"+where+" ORDER BY audit_id",
			store.Params{"c": cluster})
	}
	var gke, plainRC []map[string]any
	for _, row := range query(fixtureGKECluster, "") {
		var m map[string]any
		stdjson.Unmarshal([]byte(row), &m)
		gke = append(gke, m)
	}
	// The URIs the plain events had, without their queries.
	for _, row := range query("plain", " AND stage = 'ResponseComplete'") {
		plainRC = append(plainRC, stripQuery(row))
	}
	if int64(len(plainRC)) != stats.Events {
		t.Fatalf("%d gke events for %d requests", stats.Events, len(plainRC))
	}
	for i := range gke {
		if !reflect.DeepEqual(gke[i], plainRC[i]) {
			t.Errorf("gke event differs from the plain ResponseComplete event:\n%v\n%v", gke[i], plainRC[i])
		}
	}
	lost := storetest.JSONRows(t, st, "SELECT countIf(received_at != toDateTime64(0, 6, 'UTC')) AS known_start, countIf(req_rv != '') AS rv, countIf(notEmpty(user_groups)) AS groups FROM audit_events WHERE cluster = {c:String}",
		store.Params{"c": fixtureGKECluster})
	if want := []string{`{"known_start":0,"rv":0,"groups":0}`}; !reflect.DeepEqual(lost, want) {
		t.Errorf("lost fields: %v, want %v", lost, want)
	}
}

// stripQuery parses a JSON row and removes the query of its resource_uri,
// but for the watch=true a watch's verb implies.
func stripQuery(row string) map[string]any {
	var m map[string]any
	stdjson.Unmarshal([]byte(row), &m)
	if u, ok := m["resource_uri"].(string); ok {
		uri, _, _ := strings.Cut(u, "?")
		if m["verb"] == "watch" {
			uri += "?watch=true"
		}
		m["resource_uri"] = uri
	}
	return m
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestImportStdinAndNoCluster reads "-" and rejects plain lines that name
// no cluster, one by one, while envelope lines are kept.
func TestImportStdinAndNoCluster(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envelopeDir, "aks-storage.json"))
	if err != nil {
		t.Fatal(err)
	}
	mixed := append(append(bytes.Clone(data), []byte(envEvent+"\n")...), []byte("garbage\n")...)
	stats, err := Import(context.Background(), nil, []string{Stdin}, ImportConfig{ClusterFromEnvelope: true, Stdin: bytes.NewReader(gzipped(string(mixed)))})
	if err != nil {
		t.Fatal(err)
	}
	lines := int64(bytes.Count(data, []byte("\n")))
	if stats.Events != lines || stats.Rejected != 2 || stats.NoCluster != 1 || stats.Kinds[KindAKS] != lines ||
		!strings.HasPrefix(stats.RejectSamples[0], fmt.Sprintf("stdin:%d: ", lines+1)) || !strings.Contains(stats.RejectSamples[0], "pass --cluster") {
		t.Fatalf("%+v", stats)
	}
	if _, err := Import(context.Background(), nil, []string{Stdin}, ImportConfig{}); err == nil {
		t.Fatal("no cluster and not from the envelope: want an error")
	}
}

// TestImportJSONArray reads a file that is one pretty-printed JSON array,
// as `gcloud logging read --format=json` writes, element by element.
func TestImportJSONArray(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envelopeDir, "gke.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []stdjson.RawMessage
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		entries = append(entries, line)
	}
	pretty, err := stdjson.MarshalIndent(entries, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "gke.json")
	os.WriteFile(file, append([]byte("\n  "), pretty...), 0o644)
	stats, err := Import(context.Background(), nil, []string{file}, ImportConfig{ClusterFromEnvelope: true})
	if err != nil || stats.Events != int64(len(entries)) || stats.Kinds[KindGKE] != stats.Events || stats.Rejected != 0 {
		t.Fatalf("%+v %v", stats, err)
	}
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, pretty[:len(pretty)/2], 0o644)
	if _, err := Import(context.Background(), nil, []string{broken}, ImportConfig{ClusterFromEnvelope: true}); err == nil || !strings.Contains(err.Error(), "JSON array") {
		t.Fatalf("truncated array: %v", err)
	}
}

func TestLineSourceClusterFor(t *testing.T) {
	for _, c := range []struct {
		src               LineSource
		envelope, cluster string
	}{
		{LineSource{Cluster: "a", Fixed: true}, "b", "a"},
		{LineSource{Cluster: "a", Fixed: true}, "", "a"},
		{LineSource{Fixed: true}, "b", ""},
		{LineSource{Cluster: "a"}, "b", "b"},
		{LineSource{Cluster: "a"}, "", "a"},
		{LineSource{}, "b", "b"},
		{LineSource{}, "", ""},
		{LineSource{Cluster: "a"}, "b/c", ""},
	} {
		got, reason := c.src.clusterFor(c.envelope)
		if got != c.cluster || (got == "") != (reason != "") {
			t.Errorf("%+v for %q: %q %q, want %q", c.src, c.envelope, got, reason, c.cluster)
		}
	}
}
