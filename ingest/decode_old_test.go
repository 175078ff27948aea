package ingest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// Events of the incident era, written by hand from the Go types of
// k8s.io/apiserver/pkg/apis/audit/v1alpha1 (1.7) and v1beta1 (1.8): one
// second-precision "timestamp" (when the request arrived), no
// stageTimestamp or requestReceivedTimestamp, no userAgent, ObjectMeta
// serialized with a null creationTimestamp. v1alpha1's objectRef has no
// apiGroup: its apiVersion is group/version.

// v17WebhookBody is what a 1.7 kube-apiserver's webhook backend POSTs: a
// v1alpha1 EventList whose items carry no kind or apiVersion. The
// controller-manager re-watches Services from resourceVersion 2270 and
// deletes an Endpoints; a Deployment is updated through extensions/v1beta1.
const v17WebhookBody = `{"kind":"EventList","apiVersion":"audit.k8s.io/v1alpha1","metadata":{},"items":[` +
	`{"metadata":{"creationTimestamp":null},"level":"Metadata","timestamp":"2018-01-15T08:21:44Z","auditID":"5c2b1f0e-8d0a-4f6e-9a51-3f2e6b7c8d90","stage":"RequestReceived",` +
	`"requestURI":"/api/v1/services?resourceVersion=2270\u0026timeoutSeconds=381\u0026watch=true","verb":"watch",` +
	`"user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},"sourceIPs":["10.240.0.11"],` +
	`"objectRef":{"resource":"services","apiVersion":"v1"}},` +
	`{"metadata":{"creationTimestamp":null},"level":"Metadata","timestamp":"2018-01-15T08:21:44Z","auditID":"0a9d8c7b-6e5f-4a3b-8c2d-1e0f9a8b7c6d","stage":"ResponseComplete",` +
	`"requestURI":"/api/v1/namespaces/default/endpoints/api","verb":"delete",` +
	`"user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},"sourceIPs":["10.240.0.11"],` +
	`"objectRef":{"resource":"endpoints","namespace":"default","name":"api","apiVersion":"v1"},` +
	`"responseStatus":{"metadata":{},"status":"Success","code":200}},` +
	`{"metadata":{"creationTimestamp":null},"level":"Request","timestamp":"2018-01-15T08:21:45Z","auditID":"c3d4e5f6-0718-4293-a4b5-c6d7e8f90a1b","stage":"ResponseComplete",` +
	`"requestURI":"/apis/extensions/v1beta1/namespaces/web/deployments/frontend","verb":"update",` +
	`"user":{"username":"admin","groups":["system:masters","system:authenticated"]},"sourceIPs":["192.168.5.20"],` +
	`"objectRef":{"resource":"deployments","namespace":"web","name":"frontend","uid":"9f8e7d6c-5b4a-11e8-9c2d-fa163e4c1b2a","apiVersion":"extensions/v1beta1","resourceVersion":"2301"},` +
	`"responseStatus":{"metadata":{},"code":200},` +
	`"requestObject":{"kind":"Deployment","apiVersion":"extensions/v1beta1","metadata":{"name":"frontend","namespace":"web","resourceVersion":"2301"}}}` +
	`]}`

// v18LogLines are a 1.8 kube-apiserver's JSON log lines (audit.k8s.io/v1beta1,
// kind and apiVersion on every line): the endpoints controller deletes and
// re-creates an Endpoints in the same second, which must stay two events.
const v18LogLines = `{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1","metadata":{"creationTimestamp":"2018-02-02T10:00:07Z"},"level":"Metadata","timestamp":"2018-02-02T10:00:07Z","auditID":"11111111-2222-4333-8444-555555555555","stage":"ResponseComplete",` +
	`"requestURI":"/api/v1/namespaces/payments/endpoints/billing","verb":"delete","user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},"sourceIPs":["10.240.0.12"],` +
	`"objectRef":{"resource":"endpoints","namespace":"payments","name":"billing","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Success","code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1","metadata":{"creationTimestamp":"2018-02-02T10:00:07Z"},"level":"Metadata","timestamp":"2018-02-02T10:00:07Z","auditID":"66666666-7777-4888-9999-aaaaaaaaaaaa","stage":"ResponseComplete",` +
	`"requestURI":"/api/v1/namespaces/payments/endpoints","verb":"create","user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},"sourceIPs":["10.240.0.12"],` +
	`"objectRef":{"resource":"endpoints","namespace":"payments","name":"billing","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1","metadata":{"creationTimestamp":"2018-02-02T10:00:08Z"},"level":"Metadata","timestamp":"2018-02-02T10:00:08Z","auditID":"bbbbbbbb-cccc-4ddd-8eee-ffffffffffff","stage":"ResponseComplete",` +
	`"requestURI":"/apis/apps/v1beta2/namespaces/payments/statefulsets/ledger/status","verb":"update","user":{"username":"system:serviceaccount:kube-system:statefulset-controller","groups":["system:serviceaccounts","system:serviceaccounts:kube-system","system:authenticated"]},"sourceIPs":["10.240.0.12"],` +
	`"objectRef":{"resource":"statefulsets","namespace":"payments","name":"ledger","apiGroup":"apps","apiVersion":"v1beta2","resourceVersion":"88120","subresource":"status"},"responseStatus":{"metadata":{},"code":200}}
`

func TestDecodeKubernetes17(t *testing.T) {
	check := func(t *testing.T, rows []store.Row) {
		t.Helper()
		if len(rows) != 3 {
			t.Fatalf("%d rows, want 3", len(rows))
		}
		watch, del, upd := rows[0], rows[1], rows[2]
		at := time.Date(2018, 1, 15, 8, 21, 44, 0, time.UTC)
		if !watch.Time.Equal(at) || !watch.ReceivedAt.Equal(at) || !del.Time.Equal(at) {
			t.Errorf("times %v %v %v, want the timestamp %v", watch.Time, watch.ReceivedAt, del.Time, at)
		}
		if !watch.Watch || watch.RequestedRV != "2270" || watch.TimeoutSeconds != 381 || watch.Stage != "RequestReceived" ||
			watch.User != "system:kube-controller-manager" || watch.UserAgent != "" || watch.SourceIP != "10.240.0.11" {
			t.Errorf("watch row %+v", watch)
		}
		if watch.APIGroup != "" || watch.APIVersion != "v1" || watch.Resource != "services" {
			t.Errorf("core group/version: %q %q", watch.APIGroup, watch.APIVersion)
		}
		if del.Verb != "delete" || del.Code != 200 || del.Namespace != "default" || del.Name != "api" {
			t.Errorf("delete row %+v", del)
		}
		if upd.APIGroup != "extensions" || upd.APIVersion != "v1beta1" || upd.ObjectRV != "2301" || upd.Level != "Request" ||
			!upd.Time.Equal(at.Add(time.Second)) {
			t.Errorf("update row: group %q version %q rv %q level %q time %v", upd.APIGroup, upd.APIVersion, upd.ObjectRV, upd.Level, upd.Time)
		}
	}
	t.Run("webhook EventList", func(t *testing.T) {
		b, err := DecodeBody("old", []byte(v17WebhookBody))
		if err != nil || len(b.Rejects) > 0 {
			t.Fatalf("DecodeBody: %v %+v", err, b.Rejects)
		}
		check(t, b.Rows)
	})
	t.Run("log lines", func(t *testing.T) {
		// The same events as log lines, each a bare Event with kind and
		// apiVersion.
		b, err := DecodeBody("old", []byte(v17WebhookBody))
		if err != nil {
			t.Fatal(err)
		}
		var lines Batch
		for _, r := range b.Rows {
			line := `{"kind":"Event","apiVersion":"audit.k8s.io/v1alpha1",` + string(r.Raw[1:])
			if err := DecodeLine("old", []byte(line), &lines); err != nil {
				t.Fatal(err)
			}
		}
		if len(lines.Rejects) > 0 {
			t.Fatalf("rejects %+v", lines.Rejects)
		}
		check(t, lines.Rows)
	})
	t.Run("spooled event", func(t *testing.T) {
		b, _ := DecodeBody("old", []byte(v17WebhookBody))
		row, err := DecodeEvent("old", b.Rows[2].Raw)
		if err != nil || row.APIGroup != "extensions" || row.APIVersion != "v1beta1" {
			t.Fatalf("DecodeEvent: %+v, %v", row, err)
		}
	})
}

func TestDecodeKubernetes18(t *testing.T) {
	var b Batch
	for line := range strings.Lines(v18LogLines) {
		if err := DecodeLine("old", []byte(line), &b); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Rows) != 3 || len(b.Rejects) > 0 {
		t.Fatalf("%d rows, rejects %+v", len(b.Rows), b.Rejects)
	}
	del, cre, sts := b.Rows[0], b.Rows[1], b.Rows[2]
	at := time.Date(2018, 2, 2, 10, 0, 7, 0, time.UTC)
	if !del.Time.Equal(at) || !cre.Time.Equal(at) || del.Key() == cre.Key() {
		t.Errorf("delete %v %+v, create %v %+v", del.Time, del.Key(), cre.Time, cre.Key())
	}
	if cre.Code != 201 || cre.Verb != "create" || cre.Name != "billing" || cre.UserAgent != "" {
		t.Errorf("create row %+v", cre)
	}
	if sts.APIGroup != "apps" || sts.APIVersion != "v1beta2" || sts.Subresource != "status" || sts.ObjectRV != "88120" {
		t.Errorf("statefulset row: %q %q %q %q", sts.APIGroup, sts.APIVersion, sts.Subresource, sts.ObjectRV)
	}
	// The same events as a webhook EventList: items without kind.
	var items []string
	for line := range strings.Lines(v18LogLines) {
		items = append(items, "{"+strings.TrimSpace(line)[len(`{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1",`):])
	}
	wb, err := DecodeBody("old", []byte(list("audit.k8s.io/v1beta1", items...)))
	if err != nil || len(wb.Rows) != 3 || !wb.Rows[1].Time.Equal(at) {
		t.Fatalf("EventList: %v, %d rows", err, len(wb.Rows))
	}
}

// TestImportOldFormats stores 1.7 and 1.8 events on the engine: the
// delete and create of one Endpoints in the same second stay two rows.
func TestImportOldFormats(t *testing.T) {
	st := storetest.Open(t)
	dir := t.TempDir()
	files := map[string]string{"v17.ndjson": v17WebhookBody + "\n", "v18.log": v18LogLines}
	var paths []string
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	stats, err := Import(context.Background(), NewWriter(st, WriterConfig{}), paths, ImportConfig{Cluster: "old", APIServer: "master-1"})
	if err != nil || stats.Stored != 6 || stats.Rejected != 0 {
		t.Fatalf("import: %+v, %v", stats, err)
	}
	got := storetest.JSONRows(t, st, `SELECT verb, api_group, api_version, toString(ts) AS t FROM audit_events FINAL
WHERE cluster = 'old' AND apiserver = 'master-1' AND resource IN ('endpoints', 'deployments') ORDER BY ts, verb`, nil)
	want := []string{
		`{"verb":"delete","api_group":"","api_version":"v1","t":"2018-01-15 08:21:44.000000"}`,
		`{"verb":"update","api_group":"extensions","api_version":"v1beta1","t":"2018-01-15 08:21:45.000000"}`,
		`{"verb":"create","api_group":"","api_version":"v1","t":"2018-02-02 10:00:07.000000"}`,
		`{"verb":"delete","api_group":"","api_version":"v1","t":"2018-02-02 10:00:07.000000"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stored\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
