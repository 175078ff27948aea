package query

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/chunks"
	"github.com/auditlens/auditlens/store"
)

// TestParquetRowRoundTrip: what a window holds of a row (appendParquetRow)
// reads back (parquetRow) as the row's columns, for edge values: empty and
// long strings, bytes that are not UTF-8, no, one and many groups and
// annotations, integer extremes, times before the epoch; and a row read
// after a longer one keeps none of it.
func TestParquetRowRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	rows := []store.Row{
		{Cluster: "a", AuditID: "id-1", Stage: "ResponseComplete", Time: t0, ReceivedAt: t0.Add(-time.Second),
			APIServer: "apiserver-1", Level: "Metadata", Verb: "watch", RequestURI: "/api/v1/services?watch=true&resourceVersion=7",
			User: "system:kube-proxy", Groups: []string{"system:nodes", "system:authenticated"}, UserAgent: "kube-proxy/v1.37.2",
			SourceIP: "10.0.0.1", Resource: "services", APIVersion: "v1", Code: 200, Watch: true, RequestedRV: "7",
			TimeoutSeconds: 412, Limit: 500, Annotations: map[string]string{"authorization.k8s.io/decision": "allow", "b": ""},
			Raw: []byte(`{"auditID":"id-1"}`)},
		{Cluster: "b", AuditID: "id-2", Stage: "RequestReceived", Time: time.Unix(-86400, 0).UTC(), ReceivedAt: time.Unix(-86400, 0).UTC(),
			User: "ü\xff\x00", Name: strings.Repeat("n", 70000), Code: -1, TimeoutSeconds: -2147483648, Limit: 9223372036854775807,
			Groups: slices.Repeat([]string{"g"}, 300), Raw: []byte(`{}`)},
		{Cluster: "c", AuditID: "id-3", Stage: "Panic", Time: t0, ReceivedAt: t0, Raw: []byte(`{"x":1}`)},
	}
	var w chunks.Sorted
	for i := range rows {
		buf := w.Begin(rows[i].Time.UnixMicro(), rows[i].AuditID, rows[i].Stage, rows[i].Cluster)
		buf, err := appendParquetRow(buf, &rows[i])
		if err != nil {
			t.Fatal(err)
		}
		w.End(buf)
	}
	var e parquetEvent // reused, as a batch's slots are
	i := 0
	if err := w.Each(func(k chunks.Key, item []byte) error {
		if err := parquetRow(&e, k, item); err != nil {
			return err
		}
		r := rows[i]
		want := parquetEvent{Cluster: r.Cluster, APIServer: r.APIServer, Time: r.Time.UnixMicro(), ReceivedAt: r.ReceivedAt.UnixMicro(),
			AuditID: r.AuditID, Stage: r.Stage, Level: r.Level, Verb: r.Verb, RequestURI: r.RequestURI, User: r.User,
			ImpersonatedUser: r.ImpersonatedUser, UserAgent: r.UserAgent, SourceIP: r.SourceIP, Resource: r.Resource,
			Subresource: r.Subresource, APIGroup: r.APIGroup, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name,
			ObjectRV: r.ObjectRV, ObjectUID: r.ObjectUID, Code: r.Code, ResponseRV: r.ResponseRV, Watch: r.Watch,
			RequestedRV: r.RequestedRV, RVMatch: r.RVMatch, TimeoutSeconds: r.TimeoutSeconds, LabelSelector: r.LabelSelector,
			FieldSelector: r.FieldSelector, Limit: r.Limit, Continue: r.Continue, Raw: string(r.Raw)}
		got := e
		got.Groups, got.Annotations = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("row %d: read back\n%+v\nwant\n%+v", i, got, want)
		}
		if !slices.Equal(e.Groups, r.Groups) || !maps.Equal(e.Annotations, r.Annotations) {
			t.Errorf("row %d: groups %q annotations %q, want %q %q", i, e.Groups, e.Annotations, r.Groups, r.Annotations)
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i != len(rows) {
		t.Fatalf("%d rows read back, want %d", i, len(rows))
	}
	// A cut item is an error, not a row.
	buf, _ := appendParquetRow(nil, &rows[0])
	for _, n := range []int{0, 1, 5, len(buf) - len(rows[0].Raw) - 3} {
		if err := parquetRow(&e, chunks.Key{}, buf[:n]); err == nil {
			t.Errorf("an item cut to %d of %d bytes read without an error", n, len(buf))
		}
	}
}
