package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/store"
)

// memAppender records appended batches; failing makes it refuse them.
type memAppender struct {
	batches map[string][][]byte
	failing bool
}

func (m *memAppender) AppendRows(_ context.Context, src Source, rows []store.Row) error {
	if m.failing {
		return errors.New("disk full")
	}
	if m.batches == nil {
		m.batches = map[string][][]byte{}
	}
	for _, r := range rows {
		if r.Cluster != src.Cluster || r.APIServer != src.APIServer {
			return fmt.Errorf("row of %q/%q appended for %q", r.Cluster, r.APIServer, src)
		}
		m.batches[src.String()] = append(m.batches[src.String()], r.Raw)
	}
	return nil
}

func post(h http.Handler, path, body string, hdr ...string) (int, WebhookResponse) {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
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
		cluster  string // the source the events are spooled for: cluster or cluster/apiserver
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
		{name: "token required", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {Cluster: "prod"}}}, path: "/audit/prod", body: body, code: 401},
		{name: "token maps cluster", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {Cluster: "prod"}}}, path: "/audit", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 200, accepted: 10, cluster: "prod"},
		{name: "token for other cluster", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {Cluster: "prod"}}}, path: "/audit/dev", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 403},
		{name: "trailing slash", path: "/audit/prod/", body: body, code: 200, accepted: 10, cluster: "prod"},
		{name: "apiserver in path", path: "/audit/prod/apiserver-1", body: body, code: 200, accepted: 10, cluster: "prod/apiserver-1"},
		{name: "bad apiserver", path: "/audit/prod/a%20b", body: body, code: 400, errHas: "apiserver name"},
		{name: "path too deep", path: "/audit/prod/a/b", body: body, code: 400, errHas: "/audit/{cluster}/{apiserver}"},
		{name: "token maps apiserver", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {"prod", "apiserver-1"}}}, path: "/audit", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 200, accepted: 10, cluster: "prod/apiserver-1"},
		{name: "token path repeats apiserver", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {"prod", "apiserver-1"}}}, path: "/audit/prod/apiserver-1", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 200, accepted: 10, cluster: "prod/apiserver-1"},
		{name: "cluster token, path names apiserver", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {Cluster: "prod"}}}, path: "/audit/prod/apiserver-2", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 200, accepted: 10, cluster: "prod/apiserver-2"},
		{name: "token for other apiserver", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {"prod", "apiserver-1"}}}, path: "/audit/prod/apiserver-2", body: body, hdr: []string{"Authorization", "Bearer t1"}, code: 403, errHas: "apiserver"},
		// What a web page can post without a CORS preflight: never stored.
		{name: "text/plain", path: "/audit/prod", body: body, hdr: []string{"Content-Type", "text/plain"}, code: 415, errHas: "application/json"},
		{name: "form", path: "/audit/prod", body: body, hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: 415, errHas: "application/json"},
		{name: "no content type", path: "/audit/prod", body: body, hdr: []string{"Content-Type", ""}, code: 415, errHas: "application/json"},
		{name: "charset", path: "/audit/prod", body: body, hdr: []string{"Content-Type", "application/json; charset=utf-8"}, code: 200, accepted: 10, cluster: "prod"},
		{name: "origin", path: "/audit/prod", body: body, hdr: []string{"Origin", "https://evil.example"}, code: 403, errHas: "web pages"},
		{name: "origin null", path: "/audit/prod", body: body, hdr: []string{"Origin", "null"}, code: 403, errHas: "web pages"},
		{name: "cross-site fetch", path: "/audit/prod", body: body, hdr: []string{"Sec-Fetch-Site", "cross-site"}, code: 403, errHas: "web pages"},
		{name: "same-site fetch", path: "/audit/prod", body: body, hdr: []string{"Sec-Fetch-Site", "same-site"}, code: 403, errHas: "web pages"},
		{name: "origin with a token", cfg: WebhookConfig{Tokens: map[string]Source{"t1": {Cluster: "prod"}}}, path: "/audit/prod", body: body, hdr: []string{"Authorization", "Bearer t1", "Origin", "http://127.0.0.1:9"}, code: 403, errHas: "web pages"},
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

// TestWebhookClientCertificate: a verified client certificate names the
// cluster by its CN and the apiserver by its OU.
func TestWebhookClientCertificate(t *testing.T) {
	body := string(auditgen.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).EventListBody(3))
	cert := func(cn string, ou ...string) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: ou}}}}}
	}
	for _, tc := range []struct {
		name, path string
		tls        *tls.ConnectionState
		want       string
	}{
		{"CN only", "/audit", cert("prod"), "prod"},
		{"CN and OU", "/audit", cert("prod", "apiserver-1"), "prod/apiserver-1"},
		{"first valid OU", "/audit", cert("prod", "not valid", "apiserver-2"), "prod/apiserver-2"},
		{"invalid CN", "/audit", cert("not valid", "apiserver-1"), "default"},
		{"path names the same cluster", "/audit/prod", cert("prod", "apiserver-1"), "prod/apiserver-1"},
		{"path names another cluster", "/audit/dev", cert("prod", "apiserver-1"), "dev"},
		{"path names the apiserver", "/audit/prod/apiserver-3", cert("prod", "apiserver-1"), "prod/apiserver-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &memAppender{}
			req := httptest.NewRequest("POST", tc.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.TLS = tc.tls
			rec := httptest.NewRecorder()
			NewWebhook(app, WebhookConfig{}).ServeHTTP(rec, req)
			if rec.Code != 200 || len(app.batches[tc.want]) != 3 {
				t.Fatalf("got %d %s, spooled %v; want 3 events for %s", rec.Code, rec.Body, keys(app.batches), tc.want)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestParseSource(t *testing.T) {
	for in, want := range map[string]Source{"prod": {Cluster: "prod"}, "prod/apiserver-1": {"prod", "apiserver-1"}, "a.b_c-d/0": {"a.b_c-d", "0"}} {
		got, err := ParseSource(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/a", "prod/", "prod/a/b", "-x", "prod/a b", strings.Repeat("x", 64)} {
		if got, err := ParseSource(in); err == nil {
			t.Errorf("ParseSource(%q) = %+v, want an error", in, got)
		}
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
