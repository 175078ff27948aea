package main

// How long the explorer takes to show a one-hour window over a store of
// at least 10M events, in a real browser: from navigation start to the
// timeline (findings, histogram and the newest 200 events) rendered. The
// store is the detector benchmark's (detect/detectors/bench_test.go builds it: 10M
// generated events, most of them inside one hour):
//
//	AUDITLENS_UI_BENCH_STORE=/var/tmp/detect-bench \
//	  go test ./cmd/auditlens/ -run '^$' -bench UITimeline -benchtime 10x
//
// Reported: ms/render (the page's own navigation-to-ready time), ms/api
// (the histogram and events requests, made concurrently as the page makes
// them, timed from Go), and ms/render-empty: the same page over an empty
// hour of the same store, the baseline of everything but the data.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func BenchmarkUITimeline(b *testing.B) {
	storeDir := os.Getenv("AUDITLENS_UI_BENCH_STORE")
	if storeDir == "" {
		b.Skip("set AUDITLENS_UI_BENCH_STORE to a store of >= 10M events (see detect/detectors/bench_test.go)")
	}
	s := startServe(b, "--store", "chdb://"+storeDir, "--data", b.TempDir(), "--detect=false")
	// The benchmark store's events start at 2026-05-04 08:00 UTC.
	full := url.Values{"since": {"2026-05-04T08:05:00Z"}, "until": {"2026-05-04T09:05:00Z"}}
	empty := url.Values{"since": {"2026-05-03T08:05:00Z"}, "until": {"2026-05-03T09:05:00Z"}}

	count := func(w url.Values) int64 {
		code, body := s.getBody("/api/v1/histogram?" + w.Encode() + "&buckets=1")
		var h struct{ Total int64 }
		if err := json.Unmarshal([]byte(body), &h); code != 200 || err != nil {
			b.Fatalf("counting events: %d %s", code, body)
		}
		return h.Total
	}
	stored := count(url.Values{"since": {"2020-01-01T00:00:00Z"}, "until": {"2030-01-01T00:00:00Z"}})
	inWindow := count(full)
	b.Logf("store: %d events; the window holds %d", stored, inWindow)
	if stored < 10_000_000 {
		b.Fatalf("the store holds %d events; the benchmark wants >= 10M", stored)
	}

	br := newBrowser(b, 1280, 900)
	render := func(w url.Values, cond string) float64 {
		br.run(chromedp.Navigate(s.base + "/?" + w.Encode()))
		br.waitReady("timeline", cond)
		var ms float64
		br.eval(`parseFloat(document.body.dataset.renderMs)`, &ms)
		return ms
	}
	api := func() time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, p := range []string{"/api/v1/histogram?" + full.Encode() + "&by=verb", "/api/v1/events?" + full.Encode() + "&order=desc&limit=200"} {
			wg.Go(func() {
				resp, err := http.Get(s.base + p)
				if err != nil || resp.StatusCode != 200 {
					b.Errorf("GET %s: %v %v", p, err, resp)
					return
				}
				_, _ = drain(resp)
			})
		}
		wg.Wait()
		return time.Since(t0)
	}
	// Warm: the first query loads the parts' marks.
	render(full, `document.querySelectorAll("#events tbody tr").length > 0`)

	var renderMS, emptyMS, apiMS float64
	b.ResetTimer()
	for range b.N {
		renderMS += render(full, `document.querySelectorAll("#events tbody tr").length > 0`)
		apiMS += float64(api().Microseconds()) / 1000
		emptyMS += render(empty, "")
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(renderMS/n, "ms/render")
	b.ReportMetric(apiMS/n, "ms/api")
	b.ReportMetric(emptyMS/n, "ms/render-empty")
	br.checkClean()
}

func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}
