package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/gen/auditgen"
)

// logLines returns n audit log lines as the apiserver's log backend writes them.
func logLines(t testing.TB, n int) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := auditgen.New(3, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).WriteLog(&buf, n); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

// otlpResource is one ResourceLogs of a test request: its attributes and
// its records' bodies (a string, a map[string]any, or another raw value).
type otlpResource struct {
	attrs  map[string]any
	bodies []any
}

func otlpLogs(t testing.TB, resources ...otlpResource) plog.Logs {
	t.Helper()
	logs := plog.NewLogs()
	for _, res := range resources {
		rl := logs.ResourceLogs().AppendEmpty()
		if err := rl.Resource().Attributes().FromRaw(res.attrs); err != nil {
			t.Fatal(err)
		}
		recs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for _, b := range res.bodies {
			if err := recs.AppendEmpty().Body().FromRaw(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	return logs
}

func marshalLogs(t testing.TB, logs plog.Logs, proto bool) []byte {
	t.Helper()
	var b []byte
	var err error
	if proto {
		b, err = plogotlp.NewExportRequestFromLogs(logs).MarshalProto()
	} else {
		b, err = plogotlp.NewExportRequestFromLogs(logs).MarshalJSON()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func asMap(t testing.TB, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// otlpAnswer is an answer of the receiver, decoded with the collector's
// own OTLP types.
type otlpAnswer struct {
	code        int
	contentType string
	retryAfter  string
	rejected    int64
	partialMsg  string
	status      struct {
		code    int32
		message string
	}
}

func postOTLP(t testing.TB, h http.Handler, path string, body []byte, hdr ...string) otlpAnswer {
	t.Helper()
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := otlpAnswer{code: rec.Code, contentType: rec.Header().Get("Content-Type"), retryAfter: rec.Header().Get("Retry-After")}
	proto := a.contentType == "application/x-protobuf"
	if rec.Code == 200 {
		resp := plogotlp.NewExportResponse()
		var err error
		if proto {
			err = resp.UnmarshalProto(rec.Body.Bytes())
		} else {
			err = resp.UnmarshalJSON(rec.Body.Bytes())
		}
		if err != nil {
			t.Fatalf("200 with a body that is not an ExportLogsServiceResponse (%s): %v: %q", a.contentType, err, rec.Body)
		}
		a.rejected = resp.PartialSuccess().RejectedLogRecords()
		a.partialMsg = resp.PartialSuccess().ErrorMessage()
		return a
	}
	var st spb.Status
	var err error
	if proto {
		err = protobuf.Unmarshal(rec.Body.Bytes(), &st)
	} else {
		err = protojson.Unmarshal(rec.Body.Bytes(), &st)
	}
	if err != nil {
		t.Fatalf("%d with a body that is not a google.rpc.Status (%s): %v: %q", rec.Code, a.contentType, err, rec.Body)
	}
	a.status.code, a.status.message = st.GetCode(), st.GetMessage()
	return a
}

func TestOTLPLogs(t *testing.T) {
	lines := logLines(t, 6)
	attrs := map[string]any{ClusterAttribute: "prod", "host.name": "master-1"}
	strBodies := []any{lines[0], lines[1], lines[2]}
	good := otlpLogs(t, otlpResource{attrs, strBodies})
	mapped := otlpLogs(t, otlpResource{attrs, []any{asMap(t, lines[3]), asMap(t, lines[4])}})
	mixed := otlpLogs(t, otlpResource{attrs, []any{lines[0], "kube-apiserver started", int64(5), []byte(lines[1]), `{"kind":"Event","auditID":"x"}`, ""}})
	noCluster := otlpLogs(t, otlpResource{map[string]any{"host.name": "master-1"}, strBodies})
	twoClusters := otlpLogs(t, otlpResource{attrs, strBodies},
		otlpResource{map[string]any{ClusterAttribute: "dev", "k8s.pod.name": "kube-apiserver-cp-0", "host.name": "cp-0"}, []any{lines[5]}},
		otlpResource{map[string]any{ClusterAttribute: "bad name"}, []any{lines[5]}})
	plain := otlpLogs(t, otlpResource{nil, strBodies})
	tokens := map[string]Source{"t-prod": {Cluster: "prod"}, "t-m2": {"prod", "master-2"}}

	for _, tc := range []struct {
		name     string
		cfg      WebhookConfig
		failing  bool
		path     string
		body     []byte
		hdr      []string
		code     int
		rejected int64
		spooled  map[string]int // events spooled, by source
		msgHas   string         // in the partial_success or Status message
	}{
		{name: "protobuf", path: "/v1/logs", body: marshalLogs(t, good, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, spooled: map[string]int{"prod/master-1": 3}},
		{name: "json", path: "/v1/logs", body: marshalLogs(t, good, false), hdr: []string{"Content-Type", "application/json; charset=utf-8"},
			code: 200, spooled: map[string]int{"prod/master-1": 3}},
		{name: "gzip protobuf", path: "/v1/logs", body: gzipBytes(marshalLogs(t, good, true)),
			hdr: []string{"Content-Type", "application/x-protobuf", "Content-Encoding", "gzip"}, code: 200, spooled: map[string]int{"prod/master-1": 3}},
		{name: "gzip json", path: "/v1/logs", body: gzipBytes(marshalLogs(t, good, false)),
			hdr: []string{"Content-Type", "application/json", "Content-Encoding", "gzip"}, code: 200, spooled: map[string]int{"prod/master-1": 3}},
		{name: "map bodies", path: "/v1/logs", body: marshalLogs(t, mapped, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, spooled: map[string]int{"prod/master-1": 2}},
		{name: "partial rejection", path: "/v1/logs", body: marshalLogs(t, mixed, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, rejected: 5, spooled: map[string]int{"prod/master-1": 1}, msgHas: "5 log records are not audit events"},
		{name: "partial rejection json", path: "/v1/logs", body: marshalLogs(t, mixed, false), hdr: []string{"Content-Type", "application/json"},
			code: 200, rejected: 5, spooled: map[string]int{"prod/master-1": 1}, msgHas: "body is a Int"},
		{name: "resources of several clusters", path: "/v1/logs", body: marshalLogs(t, twoClusters, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, rejected: 1, spooled: map[string]int{"prod/master-1": 3, "dev/kube-apiserver-cp-0": 1}, msgHas: "must be 1-63"},
		{name: "no cluster anywhere", path: "/v1/logs", body: marshalLogs(t, noCluster, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 400, msgHas: "no cluster: set the resource attribute k8s.cluster.name"},
		{name: "cluster in the path", path: "/otlp/edge/v1/logs", body: marshalLogs(t, plain, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, spooled: map[string]int{"edge": 3}},
		{name: "cluster and apiserver in the path", path: "/otlp/edge/api-1/v1/logs", body: marshalLogs(t, good, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 403, msgHas: `sends for cluster "edge"`},
		{name: "path apiserver beats attributes", path: "/otlp/prod/api-1/v1/logs", body: marshalLogs(t, good, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 200, spooled: map[string]int{"prod/api-1": 3}},
		{name: "bad path", path: "/otlp/a%20b/v1/logs", body: marshalLogs(t, plain, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 400, msgHas: "cluster name"},
		{name: "not the logs path", path: "/v1/traces", body: marshalLogs(t, plain, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 404},
		{name: "token names the cluster", cfg: WebhookConfig{Tokens: tokens}, path: "/v1/logs", body: marshalLogs(t, plain, true),
			hdr: []string{"Content-Type", "application/x-protobuf", "Authorization", "Bearer t-prod"}, code: 200, spooled: map[string]int{"prod": 3}},
		{name: "token names the apiserver", cfg: WebhookConfig{Tokens: tokens}, path: "/v1/logs", body: marshalLogs(t, good, true),
			hdr: []string{"Content-Type", "application/x-protobuf", "Authorization", "Bearer t-m2"}, code: 200, spooled: map[string]int{"prod/master-2": 3}},
		{name: "token required", cfg: WebhookConfig{Tokens: tokens}, path: "/v1/logs", body: marshalLogs(t, good, true),
			hdr: []string{"Content-Type", "application/x-protobuf"}, code: 401, msgHas: "bearer token"},
		{name: "unknown token", cfg: WebhookConfig{Tokens: tokens}, path: "/v1/logs", body: marshalLogs(t, good, true),
			hdr: []string{"Content-Type", "application/x-protobuf", "Authorization", "Bearer nope"}, code: 401},
		{name: "token for another cluster's resource", cfg: WebhookConfig{Tokens: tokens}, path: "/v1/logs", body: marshalLogs(t, twoClusters, true),
			hdr: []string{"Content-Type", "application/x-protobuf", "Authorization", "Bearer t-prod"}, code: 403, msgHas: `k8s.cluster.name is "dev"`},
		{name: "token and path disagree", cfg: WebhookConfig{Tokens: tokens}, path: "/otlp/dev/v1/logs", body: marshalLogs(t, plain, false),
			hdr: []string{"Content-Type", "application/json", "Authorization", "Bearer t-prod"}, code: 403},
		{name: "undecodable protobuf", path: "/v1/logs", body: []byte("\x0a\xff\xff\xff"), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 400, msgHas: "decoding ExportLogsServiceRequest"},
		{name: "undecodable json", path: "/v1/logs", body: []byte(`{"resourceLogs":`), hdr: []string{"Content-Type", "application/json"},
			code: 400, msgHas: "decoding ExportLogsServiceRequest"},
		{name: "bad gzip", path: "/v1/logs", body: []byte("not gzip"), hdr: []string{"Content-Type", "application/json", "Content-Encoding", "gzip"},
			code: 400, msgHas: "gzip"},
		{name: "unknown content type", path: "/v1/logs", body: marshalLogs(t, good, false), hdr: []string{"Content-Type", "text/plain"},
			code: 415, msgHas: "application/x-protobuf or application/json"},
		{name: "no content type", path: "/v1/logs", body: marshalLogs(t, good, false), code: 415},
		{name: "origin", path: "/v1/logs", body: marshalLogs(t, good, false), hdr: []string{"Content-Type", "application/json", "Origin", "https://evil.example"},
			code: 403, msgHas: "web pages"},
		{name: "cross-site fetch", path: "/v1/logs", body: marshalLogs(t, good, true), hdr: []string{"Content-Type", "application/x-protobuf", "Sec-Fetch-Site", "cross-site"},
			code: 403, msgHas: "web pages"},
		{name: "too large", cfg: WebhookConfig{MaxBodyBytes: 100}, path: "/v1/logs", body: marshalLogs(t, good, true),
			hdr: []string{"Content-Type", "application/x-protobuf"}, code: 413, msgHas: "--max-body-bytes"},
		{name: "empty request", path: "/v1/logs", body: nil, hdr: []string{"Content-Type", "application/x-protobuf"}, code: 200},
		{name: "spool down", failing: true, path: "/v1/logs", body: marshalLogs(t, good, true), hdr: []string{"Content-Type", "application/x-protobuf"},
			code: 503, msgHas: "retry later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &memAppender{failing: tc.failing}
			a := postOTLP(t, NewOTLPLogs(app, tc.cfg), tc.path, tc.body, tc.hdr...)
			msg := a.partialMsg + a.status.message
			if a.code != tc.code || a.rejected != tc.rejected || !strings.Contains(msg, tc.msgHas) {
				t.Fatalf("got %d, rejected %d, message %q; want %d, rejected %d, message containing %q", a.code, a.rejected, msg, tc.code, tc.rejected, tc.msgHas)
			}
			if a.code != 200 && a.status.message == "" {
				t.Fatalf("%d without a Status message", a.code)
			}
			// The gRPC code an OTLP client reads from the Status.
			if want := map[int]int32{400: 3, 401: 16, 403: 7, 404: 12, 413: 8, 415: 12, 503: 14}[a.code]; a.code != 200 && a.status.code != want {
				t.Errorf("Status code %d for HTTP %d, want %d", a.status.code, a.code, want)
			}
			wantType := "application/json"
			if len(tc.hdr) > 1 && tc.hdr[1] == "application/x-protobuf" {
				wantType = "application/x-protobuf"
			}
			if a.contentType != wantType {
				t.Errorf("answered in %s, want %s (the request's encoding)", a.contentType, wantType)
			}
			if a.code == 503 && a.retryAfter == "" {
				t.Errorf("503 without Retry-After")
			}
			got := map[string]int{}
			for src, evs := range app.batches {
				got[src] = len(evs)
			}
			if len(got) != len(tc.spooled) {
				t.Fatalf("spooled %v, want %v", got, tc.spooled)
			}
			for src, n := range tc.spooled {
				if got[src] != n {
					t.Fatalf("spooled %v, want %v", got, tc.spooled)
				}
			}
		})
	}
}

// TestOTLPLogsStoresTheLine: a string body is spooled as it was sent, the
// event's own bytes, as the webhook spools an EventList's items.
func TestOTLPLogsStoresTheLine(t *testing.T) {
	lines := logLines(t, 2)
	app := &memAppender{}
	body := marshalLogs(t, otlpLogs(t, otlpResource{map[string]any{ClusterAttribute: "prod"}, []any{lines[0], " " + lines[1] + "\n"}}), true)
	if a := postOTLP(t, NewOTLPLogs(app, WebhookConfig{}), "/v1/logs", body, "Content-Type", "application/x-protobuf"); a.code != 200 {
		t.Fatalf("got %d %q", a.code, a.status.message)
	}
	for i, raw := range app.batches["prod"] {
		if string(raw) != lines[i] {
			t.Errorf("event %d spooled as %q, want %q", i, raw, lines[i])
		}
	}
}

func TestOTLPLogsRejectsGET(t *testing.T) {
	req := httptest.NewRequest("GET", "/v1/logs", nil)
	rec := httptest.NewRecorder()
	NewOTLPLogs(&memAppender{}, WebhookConfig{}).ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET got %d", rec.Code)
	}
}

// FuzzOTLPLogs: whatever the body, in either encoding, the answer is a
// 200 or a 4xx with a message, never a 5xx, and a 200 accounts for every
// record: those spooled plus those it says it rejected.
//
// Run it with -parallel 1: with two workers Go's fuzz coordinator stops
// handing out inputs after the baseline (0 execs/sec; the fuzz function is
// not running, a watchdog in it never fired), as in golang/go#51484 and
// #56238; one worker runs ~700 execs/s here.
func FuzzOTLPLogs(f *testing.F) {
	lines := logLines(f, 3)
	attrs := map[string]any{ClusterAttribute: "fuzz"}
	for _, logs := range []plog.Logs{
		otlpLogs(f, otlpResource{attrs, []any{lines[0], lines[1]}}),
		otlpLogs(f, otlpResource{attrs, []any{asMap(f, lines[2]), "x", int64(1)}}, otlpResource{nil, []any{lines[0]}}),
		otlpLogs(f, otlpResource{map[string]any{ClusterAttribute: "-"}, []any{`{"items":[1,{}]}`}}),
	} {
		f.Add(marshalLogs(f, logs, true), true)
		f.Add(marshalLogs(f, logs, false), false)
	}
	f.Add([]byte("\x0a\x02\x12\x00"), true)
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"kvlistValue":{"values":[{"key":"auditID","value":{"intValue":"5"}}]}}}]}]}]}`), false)
	f.Fuzz(func(t *testing.T, body []byte, proto bool) {
		ct := "application/json"
		if proto {
			ct = "application/x-protobuf"
		}
		app := &memAppender{}
		a := postOTLP(t, NewOTLPLogs(app, WebhookConfig{MaxBodyBytes: 1 << 20}), "/v1/logs", body, "Content-Type", ct)
		switch {
		case a.code == 200:
			logs, err := unmarshalLogs(map[bool]otlpEncoding{true: otlpProto, false: otlpJSON}[proto], body)
			if err != nil {
				t.Fatalf("200 for a body that does not decode: %v", err)
			}
			// 200 means some record was accepted, or none was sent.
			if n := int64(logs.LogRecordCount()); a.rejected > n || (n > 0 && a.rejected == n) {
				t.Fatalf("200 for %d records of which %d rejected", n, a.rejected)
			}
		case a.code >= 400 && a.code < 500:
			if a.status.message == "" {
				t.Fatalf("%d without a message", a.code)
			}
		default:
			t.Fatalf("status %d for %q: %+v", a.code, body, a)
		}
	})
}
