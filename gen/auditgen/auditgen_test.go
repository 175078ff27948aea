package auditgen_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestEventListBodyDecodes(t *testing.T) {
	g := auditgen.New(1, start)
	for range 5 {
		body := g.EventListBody(400)
		if !bytes.HasPrefix(body, []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[{"level":`)) {
			t.Fatalf("body starts %.120s", body)
		}
		b, err := ingest.DecodeBody("gen", body)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rejects) != 0 {
			t.Fatalf("rejects: %+v", b.Rejects[:min(len(b.Rejects), 5)])
		}
		if len(b.Rows) != 400 {
			t.Fatalf("got %d rows, want 400", len(b.Rows))
		}
		// The upstream decoder agrees that items have no kind.
		var list auditv1.EventList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		if list.Items[0].Kind != "" || list.Items[0].APIVersion != "" {
			t.Errorf("item has kind %q apiVersion %q", list.Items[0].Kind, list.Items[0].APIVersion)
		}
	}
}

func TestWriteLogDecodes(t *testing.T) {
	var buf bytes.Buffer
	if err := auditgen.New(2, start).WriteLog(&buf, 2000); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	var b ingest.Batch
	lines := 0
	for sc.Scan() {
		lines++
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":`)) {
			t.Fatalf("line %d starts %.80s", lines, line)
		}
		if err := ingest.DecodeLine("gen", line, &b); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
	}
	if lines != 2000 || len(b.Rows) != 2000 || len(b.Rejects) != 0 {
		t.Fatalf("%d lines, %d rows, rejects %+v", lines, len(b.Rows), b.Rejects)
	}
}

func TestMix(t *testing.T) {
	g := auditgen.New(3, start)
	const n = 20000
	var (
		size, rrSize, mdSize int
		rr, md               int
		stages               = map[auditv1.Stage]int{}
		verbs                = map[string]int{}
		codes                = map[int32]int{}
		watchURIs            int
		prev                 time.Time
	)
	for i := range n {
		ev := g.Next()
		raw, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		size += len(raw)
		switch ev.Level {
		case auditv1.LevelRequestResponse:
			rr++
			rrSize += len(raw)
		case auditv1.LevelMetadata:
			md++
			mdSize += len(raw)
		default:
			t.Fatalf("level %q", ev.Level)
		}
		stages[ev.Stage]++
		verbs[ev.Verb]++
		if ev.ResponseStatus != nil {
			codes[ev.ResponseStatus.Code]++
		}
		if strings.Contains(ev.RequestURI, "&watch=true") {
			watchURIs++
			if ev.Verb != "watch" || !strings.Contains(ev.RequestURI, "resourceVersion=") || !strings.Contains(ev.RequestURI, "timeoutSeconds=") {
				t.Errorf("watch URI %q with verb %q", ev.RequestURI, ev.Verb)
			}
		}
		if ts := ev.StageTimestamp.Time; i > 0 && !ts.After(prev) {
			t.Fatalf("event %d: stageTimestamp %v not after %v", i, ts, prev)
		}
		prev = ev.StageTimestamp.Time
		if ev.RequestReceivedTimestamp.After(ev.StageTimestamp.Time) {
			t.Errorf("event %d received after its stage", i)
		}
	}
	mean := float64(size) / n
	t.Logf("mean %.0f B (Metadata %.0f B, RequestResponse %.0f B, %.1f%% RR); stages %v; verbs %v; codes %v",
		mean, float64(mdSize)/float64(md), float64(rrSize)/float64(rr), 100*float64(rr)/n, stages, verbs, codes)
	if mean < 1000 || mean > 1600 {
		t.Errorf("mean size %.0f B, want 1.0–1.6 KB", mean)
	}
	for stage, want := range map[auditv1.Stage]float64{
		auditv1.StageResponseComplete: 0.8, auditv1.StageResponseStarted: 0.1, auditv1.StageRequestReceived: 0.1,
	} {
		if got := float64(stages[stage]) / n; got < want-0.02 || got > want+0.02 {
			t.Errorf("%s: %.3f of events, want %.2f", stage, got, want)
		}
	}
	for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		if verbs[verb] == 0 {
			t.Errorf("no %s", verb)
		}
	}
	for _, code := range []int32{200, 201, 404, 409} {
		if codes[code] == 0 {
			t.Errorf("no code %d", code)
		}
	}
	if watchURIs == 0 {
		t.Error("no watch URIs")
	}
}

func TestDeterministic(t *testing.T) {
	a := auditgen.New(42, start).EventListBody(100)
	b := auditgen.New(42, start).EventListBody(100)
	c := auditgen.New(43, start).EventListBody(100)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different output")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same output")
	}
}

func TestTimestampsAreMicroTime(t *testing.T) {
	body := auditgen.New(4, start).EventListBody(50)
	var list struct {
		Items []struct {
			StageTimestamp           string `json:"stageTimestamp"`
			RequestReceivedTimestamp string `json:"requestReceivedTimestamp"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		for _, s := range []string{it.StageTimestamp, it.RequestReceivedTimestamp} {
			if len(s) != len("2006-01-02T15:04:05.000000Z") || s[len(s)-1] != 'Z' {
				t.Fatalf("timestamp %q is not a MicroTime", s)
			}
		}
	}
}
