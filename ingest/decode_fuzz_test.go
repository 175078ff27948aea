package ingest

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// fuzzSeeds are inputs worth starting from: real shapes and near misses.
var fuzzSeeds = []string{
	list("audit.k8s.io/v1", watchEvent, updateEvent),
	list("audit.k8s.io/v1beta1", `{"metadata":{"creationTimestamp":"2018-02-01T10:00:02Z"},"auditID":"b","stage":"ResponseComplete","timestamp":"2018-02-01T10:00:01Z"}`),
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1",` + watchEvent[1:],
	watchEvent,
	`{"items":[1,null,"x",{},{"auditID":"a"},{"auditID":"a","stage":"Panic","stageTimestamp":"2026-03-01T12:00:00.1+01:00"}]}`,
	`{"auditID":"a","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","responseObject":{"metadata":{"resourceVersion":5}}}`,
	`{"auditID":"a","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","responseStatus":{"code":"x"},"annotations":{"a":1}}`,
	`{"kind":"Pod","apiVersion":"v1"}`,
	// Events a line's one-pass read takes, then rejects.
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a","stage":"Bogus","stageTimestamp":"2026-03-01T12:00:00Z"}`,
	`{"auditID":"a","stage":"ResponseComplete"}`,
	`{"kind":5}`,
	`[]`,
	`{}`,
	``,
	`{"items":[{"auditID":"\u00e9\ud800","stage":"RequestReceived","stageTimestamp":"2026-03-01T12:00:00Z"}]}`,
	// Kubernetes 1.7 (v1alpha1, group/version in objectRef.apiVersion) and
	// 1.8 (v1beta1 with second-precision timestamp only): decode_old_test.go.
	v17WebhookBody,
	strings.SplitN(v18LogLines, "\n", 2)[0],
	list("audit.k8s.io/v1alpha1", `{"auditID":"a","stage":"ResponseComplete","timestamp":"2018-01-15T08:21:44Z","objectRef":{"apiVersion":"/a/b/"}}`,
		`{"auditID":"b","stage":"Panic","metadata":{"creationTimestamp":"2018-01-15T08:21:44Z"},"objectRef":{"apiGroup":"g","apiVersion":"x/y"}}`),
}

// checkRows verifies what every decoded row must satisfy.
func checkRows(t *testing.T, input []byte, b Batch) {
	t.Helper()
	for i, r := range b.Rows {
		if r.Cluster != "c" || r.AuditID == "" || internStage(r.Stage) == "" {
			t.Fatalf("row %d: cluster %q auditID %q stage %q", i, r.Cluster, r.AuditID, r.Stage)
		}
		for _, ts := range []time.Time{r.Time, r.ReceivedAt} {
			if ts.IsZero() || ts.Location() != time.UTC || ts.Nanosecond()%1000 != 0 {
				t.Fatalf("row %d: time %v is zero, not UTC or finer than microseconds", i, ts)
			}
		}
		if !stdjson.Valid(r.Raw) || r.Raw[0] != '{' {
			t.Fatalf("row %d: Raw is not a JSON object: %q", i, r.Raw)
		}
		if overlaps(r.Raw, input) {
			t.Fatalf("row %d: Raw aliases the input", i)
		}
		if r.Watch != (r.Verb == "watch" || ParseRequestURI(r.RequestURI).Watch) {
			t.Fatalf("row %d: Watch %v for verb %q URI %q", i, r.Watch, r.Verb, r.RequestURI)
		}
	}
	for _, rj := range b.Rejects {
		if rj.Reason == "" || rj.Index < 0 {
			t.Fatalf("reject %+v", rj)
		}
	}
}

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// wantItems says how many rows plus rejects encoding/json expects from a
// document DecodeBody accepted: the length of a list's items, or 1.
func wantItems(doc []byte) (int, bool) {
	var env struct {
		Kind  string                `json:"kind"`
		Items *[]stdjson.RawMessage `json:"items"`
	}
	if err := stdjson.Unmarshal(doc, &env); err != nil {
		return 0, false
	}
	if env.Kind == "EventList" || (env.Kind == "" && env.Items != nil) {
		if env.Items == nil {
			return 0, true
		}
		return len(*env.Items), true
	}
	return 1, true
}

func FuzzDecodeBody(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		b, err := DecodeBody("c", body)
		if !bytes.Equal(in, body) {
			t.Fatal("DecodeBody modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrNotAudit) {
				t.Fatalf("error %v does not wrap ErrNotAudit", err)
			}
			if len(b.Rows)+len(b.Rejects) != 0 {
				t.Fatalf("batch %+v with error %v", b, err)
			}
			return
		}
		if !stdjson.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		checkRows(t, body, b)
		if want, ok := wantItems(body); ok && len(b.Rows)+len(b.Rejects) != want {
			t.Fatalf("%d rows + %d rejects, want %d items", len(b.Rows), len(b.Rejects), want)
		}
	})
}

func FuzzDecodeLine(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(" \r\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		// A line is read in one pass; a body the careful way (envelope,
		// then each event). Both must give the same rows, rejects and
		// errors.
		var careful Batch
		var carefulErr error
		blank := len(bytes.TrimSpace(line)) == 0
		if !blank {
			careful, carefulErr = DecodeBody("c", bytes.TrimSpace(line))
		}
		b := Batch{Rejects: []Reject{{Index: 7, Reason: "earlier"}}}
		err := DecodeLine("c", line, &b)
		if !blank {
			if fmt.Sprint(err) != fmt.Sprint(carefulErr) {
				t.Fatalf("DecodeLine error %v, DecodeBody's %v", err, carefulErr)
			}
			if !reflect.DeepEqual(b.Rows, careful.Rows) && len(b.Rows)+len(careful.Rows) > 0 {
				t.Fatalf("DecodeLine rows %+v, DecodeBody's %+v", b.Rows, careful.Rows)
			}
			if got := b.Rejects[1:]; !reflect.DeepEqual(got, careful.Rejects) && len(got)+len(careful.Rejects) > 0 {
				t.Fatalf("DecodeLine rejects %+v, DecodeBody's %+v", got, careful.Rejects)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrNotAudit) {
				t.Fatalf("error %v does not wrap ErrNotAudit", err)
			}
			if len(b.Rows) != 0 || len(b.Rejects) != 1 {
				t.Fatalf("batch changed with error %v: %+v", err, b)
			}
			return
		}
		if b.Rejects[0].Reason != "earlier" {
			t.Fatal("earlier reject overwritten")
		}
		checkRows(t, line, b)
		if len(bytes.TrimSpace(line)) == 0 {
			if len(b.Rows) != 0 || len(b.Rejects) != 1 {
				t.Fatalf("blank line added %+v", b)
			}
			return
		}
		if want, ok := wantItems(line); ok && len(b.Rows)+len(b.Rejects)-1 != want {
			t.Fatalf("%d rows + %d rejects, want %d items", len(b.Rows), len(b.Rejects)-1, want)
		}
	})
}

func FuzzParseRequestURI(f *testing.F) {
	for _, s := range []string{
		"/api/v1/services?allowWatchBookmarks=true&resourceVersion=224&timeoutSeconds=423&watch=true",
		"/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3&labelSelector=a+in+%28x%29&limit=500&continue=abc%3D",
		"/apis/apps/v1/watch/namespaces/ns/deployments?resourceVersion=1",
		"/api/v1/pods?labelSelector=%zz&watch=FALSE&watch=1#x",
		"?&=&%&&watch",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		p := ParseRequestURI(uri)
		// Where net/url parses the query without complaint, both agree.
		path, query, _ := strings.Cut(uri, "?")
		if strings.Contains(uri, "#") {
			return
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		first := func(k string) string { return q.Get(k) }
		if p.ResourceVersion != first("resourceVersion") || p.ResourceVersionMatch != first("resourceVersionMatch") ||
			p.LabelSelector != first("labelSelector") || p.FieldSelector != first("fieldSelector") ||
			p.Continue != first("continue") {
			t.Fatalf("%q: got %+v, net/url says %v", uri, p, q)
		}
		wantWatch := isLegacyWatchPath(path)
		if w, ok := q["watch"]; ok {
			wantWatch = wantWatch || !(w[0] == "0" || strings.EqualFold(w[0], "false"))
		}
		if p.Watch != wantWatch {
			t.Fatalf("%q: Watch %v, want %v", uri, p.Watch, wantWatch)
		}
		if n, err := strconv.ParseInt(first("timeoutSeconds"), 10, 32); (err == nil && int32(n) != p.TimeoutSeconds) || (err != nil && p.TimeoutSeconds != 0) {
			t.Fatalf("%q: TimeoutSeconds %d", uri, p.TimeoutSeconds)
		}
		if n, err := strconv.ParseInt(first("limit"), 10, 64); (err == nil && n != p.Limit) || (err != nil && p.Limit != 0) {
			t.Fatalf("%q: Limit %d", uri, p.Limit)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2026-03-01T12:34:56Z",
		"2026-03-01T12:34:56.123Z",
		"2026-03-01T12:34:56.123456Z",
		"2026-03-01T12:34:56.123456789+05:30",
		"2024-02-29t23:59:59,5z",
		"2026-03-01T12:34:56.Z",
		"0000-01-01T00:00:00-23:59",
		"garbage",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		gotB, errB := ParseTime([]byte(s))
		if !got.Equal(gotB) || (err == nil) != (errB == nil) {
			t.Fatalf("%q: string and []byte disagree", s)
		}
		if err != nil {
			if !errors.Is(err, ErrBadTime) || !got.IsZero() {
				t.Fatalf("%q: err %v, time %v", s, err, got)
			}
		} else if got.Location() != time.UTC || got.Nanosecond()%1000 != 0 {
			t.Fatalf("%q: %v is not UTC microseconds", s, got)
		}
		// What the standard library reads as RFC 3339, ParseTime reads the same.
		if want, stdErr := time.Parse(time.RFC3339Nano, s); stdErr == nil {
			if err != nil {
				t.Fatalf("%q: time.Parse accepts it, ParseTime says %v", s, err)
			}
			if !got.Equal(want.Truncate(time.Microsecond)) {
				t.Fatalf("%q: got %v, time.Parse %v", s, got, want)
			}
		}
	})
}
