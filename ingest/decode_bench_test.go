package ingest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

var genStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestGeneratedCorpusDecodes decodes realistic webhook bodies and log lines
// and checks every row against what the upstream types decode from the
// same bytes.
func TestGeneratedCorpusDecodes(t *testing.T) {
	g := auditgen.New(7, genStart)
	for range 5 {
		body := g.EventListBody(400)
		b, err := ingest.DecodeBody("gen", body)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rejects) != 0 {
			t.Fatalf("rejects: %+v", b.Rejects)
		}
		var list auditv1.EventList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) != len(list.Items) {
			t.Fatalf("%d rows for %d items", len(b.Rows), len(list.Items))
		}
		for i := range list.Items {
			compare(t, &list.Items[i], b.Rows[i].AuditID, func() []string { return rowFields(&b.Rows[i]) })
		}
	}

	var log bytes.Buffer
	if err := g.WriteLog(&log, 2000); err != nil {
		t.Fatal(err)
	}
	var b ingest.Batch
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		if err := ingest.DecodeLine("gen", sc.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Rows) != 2000 || len(b.Rejects) != 0 {
		t.Fatalf("%d rows, rejects %+v", len(b.Rows), b.Rejects)
	}
	for i := range b.Rows {
		var ev auditv1.Event
		if err := json.Unmarshal(b.Rows[i].Raw, &ev); err != nil {
			t.Fatal(err)
		}
		compare(t, &ev, b.Rows[i].AuditID, func() []string { return rowFields(&b.Rows[i]) })
	}
}

// compare checks a row's fields, as rowFields lists them, against the
// upstream event.
func compare(t *testing.T, ev *auditv1.Event, id string, got func() []string) {
	t.Helper()
	want := eventFields(t, ev)
	g := got()
	for i := range want {
		if g[i] != want[i] {
			t.Fatalf("event %s field %d: got %q, want %q", id, i, g[i], want[i])
		}
	}
}

func rowFields(r *store.Row) []string {
	ann, _ := json.Marshal(r.Annotations)
	groups, _ := json.Marshal(r.Groups)
	return []string{
		r.AuditID, r.Stage, r.Level, r.Verb, r.RequestURI,
		r.Time.Format(time.RFC3339Nano), r.ReceivedAt.Format(time.RFC3339Nano),
		r.User, string(groups), r.UserAgent, r.SourceIP,
		r.Resource, r.Subresource, r.APIGroup, r.APIVersion, r.Namespace, r.Name, r.ObjectRV, r.ObjectUID,
		strconv.Itoa(int(r.Code)), r.ResponseRV, string(ann),
	}
}

func eventFields(t *testing.T, ev *auditv1.Event) []string {
	ref := ev.ObjectRef
	if ref == nil {
		ref = &auditv1.ObjectReference{}
	}
	var code int32
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	var respRV string
	if ev.ResponseObject != nil {
		var obj struct {
			Metadata struct{ ResourceVersion string } `json:"metadata"`
		}
		if err := json.Unmarshal(ev.ResponseObject.Raw, &obj); err != nil {
			t.Fatal(err)
		}
		respRV = obj.Metadata.ResourceVersion
	}
	ann := []byte("null")
	if len(ev.Annotations) > 0 {
		ann, _ = json.Marshal(ev.Annotations)
	}
	groups, _ := json.Marshal(ev.User.Groups)
	return []string{
		string(ev.AuditID), string(ev.Stage), string(ev.Level), ev.Verb, ev.RequestURI,
		ev.StageTimestamp.UTC().Format(time.RFC3339Nano), ev.RequestReceivedTimestamp.UTC().Format(time.RFC3339Nano),
		ev.User.Username, string(groups), ev.UserAgent, ev.SourceIPs[0],
		ref.Resource, ref.Subresource, ref.APIGroup, ref.APIVersion, ref.Namespace, ref.Name, ref.ResourceVersion, string(ref.UID),
		strconv.Itoa(int(code)), respRV, string(ann),
	}
}

// benchBody is a 400-event webhook body, the apiserver's default batch.
func benchBody(b *testing.B) []byte {
	body := auditgen.New(1, genStart).EventListBody(400)
	b.Logf("body: %d events, %d bytes", 400, len(body))
	return body
}

func reportEvents(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodeBody decodes a realistic 400-event EventList into rows.
func BenchmarkDecodeBody(b *testing.B) {
	body := benchBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		batch, err := ingest.DecodeBody("bench", body)
		if err != nil || len(batch.Rows) != 400 {
			b.Fatalf("%v, %d rows", err, len(batch.Rows))
		}
		n += len(batch.Rows)
	}
	reportEvents(b, n)
}

// BenchmarkDecodeBodyStdlibK8sTypes is the baseline: encoding/json into
// the upstream auditv1.EventList, with no flattening at all.
func BenchmarkDecodeBodyStdlibK8sTypes(b *testing.B) {
	body := benchBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		var list auditv1.EventList
		if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 400 {
			b.Fatalf("%v, %d items", err, len(list.Items))
		}
		n += len(list.Items)
	}
	reportEvents(b, n)
}

// BenchmarkDecodeLine decodes log backend lines, one event each.
func BenchmarkDecodeLine(b *testing.B) {
	var log bytes.Buffer
	if err := auditgen.New(1, genStart).WriteLog(&log, 400); err != nil {
		b.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(log.Bytes(), []byte("\n")), []byte("\n"))
	b.SetBytes(int64(log.Len()))
	b.ReportAllocs()
	n := 0
	var batch ingest.Batch
	for b.Loop() {
		batch.Rows = batch.Rows[:0]
		for _, line := range lines {
			if err := ingest.DecodeLine("bench", line, &batch); err != nil {
				b.Fatal(err)
			}
		}
		n += len(batch.Rows)
	}
	reportEvents(b, n)
}
