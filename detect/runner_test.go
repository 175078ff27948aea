package detect

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// memStore is a FindingStore in memory.
type memStore struct {
	mu      sync.Mutex
	byID    map[string]Finding
	upserts int
}

func newMemStore() *memStore { return &memStore{byID: map[string]Finding{}} }

func (m *memStore) GetMany(_ context.Context, ids []string) (map[string]Finding, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Finding{}
	for _, id := range ids {
		if f, ok := m.byID[id]; ok {
			out[id] = f
		}
	}
	return out, nil
}

func (m *memStore) Upsert(_ context.Context, fs []Finding) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range fs {
		m.byID[f.ID] = f
		m.upserts++
	}
	return nil
}

// fakeDetector records the windows it is asked about and answers with fn.
type fakeDetector struct {
	name    string
	mu      sync.Mutex
	windows []Window
	fn      func(n int, w Window) ([]Finding, error)
}

func (d *fakeDetector) Name() string { return d.name }

func (d *fakeDetector) Evaluate(_ context.Context, _ Querier, w Window) ([]Finding, error) {
	d.mu.Lock()
	d.windows = append(d.windows, w)
	n := len(d.windows)
	d.mu.Unlock()
	return d.fn(n, w)
}

func (d *fakeDetector) seen() []Window {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Window(nil), d.windows...)
}

// TestRunnerRun drives Run on a fake clock: an evaluation at once, then
// one per interval, each over the window that ends then; an incident seen
// in every window stays one finding whose span and objects grow.
func TestRunnerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore()
		det := &fakeDetector{name: "fake", fn: func(n int, w Window) ([]Finding, error) {
			return []Finding{{ID: "f1", Detector: "fake", Severity: Warning, FirstSeen: w.Since.Add(time.Second),
				LastSeen: w.Until.Add(-time.Second), Objects: []Object{{"endpoints", "ns", "obj" + strconv.Itoa(n)}}}}, nil
		}}
		r, err := NewRunner(nil, st, RunnerConfig{Detectors: []Detector{det}, Interval: time.Minute, Window: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.Run(ctx) }()
		synctest.Wait()
		if got := det.seen(); len(got) != 1 || !got[0].Since.Equal(start.Add(-10*time.Minute)) || !got[0].Until.Equal(start) {
			t.Fatalf("first evaluation: windows %v, want one [start-10m, start)", got)
		}
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		if n := len(det.seen()); n != 1 {
			t.Fatalf("%d evaluations before the interval passed, want 1", n)
		}
		time.Sleep(3*time.Minute + time.Nanosecond)
		synctest.Wait()
		windows := det.seen()
		if len(windows) != 5 {
			t.Fatalf("%d evaluations after 4 intervals, want 5", len(windows))
		}
		for i, w := range windows {
			if want := start.Add(time.Duration(i) * time.Minute); !w.Until.Equal(want) || w.Until.Sub(w.Since) != 10*time.Minute {
				t.Errorf("window %d is %s, want 10 minutes ending at %s", i, w, want.Format(time.RFC3339))
			}
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		f := st.byID["f1"]
		if len(st.byID) != 1 || st.upserts != 5 {
			t.Fatalf("%d findings, %d upserts; want one finding updated in each of 5 evaluations", len(st.byID), st.upserts)
		}
		if !f.FirstSeen.Equal(start.Add(-10*time.Minute+time.Second)) || !f.LastSeen.Equal(start.Add(4*time.Minute-time.Second)) || len(f.Objects) != 5 {
			t.Errorf("merged finding seen %s to %s with %d objects; want the span of every window and 5 objects", f.FirstSeen, f.LastSeen, len(f.Objects))
		}
	})
}

// TestRunnerSkipsUnchanged: a finding found again unchanged is not stored
// again.
func TestRunnerSkipsUnchanged(t *testing.T) {
	st := newMemStore()
	same := Finding{ID: "f", Detector: "fake", Severity: Info, FirstSeen: t0, LastSeen: t0.Add(time.Minute)}
	det := &fakeDetector{name: "fake", fn: func(int, Window) ([]Finding, error) { return []Finding{same}, nil }}
	r, err := NewRunner(nil, st, RunnerConfig{Detectors: []Detector{det}})
	if err != nil {
		t.Fatal(err)
	}
	w := Window{Since: t0, Until: t0.Add(time.Hour)}
	for i, want := range []Result{{New: 1}, {Unchanged: 1}, {Unchanged: 1}} {
		res, err := r.RunOnce(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		if res.New != want.New || res.Updated != want.Updated || res.Unchanged != want.Unchanged || len(res.Findings) != 1 {
			t.Errorf("run %d: new %d updated %d unchanged %d findings %d; want %+v", i, res.New, res.Updated, res.Unchanged, len(res.Findings), want)
		}
	}
	if st.upserts != 1 {
		t.Errorf("%d upserts, want 1", st.upserts)
	}
}

// TestRunnerDetectorFails: a failing detector does not stop the others,
// and the error names it.
func TestRunnerDetectorFails(t *testing.T) {
	st := newMemStore()
	bad := &fakeDetector{name: "bad", fn: func(int, Window) ([]Finding, error) { return nil, errors.New("engine gone") }}
	good := &fakeDetector{name: "good", fn: func(int, Window) ([]Finding, error) {
		return []Finding{{ID: "g", Detector: "good", Severity: Warning, FirstSeen: t0, LastSeen: t0}}, nil
	}}
	r, err := NewRunner(nil, st, RunnerConfig{Detectors: []Detector{bad, good}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunOnce(context.Background(), Window{Since: t0, Until: t0.Add(time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "detector bad") || !strings.Contains(err.Error(), "engine gone") {
		t.Errorf("error %v: want one naming detector bad and its cause", err)
	}
	if len(res.Findings) != 1 || res.Findings[0].ID != "g" || st.byID["g"].ID != "g" {
		t.Errorf("findings %+v: want the good detector's, stored", res.Findings)
	}
}

func TestRunnerConfigValidate(t *testing.T) {
	d := &fakeDetector{name: "d"}
	for _, tc := range []struct {
		name string
		cfg  RunnerConfig
		want string
	}{
		{"defaults", RunnerConfig{Detectors: []Detector{d}}, ""},
		{"no detectors", RunnerConfig{}, "no detectors"},
		{"window longer than interval", RunnerConfig{Detectors: []Detector{d}, Interval: 20 * time.Second, Window: 2 * time.Minute}, ""},
		{"window equal to interval", RunnerConfig{Detectors: []Detector{d}, Interval: time.Minute, Window: time.Minute}, "must be longer than the interval"},
		{"window shorter than default interval", RunnerConfig{Detectors: []Detector{d}, Window: 30 * time.Second}, "must be longer than the interval"},
		{"detector twice", RunnerConfig{Detectors: []Detector{d, d}}, `detector "d" is configured twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := (&Runner{cfg: RunnerConfig{}}).RunOnce(context.Background(), Window{Since: t0, Until: t0}); err == nil {
		t.Error("RunOnce accepted an empty window")
	}
}

// followingDetector is a fakeDetector that reads the findings of the
// detectors it follows, as regression and relist-herd do.
type followingDetector struct {
	*fakeDetector
	follows []string
}

func (d followingDetector) Follows() []string { return d.follows }

// TestRunnerParallel: with Parallel set, detectors run at once, a
// Follower only once the findings of those it follows are stored, and the
// result is the one a serial evaluation gives; a failing detector stops
// nobody.
func TestRunnerParallel(t *testing.T) {
	w := Window{Since: time.Unix(0, 0), Until: time.Unix(600, 0)}
	for _, parallel := range []int{1, 2, 4} {
		t.Run(strconv.Itoa(parallel), func(t *testing.T) {
			st := newMemStore()
			var mu sync.Mutex
			running, most := 0, 0
			finding := func(name string) func(int, Window) ([]Finding, error) {
				return func(int, Window) ([]Finding, error) {
					mu.Lock()
					running++
					most = max(most, running)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					mu.Lock()
					running--
					mu.Unlock()
					return []Finding{{ID: name + "-1", Detector: name, Severity: Warning, FirstSeen: w.Since, LastSeen: w.Until}}, nil
				}
			}
			// after answers only when the findings of names are stored.
			after := func(name string, names ...string) func(int, Window) ([]Finding, error) {
				return func(n int, w Window) ([]Finding, error) {
					for _, o := range names {
						if got, _ := st.GetMany(context.Background(), []string{o + "-1"}); len(got) == 0 {
							return nil, errors.New(name + " ran before " + o + " was stored")
						}
					}
					return finding(name)(n, w)
				}
			}
			ds := []Detector{
				followingDetector{&fakeDetector{name: "b", fn: after("b", "a")}, []string{"a"}},
				&fakeDetector{name: "a", fn: finding("a")},
				&fakeDetector{name: "c", fn: finding("c")},
				&fakeDetector{name: "broken", fn: func(int, Window) ([]Finding, error) { return nil, errors.New("boom") }},
				followingDetector{&fakeDetector{name: "d", fn: after("d", "b", "c")}, []string{"b", "c", "absent"}},
			}
			r, err := NewRunner(nil, st, RunnerConfig{Detectors: ds, Parallel: parallel})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.RunOnce(context.Background(), w)
			if err == nil || !strings.Contains(err.Error(), "detector broken") || strings.Contains(err.Error(), "ran before") {
				t.Fatalf("RunOnce error = %v, want only detector broken's", err)
			}
			var ids []string
			for _, f := range res.Findings {
				ids = append(ids, f.ID)
			}
			if got := strings.Join(ids, " "); got != "a-1 b-1 c-1 d-1" || res.New != 4 {
				t.Errorf("findings %q, %d new; want a-1 b-1 c-1 d-1, 4 new", got, res.New)
			}
			if parallel == 1 && most != 1 || parallel > 1 && most < 2 {
				t.Errorf("at most %d detectors ran at once with Parallel %d", most, parallel)
			}
			if most > parallel {
				t.Errorf("%d detectors ran at once, more than Parallel %d", most, parallel)
			}
		})
	}
}

// TestRunnerFollowCycle: detectors that follow each other round in a
// circle are refused: none could run first.
func TestRunnerFollowCycle(t *testing.T) {
	none := func(int, Window) ([]Finding, error) { return nil, nil }
	ds := []Detector{
		followingDetector{&fakeDetector{name: "x", fn: none}, []string{"y"}},
		followingDetector{&fakeDetector{name: "y", fn: none}, []string{"z", "x"}},
		&fakeDetector{name: "z", fn: none},
	}
	_, err := NewRunner(nil, newMemStore(), RunnerConfig{Detectors: ds, Parallel: 2})
	if err == nil || !strings.Contains(err.Error(), "x → y → x") {
		t.Fatalf("NewRunner = %v, want the circle x → y → x refused", err)
	}
	if _, err := NewRunner(nil, newMemStore(), RunnerConfig{Detectors: ds[1:], Parallel: 2}); err != nil {
		t.Fatalf("NewRunner without x = %v, want nil", err)
	}
}

// TestRunnerStopsWhenCancelled: once the context ends, no other detector
// starts, serial or not.
func TestRunnerStopsWhenCancelled(t *testing.T) {
	w := Window{Since: time.Unix(0, 0), Until: time.Unix(600, 0)}
	for _, parallel := range []int{1, 2} {
		t.Run(strconv.Itoa(parallel), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var mu sync.Mutex
			var ran []string
			det := func(name string, stop bool) *fakeDetector {
				return &fakeDetector{name: name, fn: func(int, Window) ([]Finding, error) {
					mu.Lock()
					ran = append(ran, name)
					mu.Unlock()
					if stop {
						cancel()
						return nil, ctx.Err()
					}
					return nil, nil
				}}
			}
			// c follows a, so it waits for a, which cancels.
			ds := []Detector{det("a", true), followingDetector{det("c", false), []string{"a"}}, det("d", false)}
			r, err := NewRunner(nil, newMemStore(), RunnerConfig{Detectors: ds, Parallel: parallel})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.RunOnce(ctx, w)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("RunOnce error = %v, want context.Canceled", err)
			}
			if slices.Contains(ran, "c") {
				t.Errorf("detectors run: %v; c started after the cancellation", ran)
			}
		})
	}
}

// TestRunnerFollowerHoldsNoOneBack: with two slots, a detector that waits
// on nobody takes the free slot while a slow detector runs, though a
// follower of the slow one comes before it in order.
func TestRunnerFollowerHoldsNoOneBack(t *testing.T) {
	w := Window{Since: time.Unix(0, 0), Until: time.Unix(600, 0)}
	started := make(chan struct{})
	overlapped := false
	slow := &fakeDetector{name: "slow", fn: func(int, Window) ([]Finding, error) {
		select {
		case <-started:
			overlapped = true
		case <-time.After(5 * time.Second):
		}
		return nil, nil
	}}
	none := func(int, Window) ([]Finding, error) { return nil, nil }
	ds := []Detector{
		slow,
		followingDetector{&fakeDetector{name: "follower", fn: none}, []string{"slow"}},
		&fakeDetector{name: "free", fn: func(int, Window) ([]Finding, error) { close(started); return nil, nil }},
	}
	r, err := NewRunner(nil, newMemStore(), RunnerConfig{Detectors: ds, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Error("free started only after slow ended: slow's follower held the free slot")
	}
	if len(ds[1].(followingDetector).seen()) != 1 {
		t.Error("the follower did not run")
	}
}
