package scenario_test

import (
	"bufio"
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/ingest"
)

// TestTraces checks every trace at both scales: it is the same for the
// same seed, decodes line by line as an audit log, is in time order, and
// has the shape kube-apiserver gives requests (stages of one request share
// an audit ID; a watch has three; write revisions grow with time).
func TestTraces(t *testing.T) {
	for _, sc := range scenario.All() {
		if sc.Doc == "" {
			t.Errorf("%s has no Doc", sc.Name)
		}
		for _, scale := range scenario.Scales {
			t.Run(sc.Name+"/"+scale.Name, func(t *testing.T) {
				tr := sc.Generate(scale, scenario.Start, 1)
				var a, b bytes.Buffer
				if err := tr.WriteLog(&a); err != nil {
					t.Fatal(err)
				}
				if err := sc.Generate(scale, scenario.Start, 1).WriteLog(&b); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					t.Fatal("the same seed gave different logs")
				}
				if len(tr.Events) < 300 {
					t.Errorf("only %d events", len(tr.Events))
				}

				sc := bufio.NewScanner(&a)
				sc.Buffer(nil, 1<<20)
				var batch ingest.Batch
				prefix := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":`
				if tr.Format != scenario.V1 {
					prefix = `{"kind":"Event","apiVersion":"` + string(tr.Format) + `","metadata":{"creationTimestamp":`
				}
				for sc.Scan() {
					if !bytes.HasPrefix(sc.Bytes(), []byte(prefix)) {
						t.Fatalf("line starts %.80s", sc.Bytes())
					}
					if err := ingest.DecodeLine("test", sc.Bytes(), &batch); err != nil {
						t.Fatal(err)
					}
				}
				if len(batch.Rows) != len(tr.Events) || len(batch.Rejects) != 0 {
					t.Fatalf("%d rows from %d events, rejects %v", len(batch.Rows), len(tr.Events), batch.Rejects)
				}

				stages := map[string][]string{}
				var lastRev uint64
				for i, r := range batch.Rows {
					// Old formats stamp every stage with the request's
					// arrival, in whole seconds.
					if tr.Format == scenario.V1 && i > 0 && r.Time.Before(batch.Rows[i-1].Time) {
						t.Fatalf("event %d at %s before the one before", i, r.Time)
					}
					if r.Time.Before(tr.Start.Truncate(time.Second)) || r.Time.After(tr.End) {
						t.Fatalf("event %d at %s outside the trace [%s, %s]", i, r.Time, tr.Start, tr.End)
					}
					stages[r.AuditID] = append(stages[r.AuditID], r.Stage)
					// An etcd restore without bump hands revisions out again.
					if r.ResponseRV != "" && r.Stage == "ResponseComplete" && r.Verb != "list" && r.Verb != "get" && len(tr.Want.Restores) == 0 {
						rev, err := strconv.ParseUint(r.ResponseRV, 10, 64)
						if err != nil || rev <= lastRev {
							t.Fatalf("write at %s produced revision %s after %d", r.Time, r.ResponseRV, lastRev)
						}
						lastRev = rev
					}
				}
				for id, ss := range stages {
					if ss[0] != "RequestReceived" || len(ss) > 3 {
						t.Fatalf("request %s has stages %v", id, ss)
					}
				}
				for _, r := range batch.Rows {
					if r.Watch && r.Stage == "ResponseComplete" && len(stages[r.AuditID]) != 3 {
						t.Fatalf("watch %s has stages %v", r.AuditID, stages[r.AuditID])
					}
				}
			})
		}
	}
}

// TestTruth checks the ground truth of the incident against the story
// the scenario tells.
func TestTruth(t *testing.T) {
	for _, name := range []string{"seed-incident", "incident-with-user-recreate"} {
		for _, scale := range scenario.Scales {
			sc, _ := scenario.ByName(name)
			tr := sc.Generate(scale, scenario.Start, 1)
			if len(tr.Want.Loops) != 1 {
				t.Fatalf("%s: %d loops", tr, len(tr.Want.Loops))
			}
			l := tr.Want.Loops[0]
			if l.Client.User != "system:kube-controller-manager" || l.ResourceVersion != "1200" || l.Iterations < 4 ||
				len(l.Objects) != 3 || len(l.ChurnAfter) < 2*3*(l.Iterations-1)+3 || len(l.ChurnAfter) > 2*3*l.Iterations {
				t.Errorf("%s: loop %+v", tr, l)
			}
			// Every Services watcher that saw legacy-api's DELETE went back.
			for _, r := range tr.Want.Regressions {
				if r.ResourceVersion != "1200" || r.Resource != "services" {
					t.Errorf("%s: regression %+v", tr, r)
				}
			}
		}
	}
	if _, ok := scenario.ByName("nope"); ok {
		t.Error("ByName found an unknown scenario")
	}
	if _, ok := scenario.ScaleByName("real"); !ok {
		t.Error("no real scale")
	}
}
