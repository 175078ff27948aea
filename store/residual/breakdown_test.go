package residual_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/auditgen"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// TestResidualBreakdown logs which members the residuals of the real
// apiserver's events and of generated events are made of
// (go test -run Breakdown -v).
func TestResidualBreakdown(t *testing.T) {
	report := func(name string, lines [][]byte, decode func([]byte) store.Row) {
		by := map[string]int{}
		n := 0
		for _, raw := range lines {
			row := decode(raw)
			residual.OpBytes(residual.Split(raw, &row), by)
			n++
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return by[keys[i]] > by[keys[j]] })
		var b bytes.Buffer
		for _, k := range keys[:min(len(keys), 15)] {
			fmt.Fprintf(&b, "\n  %-50s %7.1f B/event", k, float64(by[k])/float64(n))
		}
		t.Logf("%s (%d events):%s", name, n, b.String())
	}
	files, _ := filepath.Glob("../../deploy/e2e/fixtures/*.log")
	var lines [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for l := range bytes.Lines(data) {
			if l = bytes.TrimSpace(l); len(l) > 0 {
				lines = append(lines, l)
			}
		}
	}
	report("fixtures", lines, func(raw []byte) store.Row { return decodeRow(t, raw) })
	var log bytes.Buffer
	if err := auditgen.New(3, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)).WriteLog(&log, 5000); err != nil {
		t.Fatal(err)
	}
	report("generated", bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")), func(raw []byte) store.Row { return decodeRow(t, raw) })
}
