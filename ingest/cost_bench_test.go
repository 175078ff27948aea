package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// BenchmarkIngestCost splits what one stored event costs in CPU, on the
// real embedded engine, into the parts an import pays: decoding the line,
// the writer's own work (the duplicate lookup, the residual split, the
// RowBinary encoding) and the engine's insert, and the engine's share into
// what the schema asks of it: the residual column, the explorer's rollup
// (the materialized view into audit_event_counts) and merging the parts.
// Each sub-benchmark stores the same generated events (auditlens gen's
// log, seed 1; AUDITLENS_COST_EVENTS of them, default 1,000,000) into the
// emptied tables, in the import's batches (50,000 rows, two concurrent
// inserts), and waits for the merges it caused before it stops the clock:
// an import that ends leaves its last merges to the next start, and a
// receiver pays for them as it goes.
//
// us-cpu/event is the process's CPU time (user + system, every thread,
// the engine's too) per event. On 2 cores an import at R events/s can
// spend at most 2e6/R µs of CPU per event: 16.7 µs at issue 13's 120k.
//
//	make bench-cost    # go test -run '^$' -bench IngestCost -benchtime 1x ./ingest/
func BenchmarkIngestCost(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("AUDITLENS_COST_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("AUDITLENS_COST_EVENTS=%q: want a positive number", s)
		}
		n = v
	}
	var log bytes.Buffer
	if err := auditgen.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).WriteLog(&log, n); err != nil {
		b.Fatal(err)
	}
	src := ingest.LineSource{Cluster: "bench", Fixed: true}
	decodeAll := func(b *testing.B) []store.Row {
		b.Helper()
		rows := make([]store.Row, 0, n)
		var batch ingest.Batch
		sc := bufio.NewScanner(bytes.NewReader(log.Bytes()))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			batch.Rows, batch.Rejects = batch.Rows[:0], batch.Rejects[:0]
			if _, err := ingest.DecodeImportLine(src, sc.Bytes(), &batch); err != nil {
				b.Fatal(err)
			}
			if len(batch.Rejects) > 0 {
				b.Fatalf("rejected: %+v", batch.Rejects)
			}
			rows = append(rows, batch.Rows...)
		}
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
		return rows
	}

	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		var rows []store.Row
		start := cpuTime()
		for b.Loop() {
			rows = decodeAll(b)
		}
		reportCost(b, len(rows), cpuTime()-start)
	})

	ctx := context.Background()
	st := storetest.Open(b)
	exec := func(b *testing.B, sql string) {
		b.Helper()
		if err := st.Exec(ctx, sql, nil); err != nil {
			b.Fatal(err)
		}
	}
	rows := decodeAll(b)
	raws := make([][]byte, len(rows))
	residuals := make([][]byte, len(rows))
	for i := range rows {
		raws[i] = rows[i].Raw
		residuals[i] = residual.Split(rows[i].Raw, &rows[i])
	}
	const batch = 50000
	mergeBase := 5 // the engine's default merge_selector_base

	// run stores every row once into emptied tables, with the rollup and
	// merges as asked, through store(part) for each batch, and reports the
	// cost. prepare sets each row's Raw and Residual first.
	run := func(b *testing.B, rollup, merges bool, prepare func(i int), store func([]store.Row) error) {
		b.ReportAllocs()
		var cpu time.Duration
		for b.Loop() {
			b.StopTimer()
			exec(b, "TRUNCATE TABLE audit_events")
			exec(b, "TRUNCATE TABLE audit_event_counts")
			exec(b, "ALTER TABLE audit_events MODIFY SETTING merge_selector_base = "+strconv.Itoa(mergeBase))
			if !rollup {
				exec(b, "DETACH TABLE audit_event_counts_mv")
			}
			if !merges {
				exec(b, "SYSTEM STOP MERGES audit_events")
			}
			for i := range rows {
				prepare(i)
			}
			b.StartTimer()
			c := cpuTime()
			for i := 0; i < len(rows); i += batch {
				if err := store(rows[i:min(i+batch, len(rows))]); err != nil {
					b.Fatal(err)
				}
			}
			waitMerges(b, st)
			cpu += cpuTime() - c
			b.StopTimer()
			if !rollup {
				exec(b, "ATTACH TABLE audit_event_counts_mv")
			}
			if !merges {
				exec(b, "SYSTEM START MERGES audit_events")
			}
			b.StartTimer()
		}
		reportCost(b, len(rows), cpu)
	}
	asReceived := func(i int) { rows[i].Raw, rows[i].Residual = raws[i], nil }
	asStored := func(i int) { rows[i].Raw, rows[i].Residual = nil, residuals[i] }
	columnsOnly := func(i int) { rows[i].Raw, rows[i].Residual = nil, nil }
	w := ingest.NewWriter(st, ingest.WriterConfig{MaxRows: batch})
	writer := func(part []store.Row) error {
		_, err := w.Write(ctx, part)
		return err
	}
	// insert is the writer's insert alone: two concurrent Inserts of half
	// a batch, the rows already in their stored form.
	insert := func(part []store.Row) error {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		half := (len(part) + 1) / 2
		for k, p := range [][]store.Row{part[:half], part[half:]} {
			wg.Go(func() { errs[k] = st.Insert(ctx, p) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}

	// One batch first, untimed: the engine's first insert into a table
	// starts what later ones reuse (thread pools, caches).
	for i := range min(batch, len(rows)) {
		asStored(i)
	}
	if err := insert(rows[:min(batch, len(rows))]); err != nil {
		b.Fatal(err)
	}
	waitMerges(b, st)

	b.Run("writer", func(b *testing.B) { run(b, true, true, asReceived, writer) })
	b.Run("engine", func(b *testing.B) { run(b, true, true, asStored, insert) })
	b.Run("engine-no-residual", func(b *testing.B) { run(b, true, true, columnsOnly, insert) })
	b.Run("engine-no-rollup", func(b *testing.B) { run(b, false, true, asStored, insert) })
	b.Run("engine-no-merges", func(b *testing.B) { run(b, true, false, asStored, insert) })
	b.Run("engine-floor", func(b *testing.B) { run(b, false, false, columnsOnly, insert) })
	// Wider merges: the merge selector waits for about 20 parts of a size
	// instead of 5, so each event is rewritten fewer times (and more parts
	// stand between merges).
	mergeBase = 20
	b.Run("engine-merge-base-20", func(b *testing.B) { run(b, true, true, asStored, insert) })
}

// reportCost reports events/s of wall time and µs of CPU per event, for
// b.N passes over events that spent cpu in all.
func reportCost(b *testing.B, events int, cpu time.Duration) {
	total := float64(events * b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/total, "us-cpu/event")
	b.ReportMetric(0, "ns/op")
}

// cpuTime is the process's CPU time so far, every thread's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitMerges returns when the engine runs no merge.
func waitMerges(b *testing.B, st store.Store) {
	b.Helper()
	for {
		busy := false
		err := store.Each(context.Background(), st, "SELECT count() AS n FROM system.merges", nil, func(n uint64) error {
			busy = n != 0
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
