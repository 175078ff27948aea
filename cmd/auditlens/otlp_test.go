package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// otlpJSON is an ExportLogsServiceRequest in OTLP/JSON, written by hand as
// the spec spells it: one resource with attributes and its records' bodies,
// each a string or, when it starts with {"kvlistValue", that AnyValue as is.
func otlpJSON(attrs map[string]string, bodies ...string) string {
	var as []string
	for k, v := range attrs {
		a, _ := json.Marshal(map[string]any{"key": k, "value": map[string]string{"stringValue": v}})
		as = append(as, string(a))
	}
	var recs []string
	for _, b := range bodies {
		if strings.HasPrefix(b, `{"kvlistValue"`) {
			recs = append(recs, `{"body":`+b+`}`)
			continue
		}
		s, _ := json.Marshal(b)
		recs = append(recs, `{"body":{"stringValue":`+string(s)+`}}`)
	}
	return `{"resourceLogs":[{"resource":{"attributes":[` + strings.Join(as, ",") + `]},"scopeLogs":[{"logRecords":[` + strings.Join(recs, ",") + `]}]}]}`
}

// TestServeOTLPBesideWebhook: serve's OTLP receiver and webhook share one
// store and one deduplication; the cluster comes from the path or the
// resource attribute, the apiserver from host.name.
func TestServeOTLPBesideWebhook(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--batch-wait", "50ms")
	a1rs := event("a1", "ResponseStarted", "2026-11-29T10:00:00.1Z", "")
	a1rc := event("a1", "ResponseComplete", "2026-11-29T10:00:01.2Z", "")
	if code, resp := s.post("/audit/prod", list("audit.k8s.io/v1", a1rs, a1rc)); code != 200 {
		t.Fatalf("webhook: %d %v", code, resp)
	}
	// The webhook already stored a1's ResponseComplete; a3 comes as a map.
	a3 := `{"kvlistValue":{"values":[{"key":"auditID","value":{"stringValue":"a3"}},{"key":"stage","value":{"stringValue":"ResponseComplete"}},` +
		`{"key":"verb","value":{"stringValue":"get"}},{"key":"stageTimestamp","value":{"stringValue":"2026-11-29T10:00:02Z"}},` +
		`{"key":"responseStatus","value":{"kvlistValue":{"values":[{"key":"code","value":{"intValue":"200"}}]}}}]}}`
	for _, tc := range []struct {
		path, body string
		rejected   float64
	}{
		{"/otlp/prod/v1/logs", otlpJSON(nil, a1rc, a3, "I1129 10:00:00 not an audit event"), 1},
		{"/v1/logs", otlpJSON(map[string]string{"k8s.cluster.name": "edge", "host.name": "cp-1"}, event("e1", "ResponseComplete", "2026-11-29T10:00:03Z", "")), 0},
	} {
		resp, err := http.Post(s.base+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			PartialSuccess struct {
				RejectedLogRecords json.Number `json:"rejectedLogRecords"`
				ErrorMessage       string      `json:"errorMessage"`
			} `json:"partialSuccess"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		n, _ := out.PartialSuccess.RejectedLogRecords.Float64()
		if resp.StatusCode != 200 || err != nil || n != tc.rejected {
			t.Fatalf("POST %s: %d %+v %v, want 200 with %v rejected", tc.path, resp.StatusCode, out, err, tc.rejected)
		}
	}
	got := s.waitEvents("/api/v1/events?cluster=prod&order=asc&jq="+urlQuery(`[.auditID, .stage, .responseStatus.code]`), 3)
	if strings.Join(got, " ") != `["a1","ResponseStarted",200] ["a1","ResponseComplete",200] ["a3","ResponseComplete",200]` {
		t.Errorf("prod holds %q", got)
	}
	s.waitEvents("/api/v1/events?cluster=edge&apiserver=cp-1", 1)
	_, metrics := s.get("/metrics")
	m := strings.Join(metrics, "\n")
	for _, want := range []string{`auditlens_events_duplicate_total 1`, `auditlens_otlp_log_records_rejected_total{reason="not_audit"} 1`,
		`auditlens_otlp_requests_total{code="200"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	s.stop()
}
