package query

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
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
// values.
func FuzzEventRowDecode(f *testing.F) {
	f.Add([]byte(`{"cluster":"prod","audit_id":"a","stage":"Panic","raw":"{\"a\":\"\/\u00e9\ud83d\ude00\"}"}`))
	f.Add([]byte(`{"raw":"\ud83d\ud83d\ude00","raw":"last"}`))
	f.Add([]byte(` {"raw" :"\\\"\b\f\n\r\t", "x":"y"} `))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rr rowReader
		fastErr := rr.readFast(data)
		fast := rr.row
		fast.Raw = string(rr.raw)
		if !utf8.Valid(data) {
			return
		}
		var m map[string]string
		stdErr := json.Unmarshal(data, &m)
		switch {
		case fastErr == nil && stdErr != nil:
			t.Fatalf("fast decoder accepts %q, encoding/json does not: %v", data, stdErr)
		case fastErr != nil && stdErr == nil && m != nil:
			t.Fatalf("fast decoder rejects %q, encoding/json reads %q", data, m)
		case fastErr == nil:
			want := eventRow{Cluster: m["cluster"], AuditID: m["audit_id"], Stage: m["stage"], Raw: m["raw"]}
			if fast != want {
				t.Fatalf("fast decoder reads %q as %+v, encoding/json as %+v", data, fast, want)
			}
		}
	})
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
