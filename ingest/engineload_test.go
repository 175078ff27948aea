package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestEngineDerivation holds the engine's derivation of every column
// (engineColumns) to the Go decoder's (normalize, ParseRequestURI): every
// committed recording of a real apiserver, a generated log, and a log of
// the awkward corners of request URIs and times are loaded both ways and
// every column of every event must be equal.
func TestEngineDerivation(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	files, err := filepath.Glob("../deploy/e2e/fixtures/*.log*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d recordings in deploy/e2e/fixtures, want the committed ones", len(files))
	}
	dir := t.TempDir()
	files = append(files, writeLog(t, filepath.Join(dir, "generated.log"), generatedLines(t)), writeLog(t, filepath.Join(dir, "corners.log"), cornerLines()))
	for _, f := range files {
		want := goRows(t, f, "c1")
		// Read by the engine in one stream, and fed to it in three parts
		// of whole lines (feedParts), as large logs are.
		for _, fed := range []bool{false, true} {
			name := filepath.Base(f)
			if fed {
				name += "/fed"
			}
			t.Run(name, func(t *testing.T) {
				if fed {
					feedInParts(t, 3)
				}
				if err := store.CreateScanEvents(ctx, st, false); err != nil {
					t.Fatal(err)
				}
				stats, err := EngineLoad(ctx, st, []string{f}, "c1", nil)
				if err != nil {
					t.Fatal(err)
				}
				got := engineRows(t, st)
				if stats.Events != int64(len(want)) {
					t.Errorf("EngineLoad says %d events, the decoder read %d", stats.Events, len(want))
				}
				compareRows(t, slices.Clone(want), got)
			})
		}
	}
}

// feedInParts has EngineLoad feed every plain file, however small, to the
// engine in parts parts, until the test ends.
func feedInParts(t *testing.T, parts int) {
	t.Helper()
	if !feedSupported {
		t.Skip("feeds need Linux")
	}
	minBytes, cores := feedMinBytes, feedCores
	feedMinBytes, feedCores = 0, parts
	t.Cleanup(func() { feedMinBytes, feedCores = minBytes, cores })
}

// TestEngineLoadRefuses: what the engine cannot read as the decoder does
// is refused as a whole, for Import to take.
func TestEngineLoadRefuses(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	dir := t.TempDir()
	good := eventLine(cornerEvent{uri: "/api/v1/pods"})
	cases := map[string][]string{
		"malformed line":      {good, `{"kind":"Event",`},
		"unknown stage":       {good, strings.Replace(good, `"ResponseComplete"`, `"Done"`, 1)},
		"code as a string":    {good, strings.Replace(good, `"code":200`, `"code":"200"`, 1)},
		"auditID as a number": {good, strings.Replace(good, `"auditID":"`, `"auditID":7,"x":"`, 1)},
		"bad time":            {good, strings.Replace(good, `"stageTimestamp":"2026-01-01T00:00:01.5Z"`, `"stageTimestamp":"2026-02-30T00:00:01Z"`, 1)},
		"leap second":         {good, strings.Replace(good, `"stageTimestamp":"2026-01-01T00:00:01.5Z"`, `"stageTimestamp":"2026-01-01T00:00:60Z"`, 1)},
		"an EventList first":  {`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`, good},
		"v1beta1":             {strings.Replace(good, `audit.k8s.io/v1"`, `audit.k8s.io/v1beta1"`, 1)},
		"an EventList later":  {good, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`},
	}
	for name, lines := range cases {
		t.Run(name, func(t *testing.T) {
			if err := store.CreateScanEvents(ctx, st, false); err != nil {
				t.Fatal(err)
			}
			f := writeLog(t, filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".log"), lines)
			_, err := EngineLoad(ctx, st, []string{f}, "c1", nil)
			if !errors.Is(err, ErrNotEngineReadable) {
				t.Fatalf("EngineLoad = %v, want ErrNotEngineReadable", err)
			}
		})
		// Fed in parts, the bad line is in the second: the engine stops
		// reading, and every pipe is closed and gone all the same.
		t.Run(name+"/fed", func(t *testing.T) {
			if len(lines) < 2 {
				t.Skip("one line: nothing to cut")
			}
			feedInParts(t, 2)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			if err := store.CreateScanEvents(ctx, st, false); err != nil {
				t.Fatal(err)
			}
			// Enough good lines that the cut falls before the bad one.
			f := writeLog(t, filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+"-fed.log"), append(slices.Repeat(lines[:1], 3), lines[1:]...))
			_, err := EngineLoad(ctx, st, []string{f}, "c1", nil)
			if !errors.Is(err, ErrNotEngineReadable) {
				t.Fatalf("EngineLoad = %v, want ErrNotEngineReadable", err)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("the feed left %s behind", left[0].Name())
			}
		})
	}
	t.Run("good", func(t *testing.T) {
		if err := store.CreateScanEvents(ctx, st, false); err != nil {
			t.Fatal(err)
		}
		f := writeLog(t, filepath.Join(dir, "good.log"), []string{good, "", good})
		stats, err := EngineLoad(ctx, st, []string{f}, "c1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Events != 2 || stats.Stored != 1 || stats.Duplicates != 1 {
			t.Errorf("events %d, stored %d, duplicates %d; want 2, 1, 1", stats.Events, stats.Stored, stats.Duplicates)
		}
		if n := len(engineRows(t, st)); n != 1 {
			t.Errorf("%d rows stored, want the event once", n)
		}
	})
}

// TestEngineLoadGzip reads a log of two gzip members, as logrotate's
// copies concatenated make.
func TestEngineLoadGzip(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	var buf bytes.Buffer
	for i := range 2 {
		zw := gzip.NewWriter(&buf)
		fmt.Fprintln(zw, eventLine(cornerEvent{uri: fmt.Sprintf("/api/v1/pods?limit=%d", i+1), id: fmt.Sprint(i)}))
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f := filepath.Join(t.TempDir(), "two-members.log.gz")
	if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateScanEvents(ctx, st, false); err != nil {
		t.Fatal(err)
	}
	if _, err := EngineLoad(ctx, st, []string{f}, "c1", nil); err != nil {
		t.Fatal(err)
	}
	compareRows(t, goRows(t, f, "c1"), engineRows(t, st))
}

// goRows decodes the log at path with the Go decoder, as Import does.
func goRows(t *testing.T, path, cluster string) []store.Row {
	t.Helper()
	var b Batch
	err := readLines(context.Background(), path, nil, new(atomic.Int64), func(_ int64, line []byte) error {
		if err := DecodeLine(cluster, line, &b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rejects) > 0 {
		t.Fatalf("%s: the decoder rejects %+v", path, b.Rejects[0])
	}
	for i := range b.Rows {
		b.Rows[i].Raw = nil
	}
	return b.Rows
}

// engineRows makes the loaded table audit_events, as scan does, and reads
// it back.
func engineRows(t *testing.T, st store.Store) []store.Row {
	t.Helper()
	if err := store.UseScanEvents(context.Background(), st, false); err != nil {
		t.Fatal(err)
	}
	var out []store.Row
	err := st.SelectRows(context.Background(), "SELECT "+strings.Join(store.RowColumns(), ", ")+" FROM audit_events", nil,
		func(r *store.Row) error {
			// r and its slices and maps are reused for the next row.
			c := *r
			c.Groups = slices.Clone(r.Groups)
			c.Annotations = maps.Clone(r.Annotations)
			out = append(out, c)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareRows compares two sets of rows by (audit ID, stage), field by
// field, and reports the first differences.
func compareRows(t *testing.T, want, got []store.Row) {
	t.Helper()
	byKey := func(a, b store.Row) int {
		return strings.Compare(a.AuditID+"\x00"+a.Stage, b.AuditID+"\x00"+b.Stage)
	}
	slices.SortStableFunc(want, byKey)
	slices.SortStableFunc(got, byKey)
	want = slices.CompactFunc(want, func(a, b store.Row) bool { return byKey(a, b) == 0 })
	if len(got) != len(want) {
		t.Fatalf("the engine stored %d events, the decoder read %d", len(got), len(want))
	}
	diffs := 0
	for i := range want {
		for _, d := range engineRowDiff(want[i], got[i]) {
			if diffs++; diffs <= 10 {
				t.Errorf("%s %s (%s): %s", want[i].AuditID, want[i].Stage, want[i].RequestURI, d)
			}
		}
	}
	if diffs > 10 {
		t.Errorf("... %d differences in all", diffs)
	}
}

// engineRowDiff lists the fields in which a and b differ (nil and empty slices
// and maps are the same, times compare as instants).
func engineRowDiff(a, b store.Row) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		fa, fb := va.Field(i), vb.Field(i)
		name := va.Type().Field(i).Name
		switch x := fa.Interface().(type) {
		case time.Time:
			if !x.Equal(fb.Interface().(time.Time)) {
				out = append(out, fmt.Sprintf("%s: decoder %v, engine %v", name, x, fb.Interface()))
			}
		default:
			if (fa.Kind() == reflect.Slice || fa.Kind() == reflect.Map) && fa.Len() == 0 && fb.Len() == 0 {
				continue
			}
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, fmt.Sprintf("%s: decoder %#v, engine %#v", name, fa.Interface(), fb.Interface()))
			}
		}
	}
	return out
}

// writeLog writes lines to path and returns path.
func writeLog(t *testing.T, path string, lines []string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// generatedLines is a generated cluster's log: every kind of client the
// generator models.
func generatedLines(t *testing.T) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := auditgen.New(3, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).WriteLog(&buf, 20000); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// cornerEvent is one event of cornerLines.
type cornerEvent struct {
	id, uri, verb, ts, recv, apiVersion, group string
	extra                                      string // more fields, with a leading comma
}

func eventLine(e cornerEvent) string {
	if e.verb == "" {
		e.verb = "list"
	}
	if e.ts == "" {
		e.ts = "2026-01-01T00:00:01.5Z"
	}
	recv := ""
	if e.recv != "-" {
		if e.recv == "" {
			e.recv = "2026-01-01T00:00:01.25Z"
		}
		recv = fmt.Sprintf(`,"requestReceivedTimestamp":%q`, e.recv)
	}
	if e.apiVersion == "" {
		e.apiVersion = "v1"
	}
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"id-%s","stage":"ResponseComplete",`+
		`"requestURI":%q,"verb":%q,"user":{"username":"u","groups":["g1","g2"]},"sourceIPs":["10.0.0.1","10.0.0.2"],"userAgent":"ua/1.0",`+
		`"objectRef":{"resource":"pods","namespace":"ns","name":"p","apiGroup":%q,"apiVersion":%q},"responseStatus":{"metadata":{},"code":200},`+
		`"stageTimestamp":%q%s%s}`, e.id, e.uri, e.verb, e.group, e.apiVersion, e.ts, recv, e.extra)
}

// cornerLines are events whose request URIs and times exercise every
// branch of ParseRequestURI and parseTime that a log can reach.
func cornerLines() []string {
	uris := []string{
		"/api/v1/pods",
		"/api/v1/pods?watch=true&resourceVersion=12&timeoutSeconds=300&allowWatchBookmarks=true",
		"/api/v1/pods?watch", "/api/v1/pods?watch=", "/api/v1/pods?watch=0", "/api/v1/pods?watch=false",
		"/api/v1/pods?watch=FALSE", "/api/v1/pods?watch=1", "/api/v1/pods?watch=no",
		"/api/v1/pods?resourceVersion=5&resourceVersion=6", "/api/v1/pods?resourceVersion=5?x=1",
		"/api/v1/pods?resourceVersionMatch=NotOlderThan&resourceVersion=0",
		"/api/v1/pods?labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&fieldSelector=metadata.name%3Dx",
		"/api/v1/pods?labelSelector=a%ZZb+c", "/api/v1/pods?labelSelector=100%", "/api/v1/pods?fieldSelector=a+b",
		"/api/v1/pods?%77atch=true", "/api/v1/pods?%zzwatch=true&watch=false", "/api/v1/pods?wat+ch=1",
		"/api/v1/pods?limit=500&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ%3D%3D", "/api/v1/pods?limit=-3", "/api/v1/pods?limit=+7",
		"/api/v1/pods?limit=99999999999999999999", "/api/v1/pods?limit=1e3", "/api/v1/pods?limit=%2B8",
		"/api/v1/pods?timeoutSeconds=2147483647", "/api/v1/pods?timeoutSeconds=2147483648", "/api/v1/pods?timeoutSeconds= 5",
		"/api/v1/pods?timeoutSeconds=007", "/api/v1/pods?timeoutSeconds=-1",
		"/api/v1/pods?resourceVersion=9#frag", "/api/v1/pods#frag?resourceVersion=9", "/api/v1/watch/pods#x",
		"/api/v1/watch/pods", "/api/v1/watch/namespaces/ns/pods/p", "/apis/apps/v1/watch/deployments",
		"/api/v1/watch/", "/api/v1/watch//", "/api/v1/watch", "//api/v1/watch/pods", "/apis/apps/watch/x",
		"/apis/apps/v1/namespaces/watch/pods", "/api/watch/pods", "/api/v1/pods?&&watch=true&", "?watch=1", "",
		"/api/v1/pods?resourceVersion=%E2%82%AC", "/api/v1/pods?resourceVersion=a%2", "/api/v1/pods?continue=x=y",
	}
	var lines []string
	for i, u := range uris {
		lines = append(lines, eventLine(cornerEvent{id: fmt.Sprint("u", i), uri: u}))
	}
	for i, e := range []cornerEvent{
		{verb: "watch"},
		{ts: "2026-01-01T00:00:01Z", recv: "-"},
		{ts: "2026-01-01T00:00:01.123456789Z", recv: "2026-01-01T00:00:01.000000999Z"},
		{ts: "2026-01-01T02:00:01.9999999+02:00", recv: "2026-01-01T01:59:59-00:00"},
		{ts: "2026-01-01 00:00:01.5Z"},
		{ts: "2024-02-29T23:59:59.999999Z", recv: "2024-02-29T23:59:59Z"},
		{apiVersion: "apps/v1"},
		{apiVersion: "apps/v1", group: "apps"},
		{apiVersion: ""},
		{extra: `,"annotations":{"authorization.k8s.io/decision":"allow","a":""}`},
		{extra: `,"impersonatedUser":{"username":"bob","groups":["x"]},"responseObject":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"77","labels":{"a":"b"}},"spec":{"x":[1,2,{"y":null}]}}`},
		{extra: `,"responseObject":{"kind":"Status","code":404},"requestObject":{"a":[true,false,null,1.5e3]}`},
		{extra: `,"annotations":{}`},
		{extra: `,"timestamp":"2026-01-01T00:00:09Z"`, recv: "-"},
	} {
		e.id = fmt.Sprint("e", i)
		if e.uri == "" {
			e.uri = "/api/v1/namespaces/ns/pods/p"
		}
		lines = append(lines, eventLine(e))
	}
	return append(lines,
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"r1","stage":"ResponseComplete","requestURI":"/healthz","verb":"get",`+
			`"user":{"username":"v","uid":"1","extra":{"k":["v"]}},"sourceIPs":[],"objectRef":null,"responseStatus":{"code":200},`+
			`"requestReceivedTimestamp":"2026-01-01T00:00:02Z","stageTimestamp":"2026-01-01T00:00:02.1Z"}`,
		`{"stage":"RequestReceived","auditID":"r2","kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"get","requestURI":"/version",`+
			`"stageTimestamp":"2026-01-01T00:00:03Z","user":{"username":"w\u00e9\"x"}}`)
}
