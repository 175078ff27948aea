package store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inverseTemplate is the ALIAS column request_uri of migration 0009 in Go.
func inverseTemplate(full, tmpl string, r *Row) string {
	if tmpl == "" {
		return full
	}
	s := strings.Replace(tmpl, phTimeout, strconv.Itoa(int(r.TimeoutSeconds)), 1)
	s = strings.Replace(s, phRV, r.RequestedRV, 1)
	s = strings.Replace(s, phName, r.Name, 1)
	return strings.Replace(s, phNamespace, r.Namespace, 1)
}

// derivedRows are rows whose request URI and received time exercise the
// stored forms: templates with every placeholder, URIs the template cannot
// hold, lags that do not fit.
func derivedRows() []Row {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 123456000, time.UTC)
	rows := []Row{
		{RequestURI: "/api/v1/namespaces/kube-system/pods/coredns-1?timeout=10s", Namespace: "kube-system", Name: "coredns-1"},
		{RequestURI: "/api/v1/namespaces/ns/pods?allowWatchBookmarks=true&resourceVersion=123&timeoutSeconds=300&watch=true", Namespace: "ns", RequestedRV: "123", TimeoutSeconds: 300},
		{RequestURI: "/api/v1/pods?timeoutSeconds=-5&resourceVersion=9&resourceVersion=9", RequestedRV: "9", TimeoutSeconds: -5},
		{RequestURI: "/api/v1/nodes/node-1/status", Name: "node-1", Subresource: "status"},
		{RequestURI: "/api/v1/namespaces/a/pods/a", Namespace: "a", Name: "a"},
		{RequestURI: "/api/v1/namespaces/a", Name: "a"},
		{RequestURI: "/apis/x/v1/namespaces/ab/things/b", Namespace: "a", Name: "b"},
		{RequestURI: "/api/v1/pods?resourceVersion=0123", RequestedRV: "123"},
		{RequestURI: "/api/v1/pods?timeoutSeconds=0300", TimeoutSeconds: 300},
		{RequestURI: "/api/v1/namespaces/n\x01/pods/\x02x\x04?resourceVersion=\x03", Namespace: "n\x01", Name: "\x02x\x04", RequestedRV: "\x03"},
		{RequestURI: "/api/v1/pods/\xff\x01", Name: "\xff\x01"},
		{RequestURI: "/api/v1/pods/x\xff", Name: "x"},
		{RequestURI: "/api/v1/pods/x", Name: "x\xff"},
		{RequestURI: "", Name: "x", Namespace: "y"},
		{RequestURI: "?", Name: "x"},
		{RequestURI: "x", Name: "x"},
		{RequestURI: "/x", Name: "x"},
		{RequestURI: "/api/v1/namespaces//pods//", Namespace: "", Name: ""},
	}
	for i := range rows {
		r := &rows[i]
		r.Cluster, r.AuditID, r.Stage, r.Time = "c", fmt.Sprintf("id-%02d", i), "ResponseComplete", t0.Add(time.Duration(i)*time.Second)
		r.ReceivedAt = r.Time.Add(-time.Duration(i*i) * time.Millisecond)
	}
	// Received times the lag cannot hold, or far from ts.
	rows[0].ReceivedAt = time.Time{}
	rows[1].ReceivedAt = rows[1].Time.Add(time.Hour)
	rows[2].ReceivedAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	rows[3].ReceivedAt = time.Date(2299, 12, 31, 23, 59, 59, 999999000, time.UTC)
	rows[3].Time = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	return rows
}

func TestSplitRequestURI(t *testing.T) {
	for _, r := range derivedRows() {
		full, tmpl := splitRequestURI(&r)
		if got := inverseTemplate(full, tmpl, &r); got != r.RequestURI {
			t.Errorf("%q: full %q tmpl %q reads back %q", r.RequestURI, full, tmpl, got)
		}
		if full != "" && tmpl != "" {
			t.Errorf("%q: both full %q and tmpl %q", r.RequestURI, full, tmpl)
		}
		b := appendRequestURI(nil, &r)
		want := rbString(rbString(nil, full), tmpl)
		if string(b) != string(want) {
			t.Errorf("%q: appendRequestURI % x, want % x", r.RequestURI, b, want)
		}
	}
	r := Row{RequestURI: "/api/v1/namespaces/ns/pods/p?resourceVersion=1&timeoutSeconds=2", Namespace: "ns", Name: "p", RequestedRV: "1", TimeoutSeconds: 2}
	if _, tmpl := splitRequestURI(&r); tmpl != "/api/v1/namespaces/\xff\x04/pods/\xff\x01?resourceVersion=\xff\x02&timeoutSeconds=\xff\x03" {
		t.Errorf("template %q", tmpl)
	}
	if allocs := testing.AllocsPerRun(100, func() { appendRequestURI(make([]byte, 0, 128), &r) }); allocs > 0 {
		t.Errorf("appendRequestURI allocates %v times", allocs)
	}
}

// TestSplitRequestURIRandom: URIs and columns made of the bytes that
// matter (separators, placeholder bytes, short names) read back as written.
func TestSplitRequestURIRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"/", "?", "&", "=", "a", "b", "1", "\x01", "\x02", "\x03", "\x04", "\xff", "/namespaces/", "resourceVersion=", "timeoutSeconds=", "-", "é"}
	word := func(n int) string {
		var b strings.Builder
		for range rng.IntN(n) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		return b.String()
	}
	small := []string{"", "a", "b", "1", "ab", "\x01", "\xff"}
	for range 200_000 {
		r := Row{
			RequestURI:     word(12),
			Namespace:      small[rng.IntN(len(small))],
			Name:           small[rng.IntN(len(small))],
			RequestedRV:    small[rng.IntN(len(small))],
			TimeoutSeconds: int32(rng.IntN(3) - 1),
		}
		full, tmpl := splitRequestURI(&r)
		if got := inverseTemplate(full, tmpl, &r); got != r.RequestURI {
			t.Fatalf("%q (ns %q name %q rv %q timeout %d): full %q tmpl %q reads back %q", r.RequestURI, r.Namespace, r.Name, r.RequestedRV, r.TimeoutSeconds, full, tmpl, got)
		}
	}
}

func TestSplitReceivedAt(t *testing.T) {
	for _, c := range []struct{ ts, recv int64 }{
		{0, 0}, {1, 0}, {0, 1}, {math.MaxInt64, math.MinInt64}, {math.MinInt64, math.MaxInt64},
		{math.MinInt64, 0}, {0, math.MinInt64}, {-1, math.MaxInt64}, {math.MaxInt64, -1}, {-5, -7},
		{math.MinInt64 + 1, 1}, {math.MinInt64 + 1, 0},
	} {
		r := Row{Time: time.UnixMicro(c.ts), ReceivedAt: time.UnixMicro(c.recv)}
		full, lag := splitReceivedAt(&r)
		got := full
		if lag != noLag {
			got = micros(r.Time) - lag
		}
		if got != micros(r.ReceivedAt) {
			t.Errorf("ts %d received %d: full %d lag %d reads back %d", c.ts, c.recv, full, lag, got)
		}
	}
}

// TestEmbeddedDerivedColumns: request_uri and received_at read back from
// their stored forms through the ALIAS columns as they were written.
func TestEmbeddedDerivedColumns(t *testing.T) {
	ctx := context.Background()
	e := openTestTable(t)
	rows := derivedRows()
	if err := e.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var got []Row
	err := e.SelectRows(ctx, "SELECT audit_id, request_uri, received_at FROM audit_events ORDER BY audit_id", nil, func(r *Row) error {
		got = append(got, *r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows, want %d", len(got), len(rows))
	}
	for i, r := range rows {
		if got[i].RequestURI != r.RequestURI {
			t.Errorf("%s: request_uri %q, want %q", r.AuditID, got[i].RequestURI, r.RequestURI)
		}
		if micros(got[i].ReceivedAt) != micros(r.ReceivedAt) {
			t.Errorf("%s: received_at %v, want %v", r.AuditID, got[i].ReceivedAt, r.ReceivedAt)
		}
	}
}
