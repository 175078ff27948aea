package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/crashfs"
)

// TestServePowerLoss runs serve on a file system that loses every write
// not yet fsynced when it crashes (internal/crashfs, over FUSE), under load
// from concurrent senders, and cuts the power at a random moment of each
// cycle: serve is killed and the file system drops what was not durable,
// as a host losing power does (kill -9 alone leaves the page cache). After
// the cycles a last start must hold every acknowledged event exactly once,
// with no manual step.
func TestServePowerLoss(t *testing.T) {
	fsys, mnt := mountCrashFS(t)
	data := filepath.Join(mnt, "data")
	const cycles, senders = 5, 3
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var mu sync.Mutex
	acked := map[string]bool{}
	sent := 0
	for cycle := range cycles {
		s := startServe(t, "--data", data, "--batch-wait", "200ms", "--detect=false")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := 0; b < 60; b++ { // at most 3,000 events a sender a cycle
					select {
					case <-stop:
						return
					default:
					}
					ids, body := powerBatch(cycle, w, b)
					resp, err := http.Post(s.base+"/audit/power", "application/json", strings.NewReader(body))
					if err != nil {
						return // the power is out
					}
					var out map[string]any
					_ = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					mu.Lock()
					sent++
					if resp.StatusCode == 200 && out["accepted"] == float64(len(ids)) {
						for _, id := range ids {
							acked[id] = true
						}
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // a steady stream, cut mid-way
				}
			}()
		}
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))))
		s.kill() // the power goes
		close(stop)
		wg.Wait()
		if err := fsys.Crash(); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		mu.Lock()
		t.Logf("cycle %d: %d batches sent, %d events acknowledged so far; the crash so far: %+v", cycle, sent, len(acked), fsys.Stats())
		mu.Unlock()
	}
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged")
	}

	s := startServe(t, "--data", data, "--batch-wait", "50ms", "--detect=false")
	deadline := time.Now().Add(3 * time.Minute)
	var stored map[string]int
	for {
		stored = powerStored(t, s)
		missing := 0
		for id := range acked {
			if stored[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged events are not stored after %d power cuts (%d stored)\n%s",
				missing, len(acked), cycles, len(stored), s.logs.String())
		}
		time.Sleep(time.Second)
	}
	dups := 0
	for id, n := range stored {
		if n > 1 {
			dups++
			if dups < 5 {
				t.Errorf("%s stored %d times", id, n)
			}
		}
	}
	if dups > 0 {
		t.Errorf("%d events stored more than once", dups)
	}
	t.Logf("%d power cuts: %d events acknowledged, %d stored (acknowledged ones all there, each once); crashes dropped %+v",
		cycles, len(acked), len(stored), fsys.Stats())
	s.stop()
}

// powerBatch is batch b of sender w in a cycle: 50 events with ids unique
// to it.
func powerBatch(cycle, w, b int) ([]string, string) {
	now := time.Now().UTC()
	var ids, items []string
	for i := range 50 {
		id := fmt.Sprintf("power-%d-%d-%d-%d", cycle, w, b, i)
		ids = append(ids, id)
		items = append(items, event(id, "ResponseComplete", now.Format(time.RFC3339Nano), ""))
	}
	return ids, list("audit.k8s.io/v1", items...)
}

// powerStored counts how often each event id of the test is stored (the
// events themselves, no jq worker: a loaded machine must not time out).
func powerStored(t *testing.T, s *server) map[string]int {
	t.Helper()
	code, lines := s.get("/api/v1/events?cluster=power&since=24h&limit=100000")
	if code != 200 {
		t.Fatalf("query: %d %v", code, lines)
	}
	out := map[string]int{}
	for _, l := range lines {
		var ev struct {
			AuditID string `json:"auditID"`
			Error   string `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Error != "" || ev.AuditID == "" {
			t.Fatalf("query line %.200q: %v", l, err)
		}
		out[ev.AuditID]++
	}
	return out
}

// TestServeDiskFull fills the disk under serve's spool (crashfs refuses
// every write): the webhook answers 503 with a reason, /readyz fails
// saying why while /healthz stays up, and the refusals are logged once,
// not once per batch. Once the disk has room again the next batch is
// stored and /readyz recovers, with one line saying so.
func TestServeDiskFull(t *testing.T) {
	fsys, mnt := mountCrashFS(t)
	s := startServe(t, "--data", filepath.Join(mnt, "data"), "--batch-wait", "50ms", "--detect=false")
	ready := func() (int, string) {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("/readyz before: %d %s", code, body)
	}
	fsys.SetFull(true)
	for b := range 20 {
		_, body := powerBatch(0, 0, b)
		if code, resp := s.post("/audit/full", body); code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(resp["error"]), "no space left") {
			t.Fatalf("batch %d on a full disk: %d %v", b, code, resp)
		}
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "spool failing") || !strings.Contains(body, "20 failures") {
		t.Errorf("/readyz on a full disk: %d %q", code, body)
	}
	if code, _ := s.get("/healthz"); code != 200 {
		t.Errorf("/healthz on a full disk: %d", code)
	}
	fsys.SetFull(false)
	ids, body := powerBatch(1, 0, 0)
	if code, resp := s.post("/audit/full", body); code != 200 {
		t.Fatalf("the first batch after the disk has room: %d %v", code, resp)
	}
	if code, body := ready(); code != 200 {
		t.Errorf("/readyz after the disk has room: %d %q", code, body)
	}
	s.waitEvents("/api/v1/events?cluster=full&since=24h", len(ids))
	logs := s.logs.String()
	if n := strings.Count(logs, "spool failing"); n != 1 {
		t.Errorf("%d log lines say the spool fails for 20 refused batches, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "spool recovered") || !strings.Contains(logs, "failures=20") {
		t.Errorf("no line says the spool recovered after 20 failures:\n%s", logs)
	}
	s.stop()
}

// mountCrashFS mounts a crashfs over a fresh directory and returns it and
// its mount point, or skips where FUSE cannot mount (make test requires
// it: AUDITLENS_REQUIRE_FUSE=1).
func mountCrashFS(t *testing.T) (*crashfs.FS, string) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	fsys, err := crashfs.Mount(backing, mnt)
	if err != nil {
		if os.Getenv("AUDITLENS_REQUIRE_FUSE") == "1" {
			t.Fatal(err)
		}
		t.Skipf("no FUSE here (root and /dev/fuse are needed): %v", err)
	}
	t.Cleanup(func() { _ = fsys.Unmount() })
	return fsys, mnt
}
