package query

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/auditlens/auditlens/store"
)

func TestEventRowDecode(t *testing.T) {
	tests := []struct {
		in   string
		want eventRow
	}{
		{`{"cluster":"prod","audit_id":"a1","stage":"ResponseComplete","raw":"{\"verb\":\"get\"}"}`,
			eventRow{Cluster: "prod", AuditID: "a1", Stage: "ResponseComplete", Raw: `{"verb":"get"}`}},
		// ClickHouse escapes forward slashes and control characters.
		{`{"raw":"{\"uri\":\"\/api\/v1\",\"s\":\"a\\\\b\\n\u0000\"}"}`,
			eventRow{Raw: `{"uri":"/api/v1","s":"a\\b\n` + "\x00" + `"}`}},
		{` { "raw" : "x\b\f\n\r\t\u00e9\ud83d\ude00" , "other" : "y" } `,
			eventRow{Raw: "x\b\f\n\r\té😀"}},
		{`{"raw":"\ud83d x"}`, eventRow{Raw: "\uFFFD x"}},
		{`{"raw":"\ude00\ud83d\u0041"}`, eventRow{Raw: "\uFFFD\uFFFDA"}},
		{`{}`, eventRow{}},
		// Not UTF-8: kept as it is, where encoding/json would change it.
		{"{\"raw\":\"\xff\xfe\"}", eventRow{Raw: "\xff\xfe"}},
		// Other shapes go to encoding/json.
		{`{"raw":"x","n":1,"a":[1,{"b":null}]}`, eventRow{Raw: "x"}},
	}
	for _, tt := range tests {
		var rr rowReader
		if err := rr.read([]byte(tt.in)); err != nil {
			t.Errorf("read(%q): %v", tt.in, err)
			continue
		}
		got := rr.row
		got.Raw = string(rr.raw)
		if got != tt.want {
			t.Errorf("read(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"raw":"x"`, `{"raw":"x"} x`, `{"raw":"\q"}`, `{"raw":"\u12"}`, "{\"raw\":\"a\nb\"}", `[]`, `{"raw":1}`} {
		var rr rowReader
		if err := rr.read([]byte(bad)); err == nil {
			t.Errorf("read(%q) = %+v, want an error", bad, rr)
		}
	}
}

// FuzzEventRowDecode checks the fast row decoder against encoding/json:
// on UTF-8 input both accept the same objects of strings and read the same
// values (code, user_groups and annotations are a number, an array and an
// object of strings in the engine's rows, and read as such).
func FuzzEventRowDecode(f *testing.F) {
	f.Add([]byte(`{"cluster":"prod","audit_id":"a","stage":"Panic","raw":"{\"a\":\"\/\u00e9\ud83d\ude00\"}"}`))
	f.Add([]byte(`{"raw":"\ud83d\ud83d\ude00","raw":"last"}`))
	f.Add([]byte(` {"raw" :"\\\"\b\f\n\r\t", "x":"y"} `))
	f.Add([]byte(`{"audit_id":"a","residual":"p","code":-1,"user_groups":["a","b"],"annotations":{"k":"v"},"ts":"2026-03-01 12:00:00.000001"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rr rowReader
		fastErr := rr.readFast(data)
		fast := rr.row
		fast.Raw = string(rr.raw)
		if !utf8.Valid(data) {
			return
		}
		var m map[string]any
		stdErr := json.Unmarshal(data, &m)
		typed := false
		for _, k := range []string{"code", "user_groups", "annotations"} {
			_, ok := m[k]
			typed = typed || ok
		}
		var ms map[string]string
		allStrings := json.Unmarshal(data, &ms) == nil && ms != nil
		switch {
		case fastErr == nil && stdErr != nil:
			t.Fatalf("fast decoder accepts %q, encoding/json does not: %v", data, stdErr)
		case fastErr != nil && allStrings && !typed:
			t.Fatalf("fast decoder rejects %q, encoding/json reads %q", data, ms)
		case fastErr == nil:
			str := func(k string) string { s, _ := m[k].(string); return s }
			want := eventRow{Cluster: str("cluster"), AuditID: str("audit_id"), Stage: str("stage"), Raw: str("raw")}
			if fast != want {
				t.Fatalf("fast decoder reads %q as %+v, encoding/json as %+v", data, fast, want)
			}
			if got := string(rr.res); got != str("residual") {
				t.Fatalf("fast decoder reads the residual of %q as %q, encoding/json as %q", data, got, str("residual"))
			}
		}
	})
}

// TestEventRowColumns: the typed columns a row of Events' query holds are
// read into the row the skeleton is built from.
func TestEventRowColumns(t *testing.T) {
	in := `{"cluster":"c","audit_id":"a","stage":"ResponseComplete","raw":"","residual":"pd\u0004kind",` +
		`"level":"Metadata","verb":"get","request_uri":"\/api\/v1\/pods","ts":"2026-03-01 12:00:00.000002","received_at":"2026-03-01 12:00:00.000001",` +
		`"user":"u","user_groups":["g1","g\"2"],"impersonated_user":"i","user_agent":"ua","source_ip":"10.0.0.1",` +
		`"resource":"pods","subresource":"log","api_group":"","api_version":"v1","namespace":"n","name":"p","object_rv":"5",` +
		`"object_uid":"uid","code":-404,"annotations":{"a":"1","b":"\u2028"}}`
	var rr rowReader
	if err := rr.read([]byte(in)); err != nil {
		t.Fatal(err)
	}
	want := store.Row{
		AuditID: "a", Stage: "ResponseComplete", Level: "Metadata", Verb: "get", RequestURI: "/api/v1/pods",
		Time: time.Date(2026, 3, 1, 12, 0, 0, 2000, time.UTC), ReceivedAt: time.Date(2026, 3, 1, 12, 0, 0, 1000, time.UTC),
		User: "u", Groups: []string{"g1", `g"2`}, ImpersonatedUser: "i", UserAgent: "ua", SourceIP: "10.0.0.1",
		Resource: "pods", Subresource: "log", APIVersion: "v1", Namespace: "n", Name: "p", ObjectRV: "5",
		ObjectUID: "uid", Code: -404, Annotations: map[string]string{"a": "1", "b": "\u2028"},
	}
	if !reflect.DeepEqual(rr.cols, want) {
		t.Errorf("columns\n got  %+v\n want %+v", rr.cols, want)
	}
	ev, err := rr.event()
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

	// The next row, stored before residuals, reads as its raw event, and
	// keeps nothing of the row before.
	if err := rr.read([]byte(`{"cluster":"c","audit_id":"b","stage":"Panic","raw":"{}","residual":""}`)); err != nil {
		t.Fatal(err)
	}
	if ev, err := rr.event(); err != nil || string(ev) != "{}" {
		t.Errorf("old row: %s, %v", ev, err)
	}
	if rr.cols.Annotations["a"] != "" || len(rr.cols.Groups) != 0 || rr.cols.Code != 0 {
		t.Errorf("columns of the row before kept: %+v", rr.cols)
	}
	// Columns Events does not read (an export's row has them all) are
	// skipped, whatever their JSON: numbers, Bools, arrays and objects
	// whose strings hold brackets.
	if err := rr.read([]byte(`{"residual":"p","n":[1,{"x":"]}"}],"w":true,"l":-12,"raw":""}`)); err != nil || string(rr.res) != "p" {
		t.Errorf("a row with other columns: residual %q, %v", rr.res, err)
	}
	// A row with a residual that encoding/json would have to read is
	// refused rather than misread.
	if err := rr.read([]byte(`{"residual":"p","n":[1}`)); err == nil {
		t.Error("a residual in a row of another shape was read")
	}
}

func TestRowReaderReusesBuffer(t *testing.T) {
	var rr rowReader
	for _, tt := range []struct{ in, want string }{
		{`{"raw":"a long raw event \"with\" escapes"}`, `a long raw event "with" escapes`},
		{`{"raw":"short"}`, "short"},
		{`{"audit_id":"no raw"}`, ""},
		{`{"raw":"x","n":1}`, "x"}, // through encoding/json
		{`{"raw":"\u0041"}`, "A"},
	} {
		if err := rr.read([]byte(tt.in)); err != nil {
			t.Fatalf("read(%q): %v", tt.in, err)
		}
		if string(rr.raw) != tt.want {
			t.Errorf("read(%q): raw %q, want %q", tt.in, rr.raw, tt.want)
		}
	}
}
