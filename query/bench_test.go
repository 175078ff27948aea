package query

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

func BenchmarkFilterSQL(b *testing.B) {
	f := Filter{
		Since:     testNow.Add(-24 * time.Hour),
		Until:     testNow,
		Cluster:   []string{"prod"},
		Verb:      []string{"watch", "list"},
		Resource:  []string{"endpoints", "services"},
		Namespace: []string{"kube-system"},
		User:      []string{"system:serviceaccount:kube-system:*", "alice"},
		UserAgent: []string{"kube-controller-manager/*"},
		Code:      []int32{200, 410},
		Limit:     500,
	}
	b.ReportAllocs()
	for b.Loop() {
		f.SQL("cluster, audit_id, stage, raw")
	}
}

func readEvent(b *testing.B) []byte {
	b.Helper()
	raw, err := os.ReadFile("testdata/event.json")
	if err != nil {
		b.Fatal(err)
	}
	return bytes.TrimSpace(raw)
}

func BenchmarkDecodeEvent(b *testing.B) {
	raw := readEvent(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEvent(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJQRun runs typical console programs over a decoded
// RequestResponse event of about 3 KB.
func BenchmarkJQRun(b *testing.B) {
	input, err := DecodeEvent(readEvent(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct{ name, program string }{
		{"select", `select(.verb == "update" and .objectRef.resource == "endpoints")`},
		{"project", `{ts: .stageTimestamp, user: .user.username, verb, uri: .requestURI, code: .responseStatus.code}`},
		{"addresses", `.responseObject.subsets[]?.addresses[]?.ip`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			q := mustJQ(b, bm.program)
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Run(b.Context(), input, func(any) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvents measures Events per event, with the row decoding and
// writing, over a fake store.
func BenchmarkEvents(b *testing.B) {
	raw := string(readEvent(b))
	rows := make([]eventRow, 1000)
	for i := range rows {
		rows[i] = row("id", raw)
	}
	st := &fakeSelecter{rows: rows}
	for _, bm := range []struct{ name, program string }{
		{"raw", ""},
		{"jq", `{user: .user.username, verb, code: .responseStatus.code}`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			var q *JQ
			if bm.program != "" {
				q = mustJQ(b, bm.program)
			}
			b.SetBytes(int64(len(raw) * len(rows)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Events(b.Context(), st, Filter{Limit: len(rows)}, q, Limits{}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEventsRebuilt is BenchmarkEvents over rows stored as residuals
// (raw empty), as the engine prints them: each event is rebuilt from the
// typed columns and its residual.
func BenchmarkEventsRebuilt(b *testing.B) {
	raw := readEvent(b)
	row, err := ingest.DecodeEvent("prod", raw)
	if err != nil {
		b.Fatal(err)
	}
	res := residual.Split(raw, &row)
	line := engineRow(&row, res)
	rows := make([][]byte, 1000)
	for i := range rows {
		rows[i] = line
	}
	st := &rawSelecter{rows: rows}
	for _, bm := range []struct{ name, program string }{
		{"raw", ""},
		{"jq", `{user: .user.username, verb, code: .responseStatus.code}`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			var q *JQ
			if bm.program != "" {
				q = mustJQ(b, bm.program)
			}
			b.SetBytes(int64(len(raw) * len(rows)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Events(b.Context(), st, Filter{Limit: len(rows)}, q, Limits{}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rawSelecter returns rows as given.
type rawSelecter struct{ rows [][]byte }

func (s *rawSelecter) Select(_ context.Context, _ string, _ store.Params, fn func([]byte) error) error {
	for _, r := range s.rows {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// engineRow is r with its residual as a JSONEachRow row of eventColumns,
// strings escaped as ClickHouse escapes them (bytes kept as they are).
func engineRow(r *store.Row, res []byte) []byte {
	str := func(s string) string {
		var b strings.Builder
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	groups := make([]string, len(r.Groups))
	for i, g := range r.Groups {
		groups[i] = str(g)
	}
	var ann []string
	for k, v := range r.Annotations {
		ann = append(ann, str(k)+":"+str(v))
	}
	ts := func(t time.Time) string { return str(t.UTC().Format("2006-01-02 15:04:05.000000")) }
	return fmt.Appendf(nil, `{"cluster":%s,"audit_id":%s,"stage":%s,"raw":"","residual":%s,"level":%s,"verb":%s,"request_uri":%s,`+
		`"ts":%s,"received_at":%s,"user":%s,"user_groups":[%s],"impersonated_user":%s,"user_agent":%s,"source_ip":%s,`+
		`"resource":%s,"subresource":%s,"api_group":%s,"api_version":%s,"namespace":%s,"name":%s,"object_rv":%s,`+
		`"object_uid":%s,"code":%d,"annotations":{%s}}`,
		str(r.Cluster), str(r.AuditID), str(r.Stage), str(string(res)), str(r.Level), str(r.Verb), str(r.RequestURI),
		ts(r.Time), ts(r.ReceivedAt), str(r.User), strings.Join(groups, ","), str(r.ImpersonatedUser), str(r.UserAgent), str(r.SourceIP),
		str(r.Resource), str(r.Subresource), str(r.APIGroup), str(r.APIVersion), str(r.Namespace), str(r.Name), str(r.ObjectRV),
		str(r.ObjectUID), r.Code, strings.Join(ann, ","))
}
