package report

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// stepClock is a fake clock whose After fires at once and moves time on
// by the duration waited, recording each wait.
type stepClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func sampleReport() Report {
	end := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	f := detect.Finding{ID: "watch-loop-1", Detector: "watch-loop", Severity: detect.Critical, Title: "loop <@channel> & more"}
	return Report{ID: ID("daily", end), Name: "daily", WindowStart: end.Add(-24 * time.Hour), WindowEnd: end, GeneratedAt: end,
		Findings: []Group{{Detector: "watch-loop", Severity: detect.Critical, Findings: []detect.Finding{f}}},
		Changes:  Changes{New: []Change{changeOf(f)}}, VolumeStep: Duration(time.Hour)}
}

func TestPost(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	var types []string
	fail := map[string]int{"/flaky": 2, "/down": 100}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		types = append(types, r.Header.Get("Content-Type"))
		switch {
		case r.URL.Path == "/bad":
			http.Error(w, "no such channel", http.StatusBadRequest)
		case fail[r.URL.Path] > 0:
			fail[r.URL.Path]--
			http.Error(w, "try later", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	r := sampleReport()
	for _, tc := range []struct {
		name     string
		hook     Webhook
		ok       bool
		attempts int
		waits    []time.Duration
		status   int
	}{
		{"fails twice, then takes it", Webhook{URL: srv.URL + "/flaky?token=s3cret"}, true, 3, []time.Duration{2 * time.Second, 4 * time.Second}, 200},
		{"always down", Webhook{URL: srv.URL + "/down", Retries: 2, Backoff: Duration(time.Second)}, false, 3, []time.Duration{time.Second, 2 * time.Second}, 503},
		{"a 400 is not retried", Webhook{URL: srv.URL + "/bad"}, false, 1, nil, 400},
		{"slack", Webhook{URL: srv.URL + "/slack", Slack: true}, true, 1, nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			bodies, types = nil, nil
			mu.Unlock()
			clock := &stepClock{now: r.GeneratedAt}
			d := Post(context.Background(), srv.Client(), clock, tc.hook, r)
			if d.OK != tc.ok || d.Attempts != tc.attempts || d.Status != tc.status {
				t.Errorf("delivery %+v, want ok %v after %d attempts, status %d", d, tc.ok, tc.attempts, tc.status)
			}
			if !slices.Equal(clock.waits, tc.waits) {
				t.Errorf("waited %v, want %v", clock.waits, tc.waits)
			}
			if strings.Contains(d.Target+d.Error, "s3cret") {
				t.Errorf("the delivery record holds the URL's secret: %+v", d)
			}
			if !d.At.Equal(clock.now) {
				t.Errorf("delivery at %s, want the clock's %s", d.At, clock.now)
			}
			if !tc.ok && !strings.Contains(d.Error, http.StatusText(tc.status)) {
				t.Errorf("error %q does not give the status", d.Error)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bodies) != tc.attempts {
				t.Fatalf("%d requests, want %d", len(bodies), tc.attempts)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(bodies[0]), &v); err != nil || types[0] != "application/json" {
				t.Fatalf("body %q (%s) is not JSON: %v", bodies[0], types[0], err)
			}
			if tc.hook.Slack {
				text, _ := v["text"].(string)
				if !strings.Contains(text, "1 new") || !strings.Contains(text, "loop &lt;@channel&gt; &amp; more") {
					t.Errorf("slack text %q", text)
				}
			} else if v["id"] != r.ID {
				t.Errorf("posted report id %v, want %s", v["id"], r.ID)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d := Post(ctx, srv.Client(), &stepClock{}, Webhook{URL: srv.URL + "/down"}, r)
		if d.OK || d.Attempts != 1 {
			t.Errorf("after cancel: %+v", d)
		}
	})
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	r := sampleReport()
	r.Name = "../daily/x"
	now := r.GeneratedAt.Add(time.Second)
	ds := WriteFiles(dir, []string{"html", "md", "json", "pdf"}, r, now)
	if len(ds) != 4 {
		t.Fatalf("%d deliveries", len(ds))
	}
	for _, d := range ds[:3] {
		if !d.OK || filepath.Dir(d.Target) != dir || !d.At.Equal(now) {
			t.Errorf("delivery %+v", d)
		}
		if _, err := os.Stat(d.Target); err != nil {
			t.Error(err)
		}
	}
	if filepath.Base(ds[0].Target) != "_daily_x-20260302T1200Z.html" {
		t.Errorf("file name %s", filepath.Base(ds[0].Target))
	}
	if ds[3].OK || !strings.Contains(ds[3].Error, "pdf") {
		t.Errorf("unknown format delivered: %+v", ds[3])
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/services/T0/B0?token=x": "https://hooks.example/services/T0/B0",
		"https://user:pass@hooks.example/x":            "https://hooks.example/x",
		"http://hooks.example/a@b":                     "http://hooks.example/a@b",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
