package residual_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// benchEvents are 1000 generated log lines and their rows.
func benchEvents(b *testing.B) ([][]byte, []store.Row) {
	var log bytes.Buffer
	if err := auditgen.New(8, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)).WriteLog(&log, 1000); err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n"))
	rows := make([]store.Row, len(lines))
	for i, l := range lines {
		r, err := ingest.DecodeEvent("c", l)
		if err != nil {
			b.Fatal(err)
		}
		rows[i] = r
	}
	return lines, rows
}

// BenchmarkSplit is the writer's cost per event (b.N counts batches of
// 1000 generated events).
func BenchmarkSplit(b *testing.B) {
	lines, rows := benchEvents(b)
	var size int64
	for _, l := range lines {
		size += int64(len(l))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for i := range lines {
			buf = residual.AppendSplit(buf, lines[i], &rows[i])
		}
	}
}

// BenchmarkRebuild is the reader's cost per event, beside the bytes of a
// raw event it replaces (b.N counts batches of 1000 generated events).
func BenchmarkRebuild(b *testing.B) {
	lines, rows := benchEvents(b)
	res := make([][]byte, len(lines))
	var size int64
	for i := range lines {
		res[i] = residual.Split(lines[i], &rows[i])
		size += int64(len(lines[i]))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		for i := range rows {
			var err error
			if buf, err = residual.AppendRebuild(buf[:0], &rows[i], res[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
