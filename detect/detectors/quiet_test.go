package detectors_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/gen/scenario"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"
	"github.com/auditlens/auditlens/store"
)

// recordingQuerier keeps the statements a detector runs.
type recordingQuerier struct {
	detect.Querier
	mu  sync.Mutex
	sql []string
}

func (r *recordingQuerier) Scan(ctx context.Context, sql string, p store.Params, bind func([]store.Column) ([]any, error), row func() error) error {
	r.mu.Lock()
	r.sql = append(r.sql, sql)
	r.mu.Unlock()
	return r.Querier.Scan(ctx, sql, p, bind, row)
}

// quietWindows stores the healthy recording (real kube-apiserver,
// kube-controller-manager, scheduler and ten hollow nodes) as cluster and
// returns, besides a window in which the cluster sent nothing, the last
// minutes of the recording: traffic with nothing to find.
func quietWindows(tb testing.TB, st store.Store, cluster string) (idle, healthy detect.Window) {
	tb.Helper()
	rows := readRecording(tb, filepath.Join("..", "..", "deploy", "e2e", "fixtures", "busy-healthy-rollout.log.gz"), cluster)
	if err := st.Insert(context.Background(), rows); err != nil {
		tb.Fatal(err)
	}
	end := rows[len(rows)-1].Time.Add(time.Microsecond)
	return detect.Window{Since: end.Add(time.Hour), Until: end.Add(time.Hour + time.Minute), Clusters: []string{cluster}},
		detect.Window{Since: end.Add(-2 * time.Minute), Until: end, Clusters: []string{cluster}}
}

// TestQuietWindowQueries holds relist-herd and watch-loop to one cheap
// statement for a window in which they cannot find anything (no resource
// listed by min_clients clients in a minute, no reflector that may loop):
// none of the statements that group every request by its audit ID, which
// take the engine tens of milliseconds to plan alone, while serve
// evaluates every cluster every interval. On the healthy recording's last
// minutes (ten kubelets reading their new Pods' Secrets and ConfigMaps)
// relist-herd must look further, and finds nothing.
func TestQuietWindowQueries(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	idle, healthy := quietWindows(t, st, "quiet-queries")
	for _, tc := range []struct {
		d     detect.Detector
		w     detect.Window
		name  string
		cheap bool
	}{
		{relist.NewHerd(relist.HerdConfig{}), idle, "idle", true},
		{watchloop.New(watchloop.Config{}), idle, "idle", true},
		{relist.NewHerd(relist.HerdConfig{}), healthy, "healthy", false},
		{watchloop.New(watchloop.Config{}), healthy, "healthy", true},
	} {
		q := &recordingQuerier{Querier: st}
		fs, err := tc.d.Evaluate(context.Background(), q, tc.w)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 0 {
			t.Errorf("%s over the %s window: %d findings, want none", tc.d.Name(), tc.name, len(fs))
		}
		if !tc.cheap {
			continue
		}
		if len(q.sql) != 1 || strings.Contains(q.sql[0], "GROUP BY cluster, audit_id") {
			t.Errorf("%s over the %s window ran %d statements, want one that does not group requests:\n%s",
				tc.d.Name(), tc.name, len(q.sql), strings.Join(q.sql, "\n---\n"))
		}
	}
}

// BenchmarkQuietWindow is the cost of one evaluation of a window with
// nothing to find, by detector, the way serve evaluates a cluster every
// interval: a minute the cluster sent nothing in (idle) and the last two
// minutes of the healthy recording (healthy).
//
//	go test ./detect/detectors -run '^$' -bench QuietWindow -benchtime 20x -count 3
func BenchmarkQuietWindow(b *testing.B) {
	st := detecttest.Engine(b)
	idle, healthy := quietWindows(b, st, "quiet-bench")
	for _, tc := range []struct {
		name string
		w    detect.Window
	}{{"idle", idle}, {"healthy", healthy}} {
		for _, d := range detectors.Default() {
			b.Run(tc.name+"/"+d.Name(), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.Evaluate(context.Background(), st, tc.w); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// countingState counts the SaveState calls that reach the store.
type countingState struct {
	detect.StateStore
	mu    sync.Mutex
	saves int
	recs  map[string]int // records saved, by detector
}

func (c *countingState) SaveState(ctx context.Context, recs []detect.StateRecord) error {
	c.mu.Lock()
	c.saves++
	for _, r := range recs {
		c.recs[r.Detector]++
	}
	c.mu.Unlock()
	return c.StateStore.SaveState(ctx, recs)
}

// TestRunnerSavesStateOnce holds an evaluation of every detector to one
// INSERT of their state, however many of them remember something (each
// INSERT writes a part, some 8 ms of the engine's time), and what each
// saved to what it loads in the next evaluation: a watch loop, which
// watch-loop remembers, in a cluster whose heads rv-rollback remembers.
func TestRunnerSavesStateOnce(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	ctx := context.Background()
	sc, ok := scenario.ByName("incident-drifting")
	if !ok {
		t.Fatal("no scenario incident-drifting")
	}
	const cluster = "state-once"
	w := detecttest.Span(detecttest.ImportTrace(t, st, sc.Generate(scenario.Compressed, scenario.Start, 1), cluster), cluster)
	repo := detect.NewRepository(st, nil)
	state := &countingState{StateStore: repo, recs: map[string]int{}}
	r, err := detect.NewRunner(st, repo, detect.RunnerConfig{Window: time.Hour, Interval: time.Minute,
		Clusters: w.Clusters, State: state, Detectors: detectors.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(ctx, w); err != nil {
		t.Fatal(err)
	}
	if state.saves != 1 || len(state.recs) < 2 {
		t.Fatalf("%d inserts of state, records by detector %v; want one insert of several detectors' records", state.saves, state.recs)
	}
	for name, n := range state.recs {
		got, err := repo.LoadState(ctx, name, w.Clusters, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Errorf("%s: %d records saved, %d loaded", name, n, len(got))
		}
	}
}
