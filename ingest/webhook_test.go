package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/auditgen"
	"github.com/auditlens/auditlens/store"
)

// memAppender records appended batches; failing makes it refuse them.
type memAppender struct {
	batches map[string][][]byte
	failing bool
}

func (m *memAppender) AppendRows(_ context.Context, cluster string, rows []store.Row) error {
	if m.failing {
		return errors.New("disk full")
	}
	if m.batches == nil {
		m.batches = map[string][][]byte{}
	}
	for _, r := range rows {
		if r.Cluster != cluster {
			return fmt.Errorf("row of cluster %q appended for %q", r.Cluster, cluster)
		}
		m.batches[cluster] = append(m.batches[cluster], r.Raw)
	}
	return nil
}

func post(h http.Handler, path, body string, hdr ...string) (int, WebhookResponse) {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var resp WebhookResponse
	_ = json.Unmarshal(rec.Body.Bytes(), &resp)
	return rec.Code, resp
}

func TestWebhookStatusCodes(t *testing.T) {
	body := string(auditgen.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).EventListBody(10))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(body))
	zw.Close()
	for _, tc := range []struct {
		name     string
		cfg      WebhookConfig
		failing  bool
		path     string
		body     string
		hdr      []string
		code     int
		accepted int
		cluster  string
		errHas   string
	}{
		{name: "ok", path: "/audit/prod", body: body, code: 200, accepted: 10, cluster: "prod"},
		{name: "default cluster", path: "/audit", body: body, code: 200, accepted: 10, cluster: "default"},
		{name: "gzip", path: "/audit/prod", body: gz.String(), hdr: []string{"Content-Encoding", "gzip"}, code: 200, accepted: 10, cluster: "prod"},
		{name: "unknown encoding", path: "/audit/prod", body: body, hdr: []string{"Content-Encoding", "br"}, code: 415, errHas: "Content-Encoding"},
		{name: "too large", cfg: WebhookConfig{MaxBodyBytes: 100}, path: "/audit/prod", body: body, code: 413, errHas: "larger than 100 bytes"},
		{name: "not audit", path: "/audit/prod", body: `{"kind":"Status"}`, code: 400, errHas: "EventList or Event"},
		{name: "empty list", path: "/audit/prod", body: `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`, code: 200},
		{name: "bad cluster", path: "/audit/a%20b", body: body, code: 400, errHas: "cluster name"},
		{name: "spool down", failing: true, path: "/audit/prod", body: body, code: 503, errHas: "retry later"},
		{name: "token required", cfg: WebhookConfig{Tokens: map[string]string{"t1": "prod"}}, path: "/audit/prod", body: body, code: 401},
		{name: "token maps cluster", cfg: WebhookConfig{Tokens: map[string]string{"t1": "prod"}}, path: "/audit", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 200, accepted: 10, cluster: "prod"},
		{name: "token for other cluster", cfg: WebhookConfig{Tokens: map[string]string{"t1": "prod"}}, path: "/audit/dev", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &memAppender{failing: tc.failing}
			h := NewWebhook(app, tc.cfg)
			code, resp := post(h, tc.path, tc.body, tc.hdr...)
			if code != tc.code || resp.Accepted != tc.accepted || !strings.Contains(resp.Error, tc.errHas) {
				t.Fatalf("got %d %+v, want %d accepted %d error containing %q", code, resp, tc.code, tc.accepted, tc.errHas)
			}
			if tc.cluster != "" && len(app.batches[tc.cluster]) != tc.accepted {
				t.Fatalf("spooled %d events for %s", len(app.batches[tc.cluster]), tc.cluster)
			}
		})
	}
}

func TestWebhookRejectsGET(t *testing.T) {
	req := httptest.NewRequest("GET", "/audit/prod", nil)
	rec := httptest.NewRecorder()
	NewWebhook(&memAppender{}, WebhookConfig{}).ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET got %d", rec.Code)
	}
}

// FuzzWebhook: whatever the body, the answer is a 2xx or a 4xx with a
// message, never a 5xx, and a 200 accounts for every event it was sent.
func FuzzWebhook(f *testing.F) {
	g := auditgen.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f.Add(g.EventListBody(3))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[{"auditID":"a","stage":"ResponseComplete","timestamp":"2018-01-01T00:00:00Z"}, 5]}`))
	f.Add([]byte(`{"kind":"Event","auditID":"a","stage":"Panic","stageTimestamp":"2018-01-01T00:00:00.1Z"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		app := &memAppender{}
		h := NewWebhook(app, WebhookConfig{MaxBodyBytes: 1 << 20})
		code, resp := post(h, "/audit/fuzz", string(body))
		switch {
		case code == 200:
			if resp.Accepted != len(app.batches["fuzz"]) {
				t.Fatalf("accepted %d, spooled %d", resp.Accepted, len(app.batches["fuzz"]))
			}
		case code >= 400 && code < 500:
			if resp.Error == "" {
				t.Fatalf("%d without a message", code)
			}
		default:
			t.Fatalf("status %d for %q: %+v", code, body, resp)
		}
	})
}
