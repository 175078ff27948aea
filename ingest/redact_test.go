package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRedactRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // RedactRule.String, "" for an error
	}{
		{"secrets=requestObject,responseObject", "secrets=requestObject,responseObject"},
		{"serviceaccounts/token=responseObject.status.token", "serviceaccounts/token=responseObject.status.token"},
		{"authentication.k8s.io/tokenreviews=requestObject.spec.token", "authentication.k8s.io/tokenreviews=requestObject.spec.token"},
		{"apps/v1/deployments=x", ""},
		{"secrets", ""},
		{"=requestObject", ""},
		{"secrets=", ""},
		{"secrets=requestObject..data", ""},
		{"secrets=.data", ""},
	} {
		r, err := ParseRedactRule(tc.in)
		got := ""
		if err == nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("ParseRedactRule(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// secretEvent is a Secret create recorded at RequestResponse: the data
// is in both bodies.
const secretEvent = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"%s","stage":"ResponseComplete",` +
	`"requestURI":"/api/v1/namespaces/default/secrets","verb":"create","user":{"username":"alice"},"sourceIPs":["10.0.0.1"],` +
	`"objectRef":{"resource":"secrets","namespace":"default","name":"db","apiVersion":"v1"},"responseStatus":{"code":201},` +
	`"requestObject":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db"},"data":{"password":"aHVudGVyMi1TRUNSRVQ="}},` +
	`"responseObject":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db","resourceVersion":"812"},"data":{"password":"aHVudGVyMi1TRUNSRVQ="}},` +
	`"annotations":{"authorization.k8s.io/decision":"allow"},` +
	`"requestReceivedTimestamp":"2026-03-02T10:00:00.000000Z","stageTimestamp":"2026-03-02T10:00:00.010000Z"}`

const tokenReviewEvent = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"tr-1","stage":"ResponseComplete",` +
	`"requestURI":"/apis/authentication.k8s.io/v1/tokenreviews","verb":"create","user":{"username":"system:kube-apiserver"},"sourceIPs":["10.0.0.2"],` +
	`"objectRef":{"resource":"tokenreviews","apiGroup":"authentication.k8s.io","apiVersion":"v1"},"responseStatus":{"code":201},` +
	`"requestObject":{"kind":"TokenReview","spec":{"token":"eyJhbGciOi.SECRET-TOKEN","audiences":["api"]}},` +
	`"responseObject":{"kind":"TokenReview","spec":{"token":"eyJhbGciOi.SECRET-TOKEN"},"status":{"authenticated":true,"user":{"username":"bob"}}},` +
	`"requestReceivedTimestamp":"2026-03-02T10:00:01.000000Z","stageTimestamp":"2026-03-02T10:00:01.010000Z"}`

func TestRedactor(t *testing.T) {
	r := NewRedactor(DefaultRedactions)
	batch, err := DecodeBody("prod", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`+
		fmt.Sprintf(secretEvent, "s-1")+","+tokenReviewEvent+","+
		// A Metadata-level Secret read: nothing to cut.
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"s-2","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/secrets/db",`+
		`"verb":"get","user":{"username":"bob"},"objectRef":{"resource":"secrets","namespace":"default","name":"db","apiVersion":"v1"},"responseStatus":{"code":200},`+
		`"requestReceivedTimestamp":"2026-03-02T10:00:02.000000Z","stageTimestamp":"2026-03-02T10:00:02.001000Z"}]}`))
	if err != nil || len(batch.Rows) != 3 {
		t.Fatalf("decoding: %v, %d rows", err, len(batch.Rows))
	}
	before := string(batch.Rows[2].Raw)
	if n := r.Apply(batch.Rows); n != 2 {
		t.Errorf("Apply changed %d rows, want 2", n)
	}
	sec, tr, meta := batch.Rows[0], batch.Rows[1], batch.Rows[2]
	if strings.Contains(string(sec.Raw), "aHVudGVy") || strings.Contains(string(sec.Raw), `"requestObject":`) {
		t.Errorf("the Secret's data is still there: %s", sec.Raw)
	}
	if sec.Annotations[RedactedAnnotation] != "requestObject,responseObject" || sec.Annotations["authorization.k8s.io/decision"] != "allow" {
		t.Errorf("the Secret event's annotations: %v", sec.Annotations)
	}
	if sec.ResponseRV != "812" {
		t.Errorf("the response's resourceVersion (a typed column, no secret) was lost: %q", sec.ResponseRV)
	}
	var ev map[string]any
	if err := json.Unmarshal(sec.Raw, &ev); err != nil {
		t.Fatalf("the redacted event is not JSON: %v", err)
	}
	if ev["auditID"] != "s-1" || ev["verb"] != "create" || ev["annotations"].(map[string]any)[RedactedAnnotation] != "requestObject,responseObject" {
		t.Errorf("the redacted event: %v", ev)
	}
	// A redacted event decodes to the same row, but for its bodies.
	again, err := DecodeEvent("prod", sec.Raw)
	if err != nil || again.AuditID != "s-1" || again.Annotations[RedactedAnnotation] == "" || again.Resource != "secrets" {
		t.Errorf("decoding the redacted event: %+v, %v", again, err)
	}
	if strings.Contains(string(tr.Raw), "SECRET-TOKEN") || !strings.Contains(string(tr.Raw), `"audiences":["api"]`) ||
		!strings.Contains(string(tr.Raw), `"username":"bob"`) {
		t.Errorf("the TokenReview: want the tokens cut and the rest kept: %s", tr.Raw)
	}
	if tr.Annotations[RedactedAnnotation] != "requestObject.spec.token,responseObject.spec.token" {
		t.Errorf("the TokenReview's annotations: %v", tr.Annotations)
	}
	if string(meta.Raw) != before || meta.Annotations[RedactedAnnotation] != "" {
		t.Errorf("a Metadata-level event was changed: %s", meta.Raw)
	}
	var nilRedactor *Redactor
	if nilRedactor.Apply(batch.Rows) != 0 {
		t.Error("a nil redactor changed rows")
	}
}

// TestWebhookRedactsBeforeTheSpool: a Secret's data posted to the webhook
// never reaches the disk: no spool file holds it, while the event itself
// is spooled (its audit ID is there).
func TestWebhookRedactsBeforeTheSpool(t *testing.T) {
	for _, redact := range []bool{false, true} {
		t.Run(fmt.Sprintf("redact=%v", redact), func(t *testing.T) {
			dir := t.TempDir()
			sp, err := OpenSpool(SpoolConfig{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			cfg := WebhookConfig{}
			if redact {
				cfg.Redactor = NewRedactor(DefaultRedactions)
			}
			h := NewWebhook(sp, cfg)
			body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + fmt.Sprintf(secretEvent, "spooled-secret-1") + `]}`
			if code, resp := post(h, "/audit/prod", body); code != 200 || resp.Accepted != 1 {
				t.Fatalf("post: %d %+v", code, resp)
			}
			var disk bytes.Buffer
			err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(p)
				disk.Write(b)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(disk.Bytes(), []byte("spooled-secret-1")) {
				t.Fatal("the event is not in the spool at all: the check below proves nothing")
			}
			if got := bytes.Contains(disk.Bytes(), []byte("aHVudGVyMi1TRUNSRVQ=")); got == redact {
				t.Errorf("the Secret's data on disk: %v, want %v", got, !redact)
			}
		})
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(secretEvent, "f")), "requestObject.data")
	f.Add([]byte(tokenReviewEvent), "requestObject.spec.token")
	f.Add([]byte(`{"requestObject":[1,2],"responseObject":null}`), "requestObject.x")
	f.Add([]byte(`{"a":{"b":{"c":1}}}`), "a.b.c")
	f.Fuzz(func(t *testing.T, raw []byte, path string) {
		if path == "" || strings.Contains(path, "..") || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") {
			return
		}
		out, cut, err := redactJSON(raw, []string{path})
		if err != nil || len(cut) == 0 {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("redacted %q of %q into invalid JSON %q: %v", path, raw, out, err)
		}
		// The path is gone.
		cur := any(v)
		parts := strings.Split(path, ".")
		for i, p := range parts {
			m, ok := cur.(map[string]any)
			if !ok {
				break
			}
			next, ok := m[p]
			if !ok {
				break
			}
			if i == len(parts)-1 {
				t.Fatalf("%q still in %s", path, out)
			}
			cur = next
		}
	})
}
