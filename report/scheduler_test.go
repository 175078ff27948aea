package report

import (
	"context"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
)

// manualClock is a fake clock moved by the test. Each After call is
// announced on waits with its duration; Advance fires the timers due.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []manualTimer
	waits  chan time.Duration
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, manualTimer{at: c.now.Add(d), ch: ch})
	c.mu.Unlock()
	c.waits <- d
	return ch
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// TestScheduler runs a daily report on a fake clock over the real engine:
// a run missed during downtime is caught up once at start, the next runs
// at its time, a webhook that fails first gets a retry after the backoff,
// and each delivery is recorded in the stored report.
func TestScheduler(t *testing.T) {
	st := storetest.Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	posts, failFirst := 0, true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		if failFirst {
			failFirst = false
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "out")
	spec := Spec{Name: "daily", Schedule: "0 6 * * *", TimeZone: "UTC", Window: Duration(24 * time.Hour),
		Outputs: Outputs{Dir: dir, Formats: []string{"md", "json"}, Webhooks: []Webhook{{URL: srv.URL + "/hook", Backoff: Duration(5 * time.Second)}}}}
	day := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, time.UTC) }
	// A run stored before the downtime: the 1st at 06:00. Runs of the 2nd
	// and 3rd were missed; the clock starts on the 3rd at 09:00.
	if err := Save(ctx, st, Report{ID: ID("daily", day(1, 6)), Name: "daily", WindowStart: day(0, 6), WindowEnd: day(1, 6), GeneratedAt: day(1, 6)}); err != nil {
		t.Fatal(err)
	}
	clock := &manualClock{now: day(3, 9), waits: make(chan time.Duration)}
	metrics := NewMetrics(prometheus.NewRegistry())
	sch, err := NewScheduler(SchedulerConfig{Store: st, Findings: detect.NewRepository(st, clock.Now), Reports: []Spec{spec}, Clock: clock, Client: srv.Client(), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	wait := func(want time.Duration) {
		t.Helper()
		select {
		case d := <-clock.waits:
			if d != want {
				t.Fatalf("scheduler waits %s, want %s", d, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the scheduler did not wait for %s", want)
		}
	}

	// Catch-up for the 3rd at 06:00: the webhook fails, the retry waits 5s.
	wait(5 * time.Second)
	clock.Advance(5 * time.Second)
	// Then it sleeps until the 4th at 06:00.
	wait(day(4, 6).Sub(day(3, 9).Add(5 * time.Second)))
	list, err := List(ctx, st, ListFilter{Name: "daily"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || !list[0].WindowEnd.Equal(day(3, 6)) {
		t.Fatalf("after start: %+v, want the run of the 3rd caught up (and not the 2nd)", list)
	}
	r, err := Get(ctx, st, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deliveries) != 3 || !r.Deliveries[2].OK || r.Deliveries[2].Attempts != 2 || r.Changes.Previous != ID("daily", day(1, 6)) {
		t.Fatalf("caught-up report: deliveries %+v, previous %q", r.Deliveries, r.Changes.Previous)
	}
	for _, name := range []string{"daily-20260303T0600Z.md", "daily-20260303T0600Z.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}

	// The 4th at 06:00: one run, delivered at the first attempt.
	clock.Advance(day(4, 6).Sub(clock.Now()))
	wait(24 * time.Hour)
	list, err = List(ctx, st, ListFilter{Name: "daily"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || !list[0].WindowEnd.Equal(day(4, 6)) {
		t.Fatalf("after the 4th: %+v", list)
	}
	if r, err := Get(ctx, st, list[0].ID); err != nil || len(r.Deliveries) != 3 || r.Deliveries[2].Attempts != 1 || r.Changes.Previous != list[1].ID {
		t.Fatalf("report of the 4th: %+v, %v", r.Deliveries, err)
	}
	mu.Lock()
	if posts != 3 {
		t.Errorf("%d webhook posts, want 3", posts)
	}
	mu.Unlock()
	// Two runs, each with two files and one webhook (the retried post
	// counts once, as delivered).
	for _, m := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{metrics.Runs.WithLabelValues("daily", "ok"), 2},
		{metrics.Runs.WithLabelValues("daily", "error"), 0},
		{metrics.Deliveries.WithLabelValues("daily", "file", "ok"), 4},
		{metrics.Deliveries.WithLabelValues("daily", "webhook", "ok"), 2},
		{metrics.Deliveries.WithLabelValues("daily", "webhook", "error"), 0},
		{metrics.LastGood.WithLabelValues("daily"), float64(day(4, 6).Unix())},
	} {
		if got := metricValue(t, m.c); got != m.want {
			t.Errorf("metric %v = %v, want %v", m.c, got, m.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestParseSpecs(t *testing.T) {
	specs, err := ParseSpecs([]byte(`
- name: daily
  schedule: "0 6 * * *"
  time_zone: Europe/Berlin
  window: 24h
  clusters: [prod]
  min_severity: warning
  outputs:
    dir: /tmp/reports
    formats: [html, md]
    webhooks:
    - url: https://hooks.example.com/T0/B0
      slack: true
      retries: 5
      backoff: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	s := specs[0]
	if s.TimeZone != "Europe/Berlin" || s.Window != Duration(24*time.Hour) || s.MinSeverity != detect.Warning || !s.Outputs.Webhooks[0].Slack ||
		s.Outputs.Webhooks[0].Backoff != Duration(time.Second) || s.Outputs.Webhooks[0].Retries != 5 {
		t.Errorf("loaded %+v", s)
	}
	for _, bad := range []string{
		"- name: a\n  schedule: '0 6 * *'\n",
		"- name: a\n  schedule: '0 6 * * *'\n  time_zone: Mars/Olympus\n",
		"- name: a\n  schedule: '0 6 * * *'\n  window: 5m\n",
		"- name: a\n  schedule: '0 6 * * *'\n  outputs: {formats: [pdf]}\n",
		"- name: a\n  schedule: '0 6 * * *'\n  outputs: {webhooks: [{url: 'ftp://x'}]}\n",
		"- name: a\n  schedule: '0 6 * * *'\n  shedule: typo\n",
		"- name: a\n  schedule: '0 6 * * *'\n- name: a\n  schedule: '0 7 * * *'\n",
		"- schedule: '0 6 * * *'\n",
	} {
		if _, err := ParseSpecs([]byte(bad)); err == nil {
			t.Errorf("ParseSpecs accepted\n%s", bad)
		}
	}
}

// metricValue reads the value of a counter or gauge.
func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
