package detect

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func TestFindingID(t *testing.T) {
	base := FindingID("watch-loop", "prod", "system:kube-controller-manager", "services", "1200")
	if !strings.HasPrefix(base, "watch-loop-") || len(base) != len("watch-loop-")+20 {
		t.Fatalf("id %q: want watch-loop- and 20 hex digits", base)
	}
	if again := FindingID("watch-loop", "prod", "system:kube-controller-manager", "services", "1200"); again != base {
		t.Errorf("same parts gave %q then %q", base, again)
	}
	for _, tc := range []struct {
		name     string
		detector string
		cluster  string
		parts    []string
	}{
		{"other cluster", "watch-loop", "staging", []string{"system:kube-controller-manager", "services", "1200"}},
		{"other resourceVersion", "watch-loop", "prod", []string{"system:kube-controller-manager", "services", "1201"}},
		{"other detector", "watch-rv-regression", "prod", []string{"system:kube-controller-manager", "services", "1200"}},
		{"parts shifted", "watch-loop", "prod", []string{"system:kube-controller-manager", "services1", "200"}},
		{"part moved into the cluster", "watch-loop", "prodsystem:kube-controller-manager", []string{"services", "1200"}},
	} {
		if id := FindingID(tc.detector, tc.cluster, tc.parts...); id == base {
			t.Errorf("%s: same id %q", tc.name, id)
		}
	}
}

func ev(id, role string, at time.Duration) Evidence {
	return Evidence{AuditID: id, Stage: "ResponseComplete", Time: t0.Add(at), Role: role}
}

func TestMerge(t *testing.T) {
	prev := Finding{
		ID: "x", Severity: Warning, Confidence: 0.8, Title: "old", FirstSeen: t0.Add(10 * time.Second), LastSeen: t0.Add(50 * time.Second),
		Objects:  []Object{{"endpoints", "web", "frontend"}, {"endpoints", "default", "api"}},
		Evidence: []Evidence{ev("a", "static-watch", 10*time.Second), ev("b", "endpoints-delete", 11*time.Second)},
	}
	next := Finding{
		ID: "x", Severity: Critical, Confidence: 0.7, Title: "new", FirstSeen: t0.Add(30 * time.Second), LastSeen: t0.Add(90 * time.Second),
		Objects:  []Object{{"endpoints", "web", "frontend"}, {"endpoints", "payments", "billing"}},
		Evidence: []Evidence{ev("b", "endpoints-delete", 11*time.Second), ev("c", "static-watch", 60*time.Second)},
	}
	got := Merge(prev, next, 0)
	if !got.FirstSeen.Equal(prev.FirstSeen) || !got.LastSeen.Equal(next.LastSeen) {
		t.Errorf("seen %s to %s, want %s to %s", got.FirstSeen, got.LastSeen, prev.FirstSeen, next.LastSeen)
	}
	if got.Severity != Critical || got.Confidence != 0.8 || got.Title != "new" {
		t.Errorf("severity %s confidence %v title %q: want the higher severity and confidence, next's title", got.Severity, got.Confidence, got.Title)
	}
	wantObjs := []Object{{"endpoints", "default", "api"}, {"endpoints", "payments", "billing"}, {"endpoints", "web", "frontend"}}
	if !slices.Equal(got.Objects, wantObjs) {
		t.Errorf("objects %v, want %v", got.Objects, wantObjs)
	}
	var ids []string
	for _, e := range got.Evidence {
		ids = append(ids, e.AuditID)
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("evidence %v, want a, b, c once each, by time", ids)
	}
	// Merging is symmetric in what it keeps, and merging again changes nothing.
	if again := Merge(got, next, 0); !sameFinding(again, got) {
		t.Errorf("merging the same finding again changed it:\n%+v\n%+v", again, got)
	}
}

func TestMergeThinsEvidenceFromTheMiddle(t *testing.T) {
	var a, b Finding
	for i := range 10 {
		a.Evidence = append(a.Evidence, ev(string(rune('a'+i)), "static-watch", time.Duration(i)*time.Second))
		b.Evidence = append(b.Evidence, ev(string(rune('k'+i)), "static-watch", time.Duration(10+i)*time.Second))
	}
	got := Merge(a, b, 6)
	var ids string
	for _, e := range got.Evidence {
		ids += e.AuditID
	}
	if ids != "abcrst" {
		t.Errorf("kept %q, want the first three and the last three (abcrst)", ids)
	}
}

func TestCompareRV(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		c    int
		ok   bool
	}{
		{"1200", "4815000", -1, true},
		{"99", "100", -1, true}, // as integers, not as strings
		{"100", "100", 0, true},
		{"18446744073709551615", "1", 1, true},
		{"abc", "100", 0, false},
		{"", "100", 0, false},
		{"-1", "1", 0, false},
	} {
		c, ok := CompareRV(tc.a, tc.b)
		if c != tc.c || ok != tc.ok {
			t.Errorf("compareRV(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, c, ok, tc.c, tc.ok)
		}
	}
}

func TestSeverity(t *testing.T) {
	if !Critical.AtLeast(Warning) || !Warning.AtLeast(Warning) || Info.AtLeast(Warning) || Severity("bogus").AtLeast(Info) {
		t.Error("severity order is wrong")
	}
	for in, want := range map[string]Severity{"critical": Critical, " Warning ": Warning, "INFO": Info} {
		if got, err := ParseSeverity(in); err != nil || got != want {
			t.Errorf("ParseSeverity(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseSeverity("fatal"); err == nil {
		t.Error("ParseSeverity accepted fatal")
	}
}

// TestFindingJSONFields holds the finding document to the fields the API
// promises, empty lists included.
func TestFindingJSONFields(t *testing.T) {
	f := Finding{ID: "x", Detector: "watch-loop", Severity: Critical}
	f.Normalize()
	b, err := json.Marshal(&f)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"cluster", "confidence", "detector", "evidence", "first_seen", "id", "last_seen", "objects", "remediation", "severity", "subjects", "summary", "title"}
	if !slices.Equal(keys, want) {
		t.Errorf("fields %v, want %v", keys, want)
	}
	if string(m["objects"]) != "[]" || string(m["evidence"]) != "[]" {
		t.Errorf("objects %s, evidence %s: want empty arrays", m["objects"], m["evidence"])
	}
	var subj map[string]any
	if err := json.Unmarshal(m["subjects"], &subj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"user", "user_agent", "resource", "api_group", "resource_version"} {
		if _, ok := subj[k]; !ok {
			t.Errorf("subjects lack %q: %s", k, m["subjects"])
		}
	}
}
