package query

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
)

// TestRebuilderEvent: a row stored as its residual is rebuilt from the
// typed columns Events reads; a row stored before residuals reads as its
// raw event.
func TestRebuilderEvent(t *testing.T) {
	r := store.Row{
		Cluster: "c", AuditID: "a", Stage: "ResponseComplete", Level: "Metadata", Verb: "get", RequestURI: "/api/v1/pods",
		Time: time.Date(2026, 3, 1, 12, 0, 0, 2000, time.UTC), ReceivedAt: time.Date(2026, 3, 1, 12, 0, 0, 1000, time.UTC),
		User: "u", Groups: []string{"g1", `g"2`}, ImpersonatedUser: "i", UserAgent: "ua", SourceIP: "10.0.0.1",
		Resource: "pods", Subresource: "log", APIVersion: "v1", Namespace: "n", Name: "p", ObjectRV: "5",
		ObjectUID: "uid", Code: -404, Annotations: map[string]string{"a": "1", "b": "\u2028"},
		Residual: []byte("pd\x04kind"),
	}
	var rb rebuilder
	ev, err := rb.event(&r)
	if err != nil {
		t.Fatal(err)
	}
	const wantEvent = `{"apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"get",` +
		`"user":{"username":"u","groups":["g1","g\"2"]},"impersonatedUser":{"username":"i"},"sourceIPs":["10.0.0.1"],"userAgent":"ua",` +
		`"objectRef":{"resource":"pods","namespace":"n","name":"p","uid":"uid","apiVersion":"v1","resourceVersion":"5","subresource":"log"},` +
		`"responseStatus":{"metadata":{},"code":-404},"requestReceivedTimestamp":"2026-03-01T12:00:00.000001Z",` +
		`"stageTimestamp":"2026-03-01T12:00:00.000002Z","annotations":{"a":"1","b":"\u2028"}}`
	if string(ev) != wantEvent {
		t.Errorf("rebuilt event\n got  %s\n want %s", ev, wantEvent)
	}
	old := store.Row{Cluster: "c", AuditID: "b", Stage: "Panic", Raw: []byte("{}")}
	if ev, err := rb.event(&old); err != nil || string(ev) != "{}" {
		t.Errorf("old row: %s, %v", ev, err)
	}
}

// TestEventColumnsAreRowColumns: what Events selects, SelectRows reads.
func TestEventColumnsAreRowColumns(t *testing.T) {
	for c := range strings.SplitSeq(eventColumns, ", ") {
		if !slices.Contains(store.RowColumns(), c) {
			t.Errorf("event column %q is not a store.Row column", c)
		}
	}
}
