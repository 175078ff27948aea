package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/auditlens/auditlens/store"
)

func readAll(t *testing.T, r *SpoolReader) []Record {
	t.Helper()
	var out []Record
	for {
		rec, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, rec)
	}
}

func TestSpoolAppendReadCommitReplay(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	sp, err := OpenSpool(SpoolConfig{Dir: dir, SegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 300)
	appendOne := func(i int) {
		ev := [][]byte{[]byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad)), []byte(`{"x":1}`)}
		if err := sp.Append(ctx, Source{Cluster: fmt.Sprintf("c%d", i)}, ev); err != nil {
			t.Error(err)
		}
	}
	// Concurrent appends share a write and an fsync; sequential ones each
	// fill a 300-byte segment, so later segments can be dropped.
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			appendOne(i)
		}()
	}
	wg.Wait()
	for i := 10; i < 20; i++ {
		appendOne(i)
	}
	r := sp.Reader()
	recs := readAll(t, r)
	if len(recs) != 20 {
		t.Fatalf("read %d records, want 20", len(recs))
	}
	seen := map[string]bool{}
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, rec.Seq)
		}
		if len(rec.Events) != 2 || string(rec.Events[1]) != `{"x":1}` {
			t.Fatalf("record %d events %q", i, rec.Events)
		}
		seen[rec.Cluster] = true
	}
	if len(seen) != 20 {
		t.Fatalf("clusters %v", seen)
	}
	if st := sp.Stats(); st.Segments < 2 {
		t.Fatalf("expected the 300-byte segment limit to roll segments, got %+v", st)
	}
	segsBefore := sp.Stats().Segments
	if err := sp.Commit(12); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: only records after the checkpoint come back, and fully
	// stored segments are gone.
	sp, err = OpenSpool(SpoolConfig{Dir: dir, SegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	recs = readAll(t, sp.Reader())
	if len(recs) != 8 || recs[0].Seq != 13 || recs[7].Seq != 20 {
		t.Fatalf("after reopen got %d records starting at %v", len(recs), recs)
	}
	// Segments holding only records up to 12 were deleted: what is left
	// starts at or before 13 and no segment ends at or before 12.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 || len(segs) >= segsBefore {
		t.Fatalf("segments after commit: %d, before: %d", len(segs), segsBefore)
	}
	if err := sp.Append(ctx, Source{Cluster: "after"}, [][]byte{[]byte("{}")}); err != nil {
		t.Fatal(err)
	}
	recs = readAll(t, sp.Reader())
	if last := recs[len(recs)-1]; last.Seq != 21 || last.Cluster != "after" {
		t.Fatalf("new record after reopen: %+v", last)
	}
}

func TestSpoolCutsTornTail(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	sp, err := OpenSpool(SpoolConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sp.Append(ctx, Source{Cluster: "c"}, [][]byte{[]byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	sp.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	// A crash in the middle of writing a fourth record.
	f, err := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, 4, 0, 0, 0, 0, 0, 0, 0, '{'})
	f.Close()

	sp, err = OpenSpool(SpoolConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	recs := readAll(t, sp.Reader())
	if len(recs) != 3 {
		t.Fatalf("got %d records after a torn tail, want 3", len(recs))
	}
	if err := sp.Append(ctx, Source{Cluster: "c"}, [][]byte{[]byte(`{"i":3}`)}); err != nil {
		t.Fatal(err)
	}
	recs = readAll(t, sp.Reader())
	if len(recs) != 4 || recs[3].Seq != 4 || string(recs[3].Events[0]) != `{"i":3}` {
		t.Fatalf("records after append: %+v", recs)
	}
}

func TestSpoolAppendAfterClose(t *testing.T) {
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sp.Close()
	if err := sp.Append(context.Background(), Source{Cluster: "c"}, nil); err != ErrSpoolClosed {
		t.Fatalf("got %v, want ErrSpoolClosed", err)
	}
}

func BenchmarkSpoolAppend(b *testing.B) {
	sp, err := OpenSpool(SpoolConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	ev := make([][]byte, 400)
	for i := range ev {
		ev[i] = make([]byte, 1300)
	}
	b.ReportAllocs()
	b.SetBytes(400 * 1300)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := sp.Append(context.Background(), Source{Cluster: "c"}, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestSpoolKeepsDecodedRows: rows appended with AppendRows come back
// decoded while the cache has room, and from disk (raw only) beyond it.
func TestSpoolKeepsDecodedRows(t *testing.T) {
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), CacheRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx := context.Background()
	mk := func(ids ...string) []store.Row {
		var rows []store.Row
		for _, id := range ids {
			rows = append(rows, store.Row{Cluster: "c", AuditID: id, Raw: []byte(`{"auditID":"` + id + `"}`)})
		}
		return rows
	}
	for _, ids := range [][]string{{"a", "b"}, {"c", "d"}, {"e"}} {
		if err := sp.AppendRows(ctx, Source{Cluster: "c"}, mk(ids...)); err != nil {
			t.Fatal(err)
		}
	}
	recs := readAll(t, sp.Reader())
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	// 2 rows fit, the next 2 would exceed 3, the last 1 fits.
	if recs[0].Rows == nil || recs[1].Rows != nil || recs[2].Rows == nil {
		t.Fatalf("cached: %v %v %v", recs[0].Rows != nil, recs[1].Rows != nil, recs[2].Rows != nil)
	}
	if recs[0].Rows[1].AuditID != "b" || recs[0].Cluster != "c" {
		t.Errorf("cached record %+v", recs[0])
	}
	if len(recs[1].Events) != 2 || string(recs[1].Events[1]) != `{"auditID":"d"}` {
		t.Errorf("record from disk %+v", recs[1])
	}
	// A second reader (a restart) finds nothing cached any more.
	for _, r := range readAll(t, sp.Reader()) {
		if r.Rows != nil {
			t.Errorf("record %d still cached", r.Seq)
		}
	}
}
