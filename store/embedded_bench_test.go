package store

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// BenchmarkEmbeddedInsert inserts 10k-row batches of realistic events
// (about 1.3 KB of raw JSON each) into audit_events: as Insert does it
// (RowBinary encoded in Go), and, as the baseline, the same rows encoded as
// JSONEachRow. Both include the encoding.
//
//	go test -run '^$' -bench EmbeddedInsert -benchtime 3x ./store/
func BenchmarkEmbeddedInsert(b *testing.B) {
	const batch = 10_000
	ctx := context.Background()
	e := openTestEmbedded(b)
	ddl := embRenderMigration(b)
	// A fresh table for each run, so that no run pays for merging the
	// parts of another.
	freshTable := func(b *testing.B) {
		b.Helper()
		if err := e.Exec(ctx, "DROP TABLE IF EXISTS audit_events SYNC", nil); err != nil {
			b.Fatal(err)
		}
		if err := e.Exec(ctx, ddl, nil); err != nil {
			b.Fatal(err)
		}
	}
	rows := embBenchRows(batch)
	raw := 0
	for i := range rows {
		raw += len(rows[i].Raw)
	}

	b.Run("RowBinary", func(b *testing.B) {
		freshTable(b)
		b.ReportAllocs()
		cpu := embCPUTime()
		for b.Loop() {
			if err := e.Insert(ctx, rows); err != nil {
				b.Fatal(err)
			}
		}
		embReportRates(b, batch, raw, cpu)
	})
	// The same batch as two halves inserted at once, on two connections:
	// what a writer gains by running two Inserts concurrently.
	b.Run("RowBinary-2x5k", func(b *testing.B) {
		freshTable(b)
		b.ReportAllocs()
		cpu := embCPUTime()
		for b.Loop() {
			errs := make(chan error, 2)
			for _, half := range [][]Row{rows[:batch/2], rows[batch/2:]} {
				go func() { errs <- e.Insert(ctx, half) }()
			}
			for range 2 {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
		}
		embReportRates(b, batch, raw, cpu)
	})
	b.Run("JSONEachRow", func(b *testing.B) {
		freshTable(b)
		b.ReportAllocs()
		cpu := embCPUTime()
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for i := range rows {
				buf = embAppendJSONRow(buf, &rows[i])
			}
			if err := e.db.Insert(ctx, "INSERT INTO audit_events", "JSONEachRow", buf); err != nil {
				b.Fatal(err)
			}
		}
		embReportRates(b, batch, raw, cpu)
	})
}

// embReportRates reports rows per second of wall time and per second of
// the process's CPU time (every thread, the engine's background merges
// included), which says more than wall time on a busy machine.
func embReportRates(b *testing.B, batch, raw int, cpuStart time.Duration) {
	rows := float64(batch * b.N)
	b.ReportMetric(rows/b.Elapsed().Seconds(), "rows/s")
	if cpu := embCPUTime() - cpuStart; cpu > 0 {
		b.ReportMetric(rows/cpu.Seconds(), "rows/cpu-s")
	}
	b.ReportMetric(float64(raw)/float64(batch), "raw-B/row")
}

// embCPUTime is the user and system time of the whole process so far.
func embCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEmbeddedEncodeRowBinary is the Go side of Insert alone.
func BenchmarkEmbeddedEncodeRowBinary(b *testing.B) {
	rows := embBenchRows(1000)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for i := range rows {
			buf = appendRowBinary(buf, &rows[i])
		}
	}
	b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// embBenchRows makes n events shaped like a busy cluster's: controllers
// updating endpoints, watches, gets and lists across namespaces.
func embBenchRows(n int) []Row {
	verbs := []string{"update", "get", "watch", "list", "patch", "create", "delete"}
	resources := []string{"endpoints", "pods", "configmaps", "leases", "services", "events"}
	users := []string{
		"system:serviceaccount:kube-system:endpoint-controller",
		"system:kube-controller-manager",
		"system:node:node-7",
		"alice@example.com",
	}
	base := time.Date(2025, 3, 4, 5, 0, 0, 0, time.UTC)
	rows := make([]Row, n)
	for i := range rows {
		verb, res, user := verbs[i%len(verbs)], resources[i%len(resources)], users[i%len(users)]
		ns := "team-" + strconv.Itoa(i%40)
		name := fmt.Sprintf("svc-%d-%x", i%500, i*2654435761%0xffffff)
		id := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", (i*2654435761)&0xffffffff, i%0xffff, i%0xfff, (i*7)%0xfff, i*40503)
		rv := strconv.Itoa(1_000_000 + i*3)
		ts := base.Add(time.Duration(i) * 731 * time.Microsecond)
		uri := fmt.Sprintf("/api/v1/namespaces/%s/%s/%s", ns, res, name)
		watch := verb == "watch"
		if watch || verb == "list" {
			uri = fmt.Sprintf("/api/v1/namespaces/%s/%s?allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d&watch=%t", ns, res, rv, 300+i%300, watch)
		}
		ua := "kube-controller-manager/v1.30.2 (linux/amd64) kubernetes/39683505/system:serviceaccount:kube-system:endpoint-controller"
		reason := `RBAC: allowed by ClusterRoleBinding "system:controller:endpoint-controller" of ClusterRole "system:controller:endpoint-controller" to ServiceAccount "endpoint-controller/kube-system"`
		raw := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"%s","stage":"ResponseComplete",`+
			`"requestURI":"%s","verb":"%s","user":{"username":"%s","uid":"8a1f2c3d-%04d"},`+
			`"sourceIPs":["10.0.%d.%d"],"userAgent":"%s","objectRef":{"resource":"%s","namespace":"%s","name":"%s","uid":"b7e3%08x-1d2c-4e5f-9a8b-%012x","apiVersion":"v1","resourceVersion":"%s"},`+
			`"responseStatus":{"metadata":{},"code":200},"responseObject":{"kind":"Endpoints","apiVersion":"v1","metadata":{"name":"%s","namespace":"%s","uid":"b7e3%08x","resourceVersion":"%s"},`+
			`"subsets":[{"addresses":[{"ip":"10.1.%d.%d","nodeName":"node-%d"}]}]},`+
			`"requestReceivedTimestamp":"%s","stageTimestamp":"%s","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":%q}}`,
			id, uri, verb, user, i%10000, i%256, (i*7)%256, ua, res, ns, name, i, i, rv,
			name, ns, i, rv, i%256, (i*3)%256, i%20,
			ts.Add(-2*time.Millisecond).Format(time.RFC3339Nano), ts.Format(time.RFC3339Nano), reason)
		rows[i] = Row{
			Cluster: "prod-eu", AuditID: id, Stage: "ResponseComplete", Level: "RequestResponse", Verb: verb,
			RequestURI: uri, Time: ts, ReceivedAt: ts.Add(-2 * time.Millisecond), User: user,
			Groups:    []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
			UserAgent: ua, SourceIP: fmt.Sprintf("10.0.%d.%d", i%256, (i*7)%256),
			Resource: res, APIVersion: "v1", Namespace: ns, Name: name, ObjectRV: rv,
			ObjectUID: fmt.Sprintf("b7e3%08x", i), Code: 200, ResponseRV: rv, Watch: watch,
			TimeoutSeconds: int32(300 + i%300), Limit: 500,
			Annotations: map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": reason},
			Raw:         []byte(raw),
		}
		if watch || verb == "list" {
			rows[i].RequestedRV = rv
		}
	}
	return rows
}

// embAppendJSONRow appends r as one JSONEachRow line, for the baseline.
func embAppendJSONRow(b []byte, r *Row) []byte {
	const layout = `"2006-01-02 15:04:05.000000"`
	str := func(b []byte, k, v string) []byte {
		b = append(b, `,"`...)
		b = append(b, k...)
		b = append(b, `":`...)
		return embAppendJSONString(b, v)
	}
	num := func(b []byte, k string, v int64) []byte {
		b = append(b, `,"`...)
		b = append(b, k...)
		b = append(b, `":`...)
		return strconv.AppendInt(b, v, 10)
	}
	b = append(b, `{"cluster":`...)
	b = embAppendJSONString(b, r.Cluster)
	b = append(b, `,"ts":`...)
	b = r.Time.UTC().AppendFormat(b, layout)
	b = append(b, `,"received_at":`...)
	b = r.ReceivedAt.UTC().AppendFormat(b, layout)
	b = str(b, "audit_id", r.AuditID)
	b = str(b, "stage", r.Stage)
	b = str(b, "level", r.Level)
	b = str(b, "verb", r.Verb)
	b = str(b, "request_uri", r.RequestURI)
	b = str(b, "user", r.User)
	b = append(b, `,"user_groups":[`...)
	for i, g := range r.Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = embAppendJSONString(b, g)
	}
	b = append(b, ']')
	b = str(b, "impersonated_user", r.ImpersonatedUser)
	b = str(b, "user_agent", r.UserAgent)
	b = str(b, "source_ip", r.SourceIP)
	b = str(b, "resource", r.Resource)
	b = str(b, "subresource", r.Subresource)
	b = str(b, "api_group", r.APIGroup)
	b = str(b, "api_version", r.APIVersion)
	b = str(b, "namespace", r.Namespace)
	b = str(b, "name", r.Name)
	b = str(b, "object_rv", r.ObjectRV)
	b = str(b, "object_uid", r.ObjectUID)
	b = num(b, "code", int64(r.Code))
	b = str(b, "response_rv", r.ResponseRV)
	b = append(b, `,"watch":`...)
	b = strconv.AppendBool(b, r.Watch)
	b = str(b, "req_rv", r.RequestedRV)
	b = str(b, "req_rv_match", r.RVMatch)
	b = num(b, "timeout_seconds", int64(r.TimeoutSeconds))
	b = str(b, "label_selector", r.LabelSelector)
	b = str(b, "field_selector", r.FieldSelector)
	b = num(b, "req_limit", r.Limit)
	b = str(b, "req_continue", r.Continue)
	b = append(b, `,"annotations":{`...)
	first := true
	for k, v := range r.Annotations {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = embAppendJSONString(b, k)
		b = append(b, ':')
		b = embAppendJSONString(b, v)
	}
	b = append(b, '}')
	b = append(b, `,"raw":`...)
	b = embAppendJSONString(b, r.Raw)
	return append(b, "}\n"...)
}

// embAppendJSONString appends s as a JSON string.
func embAppendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			_, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
