package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/ingest"
)

// TestScanReadersAgree: scan's findings are the same whichever way the
// events were read — by the engine's JSON parser into a throwaway table
// (scan's default for plain logs, in memory and on disk) or by the Go
// decoder into the durable schema, as `import` then `detect` over the same
// span do — on every committed recording of a real apiserver and on
// generated scenarios.
func TestScanReadersAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	files, err := filepath.Glob("../../deploy/e2e/fixtures/*.log*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d recordings in deploy/e2e/fixtures, want the committed ones", len(files))
	}
	dir := filepath.Join(t.TempDir(), "generated")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"seed-incident", "incident-drifting", "incident-ha", "heartbeat-loss-seed", "heartbeat-drain-maintenance",
		"relist-herd-kubelets", "relist-loop", "etcd-restore", "future-rv-client", "healthy-controller-manager"} {
		files = append(files, genScenarioLog(t, dir, name))
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			scan := func(args ...string) []byte {
				t.Helper()
				stdout, stderr, code := runCLI(t, append([]string{"scan", "--format", "json", "--log-level", "info", "--tmp", t.TempDir()}, args...)...)
				if code != 0 && code != 1 {
					t.Fatalf("scan %v: exit %d\n%s", args, code, stderr)
				}
				if strings.Contains(stderr, "reading the logs with the Go decoder") {
					t.Fatalf("scan %v did not read %s with the engine:\n%s", args, f, stderr)
				}
				if stdout == "" {
					t.Fatalf("scan %v: no output, exit %d\n%s", args, code, stderr)
				}
				return normalizeFindings(t, stdout)
			}
			inMemory := scan(f)
			onDisk := scan("--spill-above", "0", f)

			store := "chdb://" + filepath.Join(t.TempDir(), "store")
			if _, stderr, code := runCLI(t, "import", "--store", store, "--cluster", "scan", "--progress", "never", f); code != 0 && code != 1 {
				t.Fatalf("import: exit %d\n%s", code, stderr)
			}
			first, last := logSpan(t, f)
			stdout, stderr, code := runCLI(t, "detect", "--store", store, "--format", "json",
				"--since", first.Format(time.RFC3339Nano), "--until", last.Add(time.Microsecond).Format(time.RFC3339Nano))
			if code != 0 {
				t.Fatalf("detect: exit %d\n%s", code, stderr)
			}
			imported := normalizeFindings(t, stdout)
			if !bytes.Equal(inMemory, imported) {
				t.Errorf("scan (engine, in memory) found:\n%s\nimport + detect found:\n%s", inMemory, imported)
			}
			if !bytes.Equal(onDisk, imported) {
				t.Errorf("scan (engine, on disk) found:\n%s\nimport + detect found:\n%s", onDisk, imported)
			}
		})
	}
}

// normalizeFindings re-encodes a JSON array of findings one per line, so
// that two runs compare byte for byte and a difference reads as a line.
func normalizeFindings(t *testing.T, out string) []byte {
	t.Helper()
	var fs []json.RawMessage
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("findings are not a JSON array: %v\n%s", err, out)
	}
	var b bytes.Buffer
	for _, f := range fs {
		if err := json.Compact(&b, f); err != nil {
			t.Fatal(err)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// logSpan returns the earliest and latest time of the events of a log, as
// the importer reads them.
func logSpan(t *testing.T, path string) (first, last time.Time) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var b ingest.Batch
	for sc.Scan() {
		b.Rows = b.Rows[:0]
		if err := ingest.DecodeLine("scan", sc.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Rows {
			if first.IsZero() || r.Time.Before(first) {
				first = r.Time
			}
			if r.Time.After(last) {
				last = r.Time
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return first, last
}
