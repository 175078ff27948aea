package query

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"
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
