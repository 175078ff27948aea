package residual_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// typedMembers are members of an event that the typed columns restore:
// a residual holding one of them means the split stopped relying on its
// column.
var typedMembers = []string{"auditID", "stage", "verb", "requestURI", "level", "user.username", "user.groups",
	"userAgent", "sourceIPs", "objectRef.resource", "objectRef.namespace", "objectRef.name", "objectRef.apiGroup",
	"objectRef.apiVersion", "objectRef.resourceVersion", "responseStatus.code", "annotations"}

// TestResidualBreakdown tells which members the residuals of the real
// apiserver's events and of generated events are made of (logged: go test
// -run Breakdown -v), and holds them to what the typed columns cannot
// restore: no residual stores the whole event or a member a typed column
// holds, and each corpus's mean residual stays under its bound.
func TestResidualBreakdown(t *testing.T) {
	report := func(name string, lines [][]byte, decode func([]byte) store.Row, maxMean float64) {
		by := map[string]int{}
		n := 0
		for _, raw := range lines {
			row := decode(raw)
			residual.OpBytes(residual.Split(raw, &row), by)
			n++
		}
		if n == 0 {
			t.Fatalf("%s: no events", name)
		}
		total := 0
		for k, v := range by {
			total += v
			if k == "verbatim" {
				t.Errorf("%s: %d bytes of residuals store whole events", name, v)
			}
			for _, m := range typedMembers {
				if k == "set "+m || k == "delete "+m {
					t.Errorf("%s: residuals hold %q (%d bytes), which a typed column restores", name, k, v)
				}
			}
		}
		if mean := float64(total) / float64(n); mean > maxMean {
			t.Errorf("%s: residuals are %.1f bytes an event, more than %.0f", name, mean, maxMean)
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
	files, err := filepath.Glob("../../deploy/e2e/fixtures/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("the real apiserver's fixtures: %v, %d files", err, len(files))
	}
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
	report("fixtures", lines, func(raw []byte) store.Row { return decodeRow(t, raw) }, 250)
	var log bytes.Buffer
	if err := auditgen.New(3, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)).WriteLog(&log, 5000); err != nil {
		t.Fatal(err)
	}
	report("generated", bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")), func(raw []byte) store.Row { return decodeRow(t, raw) }, 500)
}
