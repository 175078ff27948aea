package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
)

// benchBodies are 400-event EventList bodies, as the apiserver batches them.
func benchBodies(b *testing.B, n int) [][]byte {
	b.Helper()
	g := auditgen.New(42, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	out := make([][]byte, n)
	for i := range out {
		out[i] = g.EventListBody(400)
	}
	return out
}

// BenchmarkWebhookEndToEnd posts 400-event batches to a serve child process
// from 4 concurrent clients (as several apiservers would) and measures
// events/s until every event is in the store. The baseline, in the same
// run, decodes the same bodies in-process without storing them.
//
//	go test -run '^$' -bench WebhookEndToEnd -benchtime 10x ./cmd/auditlens/
func BenchmarkWebhookEndToEnd(b *testing.B) {
	const batches = 250 // 100k events per iteration
	bodies := benchBodies(b, batches)
	var bytesTotal int64
	for _, body := range bodies {
		bytesTotal += int64(len(body))
	}

	b.Run("baseline=decode-only", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(bytesTotal)
		for b.Loop() {
			for _, body := range bodies {
				if _, err := ingest.DecodeBody("bench", body); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*batches*400)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("serve", func(b *testing.B) {
		s := startServe(b, "--data", b.TempDir())
		b.SetBytes(bytesTotal)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		stored := 0.0
		for i := 0; b.Loop(); i++ {
			var wg sync.WaitGroup
			work := make(chan []byte)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for body := range work {
						// Each iteration is a different cluster, so the same
						// bodies are new events every time.
						resp, err := client.Post(fmt.Sprintf("%s/audit/bench%d", s.base, i), "application/json", strings.NewReader(string(body)))
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Errorf("status %d", resp.StatusCode)
						}
					}
				}()
			}
			for _, body := range bodies {
				work <- body
			}
			close(work)
			wg.Wait()
			stored += batches * 400
			deadline := time.Now().Add(5 * time.Minute)
			for metric(b, s.base, "auditlens_events_stored_total") < stored {
				if time.Now().After(deadline) {
					b.Fatalf("stored %v of %v", metric(b, s.base, "auditlens_events_stored_total"), stored)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		b.ReportMetric(stored/b.Elapsed().Seconds(), "events/s")
		s.stop()
	})
}

// metric reads one unlabelled value from /metrics.
func metric(b *testing.B, base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
