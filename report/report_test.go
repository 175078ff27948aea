package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/report"
	"github.com/auditlens/auditlens/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// hostile is a string a client chose: it must reach every rendering
// escaped, never as markup.
const hostile = "mallory<script>alert(1)</script>|*_`[x](http://evil.example/)"

// now is the fake clock: the report window is [2026-03-01 12:00, 2026-03-02 12:00).
var now = time.Date(2026, 3, 2, 12, 0, 30, 0, time.UTC)

// events returns a small day of traffic: cluster prod sends every 5
// minutes all day; cluster staging goes silent from 18:00 to 20:30 and
// stops at 06:00; cluster retired sent its last event before the window; a
// hostile user is refused repeatedly.
func events() []store.Row {
	start := now.Truncate(time.Minute).Add(-24 * time.Hour)
	var rows []store.Row
	n := 0
	add := func(cluster string, at time.Time, verb, user, ua string, code int32) {
		n++
		for _, stage := range []string{"RequestReceived", "ResponseComplete"} {
			rows = append(rows, store.Row{Cluster: cluster, AuditID: fmt.Sprintf("00000000-0000-0000-0000-%012d", n),
				Stage: stage, Level: "Metadata", Verb: verb, RequestURI: "/api/v1/services", Time: at, ReceivedAt: at,
				User: user, UserAgent: ua, SourceIP: "10.0.0.1", Resource: "services", APIVersion: "v1", Code: code,
				Raw: []byte(`{}`)})
		}
	}
	for m := 0; m < 24*60; m += 5 {
		at := start.Add(time.Duration(m)*time.Minute + 7*time.Second)
		add("prod", at, "list", "system:kube-controller-manager", "kube-controller-manager/v1.37.2", 200)
		if m%15 == 0 {
			add("prod", at.Add(time.Second), "watch", "system:kube-proxy", "kube-proxy/v1.37.2", 200)
		}
		if m%60 == 0 {
			add("prod", at.Add(2*time.Second), "get", hostile, hostile, 403)
		}
		sm := start.Add(time.Duration(m) * time.Minute)
		silent := !sm.Before(start.Add(6*time.Hour)) && sm.Before(start.Add(8*time.Hour+30*time.Minute))
		if !silent && sm.Before(start.Add(18*time.Hour)) {
			add("staging", at, "update", "admin", "kubectl/v1.37.2", 409)
		}
	}
	// Outside the window: must not count.
	add("prod", start.Add(-time.Minute), "delete", "early", "early", 500)
	// Cluster retired stopped 30 hours before the window: silent for all
	// of it, its feed must say so.
	add("retired", start.Add(-30*time.Hour), "list", "old", "old", 200)
	add("prod", start.Add(24*time.Hour), "delete", "late", "late", 500)
	return rows
}

func finding(id, det string, sev detect.Severity, first, last time.Time) detect.Finding {
	return detect.Finding{ID: id, Detector: det, Cluster: "prod", Severity: sev, Confidence: 0.9,
		Title: "title of " + id, Summary: "summary of " + id, FirstSeen: first, LastSeen: last,
		Subjects:    detect.Subjects{User: "system:kube-controller-manager", Resource: "services", ResourceVersion: "42"},
		Objects:     []detect.Object{{Resource: "endpoints", Namespace: "web", Name: "frontend"}},
		Evidence:    []detect.Evidence{{AuditID: "a1", Stage: "ResponseComplete", Time: last, Verb: "watch", Resource: "services"}},
		Remediation: "remediation of " + id}
}

// fixture fills a store with events, findings and a previous report.
func fixture(t *testing.T) (store.Store, *detect.Repository) {
	t.Helper()
	st := storetest.Open(t)
	ctx := context.Background()
	if _, err := ingest.NewWriter(st, ingest.WriterConfig{}).Write(ctx, events()); err != nil {
		t.Fatal(err)
	}
	repo := detect.NewRepository(st, func() time.Time { return now })
	day := 24 * time.Hour
	// ongoing: in the previous window and this one; resolved: only the
	// previous one; new: only this one; hostile text in the new one.
	ongoing := finding("watch-loop-ongoing", "watch-loop", detect.Critical, now.Add(-30*time.Hour), now.Add(-2*time.Hour))
	resolved := finding("watch-rv-regression-resolved", "watch-rv-regression", detect.Warning, now.Add(-40*time.Hour), now.Add(-26*time.Hour))
	fresh := finding("watch-rv-regression-new", "watch-rv-regression", detect.Warning, now.Add(-5*time.Hour), now.Add(-4*time.Hour))
	fresh.Title, fresh.Summary = "client "+hostile+" went back", "the client "+hostile+"\nrestarted"
	fresh.Objects = append(fresh.Objects, detect.Object{Resource: "services", Namespace: "web", Name: hostile})
	if err := repo.Upsert(ctx, []detect.Finding{ongoing, resolved, fresh}); err != nil {
		t.Fatal(err)
	}
	// The previous report, a day earlier (it sees ongoing and resolved).
	prev, err := report.Build(ctx, st, repo, report.Config{Name: "daily", Now: func() time.Time { return now.Add(-day) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := report.Save(ctx, st, prev); err != nil {
		t.Fatal(err)
	}
	return st, repo
}

func TestReport(t *testing.T) {
	st, repo := fixture(t)
	ctx := context.Background()
	r, err := report.Build(ctx, st, repo, report.Config{Name: "daily", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("content", func(t *testing.T) {
		ids := func(cs []report.Change) (out []string) {
			for _, c := range cs {
				out = append(out, c.ID)
			}
			return out
		}
		if got := fmt.Sprint(ids(r.Changes.New), ids(r.Changes.Ongoing), ids(r.Changes.Resolved)); got != "[watch-rv-regression-new] [watch-loop-ongoing] [watch-rv-regression-resolved]" {
			t.Errorf("changes new/ongoing/resolved = %s", got)
		}
		if r.Changes.Previous != report.ID("daily", now.Truncate(time.Minute).Add(-24*time.Hour)) {
			t.Errorf("previous = %q", r.Changes.Previous)
		}
		if len(r.Findings) != 2 || r.Findings[0].Detector != "watch-loop" || r.Findings[0].Severity != detect.Critical {
			t.Errorf("groups = %+v", r.Findings)
		}
		if len(r.TopUsersByErrors) != 2 || r.TopUsersByErrors[0].Name != "admin" || r.TopUsersByErrors[1].Name != hostile || r.TopUsersByErrors[1].Errors != 24 {
			t.Errorf("top users by errors = %+v", r.TopUsersByErrors)
		}
		if len(r.TopUsersByRequests) != 4 || r.TopUsersByRequests[0].Requests != 288 {
			t.Errorf("top users by requests = %+v", r.TopUsersByRequests)
		}
		if len(r.Feed) != 3 || r.Feed[1].Cluster != "retired" || r.Feed[2].Cluster != "staging" {
			t.Fatalf("feed = %+v", r.Feed)
		}
		start := now.Truncate(time.Minute).Add(-24 * time.Hour)
		retired := r.Feed[1]
		if retired.Events != 0 || retired.LastEvent == nil || !retired.LastEvent.Equal(start.Add(-30*time.Hour)) ||
			fmt.Sprint(retired.Gaps) != fmt.Sprint([]report.Gap{{Start: start, End: start.Add(24 * time.Hour)}}) {
			t.Errorf("retired feed: %d events, last %v, gaps %v; want silent all window", retired.Events, retired.LastEvent, retired.Gaps)
		}
		if r.Feed[0].LastEvent != nil || r.Feed[2].LastEvent != nil {
			t.Errorf("clusters that sent events in the window have a last_event")
		}
		// The last event before the silence is at 17:55:07, the first after at 20:30:07.
		want := []report.Gap{{Start: start.Add(5*time.Hour + 56*time.Minute), End: start.Add(8*time.Hour + 30*time.Minute)},
			{Start: start.Add(17*time.Hour + 56*time.Minute), End: start.Add(24 * time.Hour)}}
		if fmt.Sprint(r.Feed[2].Gaps) != fmt.Sprint(want) {
			t.Errorf("staging gaps = %v, want %v", r.Feed[2].Gaps, want)
		}
		if len(r.Feed[0].Gaps) != 0 || r.Feed[0].Events != 2*(288+96+24) || len(r.Feed[0].Hours) != 24 {
			t.Errorf("prod feed: %d events, %d hours, gaps %v", r.Feed[0].Events, len(r.Feed[0].Hours), r.Feed[0].Gaps)
		}
	})

	for _, format := range []string{"md", "json"} {
		t.Run("golden "+format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := report.Render(&buf, format, r); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "daily"+report.Ext(format)+".golden"), buf.Bytes())
		})
	}

	t.Run("json round trip", func(t *testing.T) {
		var buf bytes.Buffer
		if err := report.Render(&buf, "json", r); err != nil {
			t.Fatal(err)
		}
		var back report.Report
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if back.VolumeStep != report.Duration(time.Hour) || back.ID != r.ID || len(back.Volume) != len(r.Volume) {
			t.Errorf("decoded %+v", back)
		}
	})

	t.Run("html", func(t *testing.T) {
		var buf bytes.Buffer
		if err := report.Render(&buf, "html", r); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if strings.Contains(out, "<script") || strings.Contains(out, "http://evil") && !strings.Contains(out, "mallory&lt;script&gt;") {
			t.Error("a hostile string reached the HTML unescaped")
		}
		if !strings.Contains(out, "mallory&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Error("the hostile user is missing from the HTML")
		}
		for _, external := range []string{" src=", " href=", "url(", "@import"} {
			if strings.Contains(out, external) {
				t.Errorf("the HTML loads something external: %q", external)
			}
		}
		if n := strings.Count(out, "<svg"); n < 1+2+4 { // the chart, a timeline per finding, legend swatches
			t.Errorf("%d inline SVGs", n)
		}
		if !strings.Contains(out, "<rect x=") {
			t.Error("the volume chart has no bars")
		}
	})

	t.Run("stored", func(t *testing.T) {
		if err := report.Save(ctx, st, r); err != nil {
			t.Fatal(err)
		}
		// Saving again replaces, it does not add.
		if err := report.Save(ctx, st, r); err != nil {
			t.Fatal(err)
		}
		list, err := report.List(ctx, st, report.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].ID != r.ID || !list[0].WindowEnd.Equal(r.WindowEnd) || list[1].ID != r.Changes.Previous {
			t.Fatalf("list = %+v", list)
		}
		if l, err := report.List(ctx, st, report.ListFilter{Name: "weekly"}); err != nil || len(l) != 0 {
			t.Errorf("list of another name = %v, %v", l, err)
		}
		got, err := report.Get(ctx, st, r.ID)
		if err != nil || got.ID != r.ID || len(got.Changes.New) != 1 {
			t.Errorf("get = %+v, %v", got.Changes, err)
		}
		if _, err := report.Get(ctx, st, "nope"); !errors.Is(err, report.ErrNotFound) {
			t.Errorf("get of an unknown id: %v", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg report.Config
		ok  bool
	}{
		{report.Config{}, true},
		{report.Config{Window: 7 * 24 * time.Hour, MinSeverity: detect.Warning}, true},
		{report.Config{Window: time.Minute}, false},
		{report.Config{MinSeverity: "fatal"}, false},
		{report.Config{GapAfter: time.Second}, false},
		{report.Config{TopN: -1}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; got:\n%s", path, got)
	}
}

// TestListWithin: a reader scoped to some clusters sees the reports that
// cover named clusters all among them, never a report of every cluster;
// by the newest version, for names a client chose, and for reports stored
// before the clusters column (migration 0011), read from their body.
func TestListWithin(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	save := func(id string, clusters ...string) {
		t.Helper()
		r := report.Report{ID: id, Name: id, WindowStart: t0, WindowEnd: t0.Add(time.Hour), GeneratedAt: t0.Add(time.Hour), Clusters: clusters}
		if err := report.Save(ctx, st, r); err != nil {
			t.Fatal(err)
		}
	}
	save("all")
	save("a", "a")
	save("ab", "a", "b")
	save("hostile", hostile)
	save("moved", "a")
	save("moved", "c") // the newest version counts
	// Stored before the column: the clusters only in the body.
	body, err := json.Marshal(report.Report{ID: "old", Name: "old", Clusters: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Exec(ctx, `INSERT INTO reports (id, name, window_start, window_end, created_at, body)
VALUES ('old', 'old', {t:DateTime64(6, 'UTC')}, {t:DateTime64(6, 'UTC')}, {t:DateTime64(6, 'UTC')}, {body:String})`,
		store.Params{"t": store.TimeParam(t0), "body": store.StringParam(string(body))}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		within []string
		want   string
	}{
		{nil, "a ab all hostile moved old"},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a ab old"},
		{[]string{"b"}, "old"},
		{[]string{"c"}, "moved"},
		{[]string{hostile}, "hostile"},
		{[]string{}, ""},
	} {
		list, err := report.List(ctx, st, report.ListFilter{Within: tc.within})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range list {
			ids = append(ids, s.ID)
		}
		slices.Sort(ids)
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("within %q: %q, want %q", tc.within, got, tc.want)
		}
	}
}
