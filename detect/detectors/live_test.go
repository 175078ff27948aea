package detectors_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"
	"github.com/auditlens/auditlens/store"
)

// TestLiveReplay evaluates every detector over a real healthy recording
// as serve does while the events arrive: every 5 s over the last hour, each
// event stored once its time has passed, with the evaluations falling
// between the recording's whole seconds. A window that ends in the middle
// of a burst sees less than the whole log shows, and a finding made then
// stays: the recording must stay silent at every step, not only at the
// end.
//
// busy-healthy-rollout is the run in which it did not: ending at a
// rollout's midpoint, relist-herd took the 10 kubelets' reads of their new
// Pods' Secrets and ConfigMaps, several just after the Node authorizer
// refused them, for two herds.
func TestLiveReplay(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	const cluster = "live-replay"
	rows := readRecording(t, filepath.Join("..", "..", "deploy", "e2e", "fixtures", "busy-healthy-rollout.log.gz"), cluster)
	repo := detect.NewRepository(st, nil)
	const step = 5 * time.Second
	r, err := detect.NewRunner(st, repo, detect.RunnerConfig{Window: time.Hour, Interval: step,
		Clusters: []string{cluster}, State: repo, Detectors: detectors.Default()})
	if err != nil {
		t.Fatal(err)
	}
	stored, evaluations := 0, 0
	for now := rows[0].Time.Truncate(step).Add(step / 2); !now.After(rows[len(rows)-1].Time.Add(30 * time.Second)); now = now.Add(step) {
		n := stored
		for n < len(rows) && !rows[n].Time.After(now) {
			n++
		}
		if n > stored {
			if err := st.Insert(ctx, rows[stored:n]); err != nil {
				t.Fatal(err)
			}
			stored = n
		}
		res, err := r.RunOnce(ctx, detect.Window{Since: now.Add(-time.Hour), Until: now, Clusters: []string{cluster}})
		if err != nil {
			t.Fatal(err)
		}
		evaluations++
		for _, f := range res.Findings {
			t.Errorf("at %s: %s %s: %s", now.Format("15:04:05.000"), f.Detector, f.Severity, f.Title)
		}
	}
	if stored != len(rows) || evaluations < 40 {
		t.Fatalf("%d evaluations stored %d of the recording's %d events", evaluations, stored, len(rows))
	}
}

// readRecording decodes a gzipped audit log into rows of cluster, by
// time.
func readRecording(t testing.TB, path, cluster string) []store.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var b ingest.Batch
	for sc.Scan() {
		if err := ingest.DecodeLine(cluster, slices.Clone(sc.Bytes()), &b); err != nil {
			t.Fatal(err)
		}
	}
	if err := sc.Err(); err != nil || len(b.Rows) == 0 || len(b.Rejects) > 0 {
		t.Fatalf("reading %s: %v, %d events, rejects %v", path, err, len(b.Rows), b.Rejects)
	}
	slices.SortStableFunc(b.Rows, func(x, y store.Row) int { return x.Time.Compare(y.Time) })
	return b.Rows
}
