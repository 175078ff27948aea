package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

func countEvents(t *testing.T, st store.Store, cluster string) int {
	t.Helper()
	n := 0
	err := store.Each(context.Background(), st, "SELECT count() AS n FROM audit_events FINAL WHERE cluster = {c:String}",
		store.Params{"c": cluster}, func(c int) error {
			n = c
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestImportFormatsAndReimport imports the same events as a plain log, a
// gzipped log and EventList lines in a directory, plus a broken line and a
// malformed event, then imports everything again.
func TestImportFormatsAndReimport(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	dir := t.TempDir()

	g := auditgen.New(7, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	var plain bytes.Buffer
	if err := g.WriteLog(&plain, 300); err != nil {
		t.Fatal(err)
	}
	// A rotated, compressed file with the same 300 events plus 200 new ones.
	var more bytes.Buffer
	if err := g.WriteLog(&more, 200); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain.Bytes())
	zw.Write(more.Bytes())
	zw.Close()
	// Lines captured from a webhook: one EventList per line, 50 new events,
	// one of them malformed, and one line that is not JSON at all.
	body := g.EventListBody(50)
	body = bytes.Replace(body, []byte(`"stage":"`), []byte(`"stage":"Bogus`), 1)
	webhookLines := append(append(body, '\n'), []byte("this line is not json\n")...)

	os.MkdirAll(filepath.Join(dir, "rotated"), 0o755)
	files := map[string][]byte{
		"audit.log": plain.Bytes(),
		"rotated/audit-2026-11-01T00-00-00.log.gz": gz.Bytes(),
		"rotated/webhook-capture.ndjson":           webhookLines,
		"rotated/.hidden-editor-swap-file-ignored": []byte("garbage\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := ExpandPaths([]string{filepath.Join(dir, "audit.log"), filepath.Join(dir, "rotated")})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("paths %v", paths)
	}
	w := NewWriter(st, WriterConfig{MaxRows: 128})
	var progress atomic.Int64
	stats, err := Import(ctx, w, paths, ImportConfig{Cluster: "imp", BatchRows: 128, OnProgress: func(p ImportProgress) { progress.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	// 300 + 500 + 49 events decoded; 300 of the gz file's are duplicates.
	if stats.Events != 849 || stats.Stored != 549 || stats.Duplicates != 300 || stats.Rejected != 2 || stats.Files != 3 {
		t.Fatalf("first import: %+v", stats)
	}
	if len(stats.RejectSamples) != 2 || !strings.Contains(strings.Join(stats.RejectSamples, "\n"), "webhook-capture.ndjson:3: not Kubernetes audit JSON") {
		t.Errorf("reject samples %q", stats.RejectSamples)
	}
	if progress.Load() == 0 {
		t.Error("no progress reported")
	}
	if stats.First.IsZero() || !stats.Last.After(stats.First) {
		t.Errorf("span %v..%v", stats.First, stats.Last)
	}
	if n := countEvents(t, st, "imp"); n != 549 {
		t.Fatalf("stored %d events, want 549", n)
	}

	stats, err = Import(ctx, w, paths, ImportConfig{Cluster: "imp"})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Stored != 0 || stats.Duplicates != 849 {
		t.Fatalf("re-import: %+v", stats)
	}
	if n := countEvents(t, st, "imp"); n != 549 {
		t.Fatalf("after re-import %d events, want 549", n)
	}
	// The same file for another cluster is other events.
	stats, err = Import(ctx, w, paths[:1], ImportConfig{Cluster: "other"})
	if err != nil || stats.Stored != 300 {
		t.Fatalf("other cluster: %+v %v", stats, err)
	}
}

// flakyStore fails its first inserts, like a ClickHouse server that is down.
type flakyStore struct {
	store.Store
	failures atomic.Int32
}

func (f *flakyStore) Insert(ctx context.Context, rows []store.Row) error {
	if f.failures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return f.Store.Insert(ctx, rows)
}

// TestRunSpoolRetriesUnreachableStore acknowledges batches while the store
// is failing and checks they are all stored once it comes back, and that
// the checkpoint only moves after they are.
func TestRunSpoolRetriesUnreachableStore(t *testing.T) {
	st := &flakyStore{Store: storetest.Open(t)}
	st.failures.Store(3)
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := auditgen.New(3, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	for range 4 {
		b, err := DecodeBody("flaky", g.EventListBody(100))
		if err != nil {
			t.Fatal(err)
		}
		raws := make([][]byte, len(b.Rows))
		for i := range b.Rows {
			raws[i] = b.Rows[i].Raw
		}
		if err := sp.Append(ctx, Source{Cluster: "flaky"}, raws); err != nil {
			t.Fatal(err)
		}
	}
	w := NewWriter(st, WriterConfig{MaxRows: 150, MaxWait: 10 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w.RunSpool(ctx, sp, 5*time.Second) }()
	deadline := time.Now().Add(30 * time.Second)
	for countEvents(t, st, "flaky") != 400 {
		if time.Now().After(deadline) {
			t.Fatalf("stored %d of 400", countEvents(t, st, "flaky"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for sp.Stats().Committed != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %+v", sp.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.failures.Load() >= 0 {
		t.Fatalf("the store never failed (%d failures left)", st.failures.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunSpool: %v", err)
	}
}

// downStore is a real store behind a switch: while down, every insert and
// query fails as a ClickHouse server that is away does.
type downStore struct {
	store.Store
	down atomic.Bool
}

func (d *downStore) Insert(ctx context.Context, rows []store.Row) error {
	if d.down.Load() {
		return errors.New("dial tcp 127.0.0.1:9000: connection refused")
	}
	return d.Store.Insert(ctx, rows)
}

func (d *downStore) Scan(ctx context.Context, sql string, p store.Params, bind func([]store.Column) ([]any, error), row func() error) error {
	if d.down.Load() {
		return errors.New("dial tcp 127.0.0.1:9000: connection refused")
	}
	return d.Store.Scan(ctx, sql, p, bind, row)
}

// TestRunSpoolResumesWhenStoreReturns: while the store is away the writer
// backs off (here from 2 s, doubling), but it probes the store meanwhile
// and stores within a probe interval of its return, not at the next
// retry; the outage is logged twice (when it starts and when it ends, with
// its count of failures), not once per attempt.
func TestRunSpoolResumesWhenStoreReturns(t *testing.T) {
	st := &downStore{Store: storetest.Open(t)}
	st.down.Store(true)
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := DecodeBody("away", auditgen.New(5, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)).EventListBody(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.AppendRows(ctx, Source{Cluster: "away"}, b.Rows); err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	w := NewWriter(st, WriterConfig{MaxWait: 10 * time.Millisecond, RetryMin: 2 * time.Second, RetryMax: time.Minute,
		ProbeEvery: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	done := make(chan error, 1)
	go func() { done <- w.RunSpool(ctx, sp, 5*time.Second) }()
	// Fail the attempts at 0, 2 and 6 s; the next would come at 14 s.
	time.Sleep(6500 * time.Millisecond)
	if since, n, _ := w.Health().State(); since.IsZero() || n != 3 {
		t.Fatalf("after 6.5 s away: failing since %v, %d failures; want 3", since, n)
	}
	back := time.Now()
	st.down.Store(false)
	for since, _, _ := w.Health().State(); !since.IsZero() || countEvents(t, st.Store, "away") != 100; since, _, _ = w.Health().State() {
		if time.Since(back) > 15*time.Second {
			t.Fatal("not stored 15 s after the store returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Without the probe, 7.5 s; one insert takes well under a second
	// even on a busy machine.
	if d := time.Since(back); d > 4*time.Second {
		t.Errorf("stored %s after the store returned; want within a probe and an insert", d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[1], "store recovered") || !strings.Contains(lines[1], "failures=3") {
		t.Errorf("log of one outage:\n%s", logs.String())
	}
}

// TestSpoolHealth: a spool whose disk refuses writes fails its health
// until a write succeeds again.
func TestSpoolHealth(t *testing.T) {
	dir := t.TempDir()
	var logs syncLog
	sp, err := OpenSpool(SpoolConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx := t.Context()
	ev := [][]byte{[]byte(`{}`)}
	if err := sp.Append(ctx, Source{Cluster: "c"}, ev); err != nil {
		t.Fatal(err)
	}
	// The active segment's file stops taking writes, as on a full disk.
	sp.active.Close()
	for range 5 {
		if err := sp.Append(ctx, Source{Cluster: "c"}, ev); err == nil {
			t.Fatal("an append to a closed segment succeeded")
		}
	}
	since, n, last := sp.Health().State()
	if since.IsZero() || n != 5 || last == nil {
		t.Fatalf("health after 5 refused appends: since %v, %d failures, %v", since, n, last)
	}
	if err := sp.Health().Check(0); err == nil || !strings.Contains(err.Error(), "spool failing") {
		t.Errorf("check: %v", err)
	}
	if c := strings.Count(logs.String(), "level=ERROR"); c != 1 {
		t.Errorf("%d error lines for 5 refused appends, want 1:\n%s", c, logs.String())
	}
}

// syncLog collects log lines written from several goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
