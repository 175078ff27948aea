package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
)

// watchEvent is a ResponseComplete of a watch as kube-apiserver 1.37 writes
// it into a webhook EventList (no kind or apiVersion).
const watchEvent = `{"level":"Metadata","auditID":"4f1b2c3d-0a1b-4c2d-8e3f-5a6b7c8d9e0f","stage":"ResponseComplete",` +
	`"requestURI":"/api/v1/services?allowWatchBookmarks=true\u0026resourceVersion=224\u0026timeoutSeconds=423\u0026watch=true",` +
	`"verb":"watch","user":{"username":"system:kube-controller-manager","groups":["system:authenticated"]},` +
	`"sourceIPs":["10.0.0.5","10.0.0.6"],"userAgent":"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/shared-informers",` +
	`"objectRef":{"resource":"services","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},` +
	`"requestReceivedTimestamp":"2026-03-01T12:00:00.123456Z","stageTimestamp":"2026-03-01T12:07:03.654321Z",` +
	`"annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed by ClusterRoleBinding \"system:kube-controller-manager\""}}`

// updateEvent is a RequestResponse-level update of a Lease with both
// objects, by an impersonating admin.
const updateEvent = `{"level":"RequestResponse","auditID":"a0000000-0000-4000-8000-000000000001","stage":"ResponseComplete",` +
	`"requestURI":"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-3?timeout=10s","verb":"update",` +
	`"user":{"username":"admin","uid":"u-1","groups":["system:masters","system:authenticated"],"extra":{"k":["v"]}},` +
	`"impersonatedUser":{"username":"system:node:node-3","groups":["system:nodes"]},` +
	`"sourceIPs":["192.168.1.10"],"userAgent":"kubelet/v1.37.2 (linux/amd64) kubernetes/abc1234",` +
	`"objectRef":{"resource":"leases","namespace":"kube-node-lease","name":"node-3","uid":"0d6c-uid","apiGroup":"coordination.k8s.io","apiVersion":"v1","resourceVersion":"4410"},` +
	`"responseStatus":{"metadata":{},"code":200},` +
	`"requestObject":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"node-3","resourceVersion":"4410"},"spec":{"holderIdentity":"node-3"}},` +
	`"responseObject":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"node-3","resourceVersion":"4417","labels":{"a":"b"}},"spec":{"holderIdentity":"node-3","leaseDurationSeconds":40}},` +
	`"requestReceivedTimestamp":"2026-03-01T12:00:01.000001Z","stageTimestamp":"2026-03-01T12:00:01.004002Z"}`

// item returns a minimal webhook item with the given auditID, stage and
// stageTimestamp, each left out when empty.
func item(auditID, stage, stageTS string) string {
	var f []string
	f = append(f, `"level":"Metadata"`)
	if auditID != "" {
		f = append(f, fmt.Sprintf(`"auditID":%q`, auditID))
	}
	if stage != "" {
		f = append(f, fmt.Sprintf(`"stage":%q`, stage))
	}
	f = append(f, `"requestURI":"/api/v1/namespaces/default/pods/p","verb":"get","user":{"username":"admin"}`)
	if stageTS != "" {
		f = append(f, fmt.Sprintf(`"requestReceivedTimestamp":%q,"stageTimestamp":%q`, stageTS, stageTS))
	}
	return "{" + strings.Join(f, ",") + "}"
}

func list(apiVersion string, items ...string) string {
	return `{"kind":"EventList","apiVersion":"` + apiVersion + `","metadata":{},"items":[` + strings.Join(items, ",") + "]}\n"
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestDecodeBodyRows(t *testing.T) {
	wantWatch := store.Row{
		Cluster:        "prod",
		AuditID:        "4f1b2c3d-0a1b-4c2d-8e3f-5a6b7c8d9e0f",
		Stage:          "ResponseComplete",
		Level:          "Metadata",
		Verb:           "watch",
		RequestURI:     "/api/v1/services?allowWatchBookmarks=true&resourceVersion=224&timeoutSeconds=423&watch=true",
		Time:           utc("2026-03-01T12:07:03.654321Z"),
		ReceivedAt:     utc("2026-03-01T12:00:00.123456Z"),
		User:           "system:kube-controller-manager",
		Groups:         []string{"system:authenticated"},
		UserAgent:      "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/shared-informers",
		SourceIP:       "10.0.0.5",
		Resource:       "services",
		APIVersion:     "v1",
		Code:           200,
		Watch:          true,
		RequestedRV:    "224",
		TimeoutSeconds: 423,
		Annotations: map[string]string{
			"authorization.k8s.io/decision": "allow",
			"authorization.k8s.io/reason":   `RBAC: allowed by ClusterRoleBinding "system:kube-controller-manager"`,
		},
		Raw: []byte(watchEvent),
	}
	wantUpdate := store.Row{
		Cluster:          "prod",
		AuditID:          "a0000000-0000-4000-8000-000000000001",
		Stage:            "ResponseComplete",
		Level:            "RequestResponse",
		Verb:             "update",
		RequestURI:       "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-3?timeout=10s",
		Time:             utc("2026-03-01T12:00:01.004002Z"),
		ReceivedAt:       utc("2026-03-01T12:00:01.000001Z"),
		User:             "admin",
		Groups:           []string{"system:masters", "system:authenticated"},
		ImpersonatedUser: "system:node:node-3",
		UserAgent:        "kubelet/v1.37.2 (linux/amd64) kubernetes/abc1234",
		SourceIP:         "192.168.1.10",
		Resource:         "leases",
		APIGroup:         "coordination.k8s.io",
		APIVersion:       "v1",
		Namespace:        "kube-node-lease",
		Name:             "node-3",
		ObjectRV:         "4410",
		ObjectUID:        "0d6c-uid",
		Code:             200,
		ResponseRV:       "4417",
		Raw:              []byte(updateEvent),
	}
	withKind := `{"kind":"Event","apiVersion":"audit.k8s.io/v1",` + watchEvent[1:]

	// v1beta1 events carry a second-precision timestamp and ObjectMeta.
	beta := func(extra string) string {
		return `{"metadata":{"creationTimestamp":"2018-02-01T10:00:02Z"},"level":"Metadata",` +
			`"auditID":"b1","stage":"ResponseComplete","requestURI":"/api/v1/services?resourceVersion=7\u0026watch=true",` +
			`"verb":"watch","user":{"username":"system:kube-controller-manager"}` + extra + `}`
	}

	tests := []struct {
		name string
		body string
		want []store.Row
	}{
		{
			name: "v1 EventList",
			body: list("audit.k8s.io/v1", watchEvent, updateEvent),
			want: []store.Row{wantWatch, wantUpdate},
		},
		{
			name: "EventList without kind",
			body: `{"items":[` + watchEvent + `]}`,
			want: []store.Row{wantWatch},
		},
		{
			name: "bare Event",
			body: withKind,
			want: []store.Row{func() store.Row { r := wantWatch; r.Raw = []byte(withKind); return r }()},
		},
		{
			name: "bare Event without kind",
			body: "\n  " + watchEvent + "\n",
			want: []store.Row{wantWatch},
		},
		{
			name: "v1beta1 EventList with timestamp",
			body: list("audit.k8s.io/v1beta1", beta(`,"timestamp":"2018-02-01T10:00:01Z"`)),
			want: []store.Row{{
				Cluster: "prod", AuditID: "b1", Stage: "ResponseComplete", Level: "Metadata", Verb: "watch",
				RequestURI: "/api/v1/services?resourceVersion=7&watch=true",
				Time:       utc("2018-02-01T10:00:01Z"), ReceivedAt: utc("2018-02-01T10:00:01Z"),
				User: "system:kube-controller-manager", Watch: true, RequestedRV: "7",
				Raw: []byte(beta(`,"timestamp":"2018-02-01T10:00:01Z"`)),
			}},
		},
		{
			name: "v1beta1 EventList with creationTimestamp only",
			body: list("audit.k8s.io/v1beta1", beta("")),
			want: []store.Row{{
				Cluster: "prod", AuditID: "b1", Stage: "ResponseComplete", Level: "Metadata", Verb: "watch",
				RequestURI: "/api/v1/services?resourceVersion=7&watch=true",
				Time:       utc("2018-02-01T10:00:02Z"), ReceivedAt: utc("2018-02-01T10:00:02Z"),
				User: "system:kube-controller-manager", Watch: true, RequestedRV: "7",
				Raw: []byte(beta("")),
			}},
		},
		{
			name: "v1beta1 stageTimestamp wins over timestamp",
			body: list("audit.k8s.io/v1beta1", beta(`,"timestamp":"2018-02-01T10:00:01Z","requestReceivedTimestamp":"2018-02-01T10:00:00.500000Z","stageTimestamp":"2018-02-01T10:00:01.250000Z"`)),
			want: []store.Row{{
				Cluster: "prod", AuditID: "b1", Stage: "ResponseComplete", Level: "Metadata", Verb: "watch",
				RequestURI: "/api/v1/services?resourceVersion=7&watch=true",
				Time:       utc("2018-02-01T10:00:01.25Z"), ReceivedAt: utc("2018-02-01T10:00:00.5Z"),
				User: "system:kube-controller-manager", Watch: true, RequestedRV: "7",
				Raw: []byte(beta(`,"timestamp":"2018-02-01T10:00:01Z","requestReceivedTimestamp":"2018-02-01T10:00:00.500000Z","stageTimestamp":"2018-02-01T10:00:01.250000Z"`)),
			}},
		},
		{
			name: "empty EventList",
			body: `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[]}`,
		},
		{
			name: "EventList with null items",
			body: `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":null}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBody("prod", []byte(tt.body))
			if err != nil {
				t.Fatalf("DecodeBody: %v", err)
			}
			if len(b.Rejects) != 0 {
				t.Errorf("rejects: %+v", b.Rejects)
			}
			if len(b.Rows) != len(tt.want) {
				t.Fatalf("got %d rows, want %d", len(b.Rows), len(tt.want))
			}
			for i := range tt.want {
				if diff := rowDiff(b.Rows[i], tt.want[i]); diff != "" {
					t.Errorf("row %d:\n%s", i, diff)
				}
			}
		})
	}
}

// rowDiff lists the fields that differ between two rows.
func rowDiff(got, want store.Row) string {
	var sb strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if gt, ok := g.(time.Time); ok {
			wt := w.(time.Time)
			if !gt.Equal(wt) || gt.Location() != wt.Location() {
				fmt.Fprintf(&sb, "  %s: got %v, want %v\n", gv.Type().Field(i).Name, gt, wt)
			}
			continue
		}
		if gb, ok := g.([]byte); ok {
			g, w = string(gb), string(w.([]byte))
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&sb, "  %s: got %#v, want %#v\n", gv.Type().Field(i).Name, g, w)
		}
	}
	return sb.String()
}

func TestDecodeBodyMixedPrecision(t *testing.T) {
	stamps := []struct{ in, want string }{
		{"2026-03-01T12:00:00Z", "2026-03-01T12:00:00Z"},
		{"2026-03-01T12:00:00.123Z", "2026-03-01T12:00:00.123Z"},
		{"2026-03-01T12:00:00.123456Z", "2026-03-01T12:00:00.123456Z"},
		{"2026-03-01T12:00:00.123456789Z", "2026-03-01T12:00:00.123456Z"},
		{"2026-03-01T14:00:00.5+02:00", "2026-03-01T12:00:00.5Z"},
	}
	var items []string
	for i, s := range stamps {
		items = append(items, item(fmt.Sprint("id-", i), "ResponseComplete", s.in))
	}
	b, err := DecodeBody("c", []byte(list("audit.k8s.io/v1", items...)))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rejects) != 0 || len(b.Rows) != len(stamps) {
		t.Fatalf("got %d rows and rejects %+v, want %d rows", len(b.Rows), b.Rejects, len(stamps))
	}
	for i, s := range stamps {
		if got := b.Rows[i].Time; !got.Equal(utc(s.want)) || got.Location() != time.UTC {
			t.Errorf("%s: Time = %v, want %s UTC", s.in, got, s.want)
		}
		if got := b.Rows[i].ReceivedAt; !got.Equal(utc(s.want)) {
			t.Errorf("%s: ReceivedAt = %v, want %s", s.in, got, s.want)
		}
	}
}

func TestDecodeBodyRejects(t *testing.T) {
	good := item("good", "ResponseComplete", "2026-03-01T12:00:00.000001Z")
	tests := []struct {
		name    string
		bad     string
		auditID string
		reason  string
	}{
		{"not an object", `42`, "", "event is a JSON number, not an object"},
		{"null", `null`, "", "event is a JSON null, not an object"},
		{"array", `[{"auditID":"x"}]`, "", "event is a JSON array, not an object"},
		{"missing auditID", item("", "ResponseComplete", "2026-03-01T12:00:00Z"), "", "missing auditID"},
		{"missing stage", item("x1", "", "2026-03-01T12:00:00Z"), "x1", "missing stage"},
		{"unknown stage", item("x2", "ResponseFinished", "2026-03-01T12:00:00Z"), "x2", `unknown stage "ResponseFinished"`},
		{"missing stageTimestamp", item("x3", "ResponseComplete", ""), "x3", "missing stageTimestamp"},
		{"bad stageTimestamp", item("x4", "ResponseComplete", "2026-03-01 noon"), "x4", `stageTimestamp "2026-03-01 noon": too short`},
		{"month out of range", item("x5", "ResponseComplete", "2026-13-01T12:00:00Z"), "x5", "month out of range"},
		{"bad requestReceivedTimestamp",
			`{"auditID":"x6","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","requestReceivedTimestamp":"yesterday"}`,
			"x6", `requestReceivedTimestamp "yesterday": too short`},
		{"code is a string",
			`{"auditID":"x7","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","responseStatus":{"code":"200"}}`,
			"x7", `field "responseStatus.code" is a JSON string, want an integer`},
		{"groups is a string",
			`{"auditID":"x8","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","user":{"username":"u","groups":"g"}}`,
			"x8", `field "user.groups" is a JSON string, want an array`},
		{"annotation value is a number",
			`{"auditID":"x9","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","annotations":{"a":1}}`,
			"x9", `is a JSON number, want a string`},
		{"auditID is a number",
			`{"auditID":9,"stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z"}`,
			"", `field "auditID" is a JSON number, want a string`},
		{"item of another kind",
			`{"kind":"Pod","apiVersion":"v1","auditID":"x10","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z"}`,
			"x10", `kind is "Pod", want Event`},
		{"item of another apiVersion",
			`{"kind":"Event","apiVersion":"audit.k8s.io/v2","auditID":"x11","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z"}`,
			"x11", `apiVersion is "audit.k8s.io/v2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBody("c", []byte(list("audit.k8s.io/v1", good, tt.bad, good)))
			if err != nil {
				t.Fatalf("DecodeBody: %v", err)
			}
			if len(b.Rows) != 2 {
				t.Errorf("got %d rows, want the 2 good ones", len(b.Rows))
			}
			if len(b.Rejects) != 1 {
				t.Fatalf("got rejects %+v, want 1", b.Rejects)
			}
			r := b.Rejects[0]
			if r.Index != 1 || r.AuditID != tt.auditID || !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("got %+v, want index 1, auditID %q, reason containing %q", r, tt.auditID, tt.reason)
			}
		})
	}
}

func TestDecodeBodyBareEventReject(t *testing.T) {
	body := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"e1","stage":"ResponseComplete"}`
	b, err := DecodeBody("c", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 0 || len(b.Rejects) != 1 || b.Rejects[0] != (Reject{Index: 0, AuditID: "e1", Reason: "missing stageTimestamp"}) {
		t.Errorf("got %+v", b)
	}
}

func TestDecodeBodyLenientResponseObject(t *testing.T) {
	// responseObject is whatever the API returned: a metadata that is not
	// ObjectMeta costs the row its response_rv, not its place.
	tests := []struct{ name, obj, wantRV string }{
		{"numeric resourceVersion", `{"metadata":{"resourceVersion":12}}`, ""},
		{"metadata is a string", `{"metadata":"x"}`, ""},
		{"object is an array", `[1,2]`, ""},
		{"no metadata", `{"kind":"Status","code":404}`, ""},
		{"null", `null`, ""},
		{"list", `{"kind":"PodList","metadata":{"resourceVersion":"99"},"items":[{"metadata":{"resourceVersion":"1"}}]}`, "99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := `{"auditID":"r","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","responseObject":` + tt.obj + `,"responseStatus":{"code":404}}`
			b, err := DecodeBody("c", []byte(ev))
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Rows) != 1 {
				t.Fatalf("rejects %+v", b.Rejects)
			}
			if r := b.Rows[0]; r.ResponseRV != tt.wantRV || r.Code != 404 {
				t.Errorf("ResponseRV %q code %d, want %q 404", r.ResponseRV, r.Code, tt.wantRV)
			}
		})
	}
	// A second type error after the one in responseObject still rejects.
	ev := `{"auditID":"r","stage":"ResponseComplete","stageTimestamp":"2026-03-01T12:00:00Z","responseObject":{"metadata":1},"responseStatus":{"code":"x"}}`
	b, err := DecodeBody("c", []byte(ev))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rejects) != 1 || !strings.Contains(b.Rejects[0].Reason, "responseStatus.code") {
		t.Errorf("got %+v, want a reject for responseStatus.code", b)
	}
}

func TestDecodeBodyNotAudit(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"empty", "", "got an empty document"},
		{"blank", " \n", "got an empty document"},
		{"not JSON", "hello", "got text that is not JSON"},
		{"truncated", `{"kind":"EventList","items":[{"auditID":"x"`, "got invalid JSON"},
		{"array", `[{"auditID":"x"}]`, "got a JSON array"},
		{"string", `"Event"`, "got a JSON string"},
		{"number", `42`, "got a JSON number"},
		{"empty object", `{}`, "got an object with none of kind, apiVersion, items or auditID"},
		{"other kind", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}`, `got kind "Pod" apiVersion "v1"`},
		{"other apiVersion", `{"kind":"EventList","apiVersion":"audit.k8s.io/v2","items":[]}`, `got kind "EventList" apiVersion "audit.k8s.io/v2"`},
		{"other group", `{"kind":"Event","apiVersion":"events.k8s.io/v1","reason":"x"}`, `got kind "Event" apiVersion "events.k8s.io/v1"`},
		{"kind is a number", `{"kind":5,"items":[]}`, `field "kind" is a JSON number, want a string`},
		{"items is a string", `{"kind":"EventList","items":"x"}`, `field "items" is a JSON string, want an array`},
		{"trailing garbage", watchEvent + `x`, "got invalid JSON"},
		{"long kind", `{"kind":"` + strings.Repeat("K", 1000) + `"}`, `got kind "` + strings.Repeat("K", 64) + `" apiVersion ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBody("c", []byte(tt.body))
			if !errors.Is(err, ErrNotAudit) {
				t.Fatalf("err = %v, want ErrNotAudit", err)
			}
			const prefix = "not Kubernetes audit JSON: expected an audit.k8s.io/v1, v1beta1 or v1alpha1 EventList or Event, "
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q, want %q…%q", msg, prefix, tt.want)
			}
			if len(b.Rows)+len(b.Rejects) != 0 {
				t.Errorf("got a batch %+v with the error", b)
			}
		})
	}
}

func TestDecodeBodyDoesNotAliasInput(t *testing.T) {
	for _, body := range []string{list("audit.k8s.io/v1", watchEvent), watchEvent} {
		in := []byte(body)
		b, err := DecodeBody("c", in)
		if err != nil || len(b.Rows) != 1 {
			t.Fatalf("DecodeBody: %v, %+v", err, b)
		}
		before := b.Rows[0]
		before.Raw = bytes.Clone(before.Raw)
		for i := range in {
			in[i] = 'X'
		}
		if diff := rowDiff(b.Rows[0], before); diff != "" {
			t.Errorf("row changed with the input:\n%s", diff)
		}
	}
}

func TestDecodeLine(t *testing.T) {
	logLine := `{"kind":"Event","apiVersion":"audit.k8s.io/v1",` + watchEvent[1:] + "\n"
	tests := []struct {
		name    string
		line    string
		rows    int
		rejects int
		err     string
	}{
		{"blank", "", 0, 0, ""},
		{"whitespace", " \t\r\n", 0, 0, ""},
		{"log backend Event", logLine, 1, 0, ""},
		{"CRLF", strings.TrimSuffix(logLine, "\n") + "\r\n", 1, 0, ""},
		{"captured EventList", list("audit.k8s.io/v1", watchEvent, updateEvent, `{}`), 2, 1, ""},
		{"bad event", `{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"x","stage":"Nope"}`, 0, 1, ""},
		{"legacy text format", `2026-03-01T12:00:00.1Z AUDIT: id="x" stage="ResponseComplete"`, 0, 0, "got text that is not JSON"},
		{"other JSON", `{"level":"info","msg":"hello"}`, 0, 0, "got an object with none of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The batch already holds a row: DecodeLine appends.
			b := Batch{Rows: []store.Row{{AuditID: "earlier"}}}
			err := DecodeLine("c", []byte(tt.line), &b)
			if tt.err != "" {
				if !errors.Is(err, ErrNotAudit) || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want ErrNotAudit with %q", err, tt.err)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if len(b.Rows) != 1+tt.rows || len(b.Rejects) != tt.rejects {
				t.Errorf("got %d rows, %d rejects; want %d, %d", len(b.Rows)-1, len(b.Rejects), tt.rows, tt.rejects)
			}
			if b.Rows[0].AuditID != "earlier" {
				t.Errorf("the earlier row was overwritten")
			}
		})
	}
}

func TestDecodeEvent(t *testing.T) {
	raw := []byte(updateEvent)
	row, err := DecodeEvent("c", raw)
	if err != nil {
		t.Fatal(err)
	}
	if row.AuditID != "a0000000-0000-4000-8000-000000000001" || row.ResponseRV != "4417" || string(row.Raw) != updateEvent {
		t.Errorf("got %+v", row)
	}
	if &row.Raw[0] == &raw[0] {
		t.Error("Raw aliases the input")
	}
	_, err = DecodeEvent("c", []byte(`{"auditID":"x"}`))
	if !errors.Is(err, ErrMalformedEvent) || !strings.Contains(err.Error(), "missing stage") {
		t.Errorf("err = %v, want ErrMalformedEvent: missing stage", err)
	}
	_, err = DecodeEvent("c", []byte(`{"auditID":`))
	if !errors.Is(err, ErrMalformedEvent) {
		t.Errorf("err = %v, want ErrMalformedEvent", err)
	}
}

func TestDecodeAnnotationsNilWhenEmpty(t *testing.T) {
	for _, ann := range []string{``, `,"annotations":{}`, `,"annotations":null`} {
		ev := `{"auditID":"a","stage":"Panic","stageTimestamp":"2026-03-01T12:00:00Z"` + ann + `}`
		b, err := DecodeBody("c", []byte(ev))
		if err != nil || len(b.Rows) != 1 {
			t.Fatalf("%s: %v %+v", ev, err, b)
		}
		if b.Rows[0].Annotations != nil {
			t.Errorf("%s: Annotations = %#v, want nil", ev, b.Rows[0].Annotations)
		}
	}
}
