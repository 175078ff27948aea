package ingest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
)

// TestGKEDetectors holds the detector table of envDecoder.gke (and the
// README's) to the detectors themselves: scenarios' logs are imported as
// they are and as GKE entries of the same requests, and each detector's
// findings from GKE must be none where the table says blinded, the plain
// log's where it says ok, and never more than the plain log's (no false
// alarm from what the translation loses).
func TestGKEDetectors(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	w := NewWriter(st, WriterConfig{})
	table := map[string]string{
		watchloop.Name:           "blinded",
		watchloop.RegressionName: "blinded",
		"heartbeat-loss":         "ok",
		"rv-rollback":            "weakened",
		"relist-loop":            "blinded",
		"relist-herd":            "weakened",
	}
	start := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	seen := map[string]int{}
	for _, name := range []string{"seed-incident", "heartbeat-loss-seed", "relist-loop", "relist-herd-kubelets", "etcd-restore"} {
		sc, ok := scenario.ByName(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		var log bytes.Buffer
		if err := sc.Generate(scenario.Compressed, start, 1).WriteLog(&log); err != nil {
			t.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n"))
		findings := map[string]map[string]int{}
		for _, c := range []struct {
			cluster string
			lines   [][]byte
		}{
			{"plain-" + name, lines},
			{"gke-" + name, bytes.Split(bytes.TrimSpace(gkeEntries(t, lines)), []byte("\n"))},
		} {
			var b Batch
			src := LineSource{Cluster: c.cluster, Fixed: true}
			for _, line := range c.lines {
				if _, err := DecodeImportLine(src, line, &b); err != nil {
					t.Fatal(err)
				}
			}
			if len(b.Rejects) != 0 {
				t.Fatalf("%s: rejects %+v", c.cluster, b.Rejects[0])
			}
			if _, err := w.Write(ctx, b.Rows); err != nil {
				t.Fatal(err)
			}
			first, last := b.Rows[0].Time, b.Rows[0].Time
			for _, r := range b.Rows {
				if r.Time.Before(first) {
					first = r.Time
				}
				if r.Time.After(last) {
					last = r.Time
				}
			}
			repo := detect.NewRepository(st, nil)
			r, err := detect.NewRunner(st, repo, detect.RunnerConfig{Detectors: detectors.Default(), State: repo})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.RunOnce(ctx, detect.Window{Since: first, Until: last.Add(time.Microsecond), Clusters: []string{c.cluster}})
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]int{}
			for _, f := range res.Findings {
				n[f.Detector]++
			}
			findings[c.cluster[:4]] = n
		}
		plain, gke := findings["plai"], findings["gke-"]
		t.Logf("%s: plain %v, gke %v", name, plain, gke)
		for d, n := range gke {
			if _, ok := table[d]; !ok {
				t.Errorf("%s: detector %s is not in the table", name, d)
			}
			if n > plain[d] {
				t.Errorf("%s: %d %s findings from GKE, %d from the plain log: a false alarm", name, n, d, plain[d])
			}
		}
		for d, n := range plain {
			seen[d] += n
			switch table[d] {
			case "blinded":
				if gke[d] != 0 {
					t.Errorf("%s: %s is blinded by GKE but found %d", name, d, gke[d])
				}
			case "ok":
				if gke[d] != n {
					t.Errorf("%s: %s should see from GKE what it sees in the plain log: %d, want %d", name, d, gke[d], n)
				}
			}
		}
	}
	for d := range table {
		if seen[d] == 0 {
			t.Errorf("no scenario gave a %s finding to compare: %v", d, fmt.Sprint(seen))
		}
	}
}
