package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/query"
)

const exportHelp = `Writes every event the filters match, in time order, however many: the
events are counted per minute first and read in time windows of about
50,000, one query each, so neither auditlens nor the engine holds them all.

  ndjson   one stored event JSON per line, exactly what query --all prints
           (any store)
  parquet  one Parquet file with the columns of audit_events, one row per
           event: cluster, apiserver, ts and received_at (UTC microsecond
           timestamps), audit_id, stage, level, verb, request_uri, user,
           user_groups (list), ..., code, watch, the request URI's parameters,
           annotations (map) and raw, the whole event JSON, what query --all
           prints (see docs/cli.md, Export). Any store.

--format defaults to parquet for an -o file ending in .parquet, else ndjson.
Without -o (or with -o -) the export goes to standard output; parquet refuses
a terminal. An -o file appears only when the export is complete.
`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", "--store URL [filters] [--format ndjson|parquet] [-o FILE]", stderr)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(stderr, "\n"+exportHelp)
	}
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	var ff filterFlags
	ff.register(fs)
	format := fs.String("format", "", "ndjson or parquet (default: parquet when -o ends in .parquet, else ndjson)")
	outPath := fs.String("o", "", "output file (none, or -: standard output)")
	progress := fs.String("progress", "auto", "progress line on stderr: auto (when stderr is a terminal), always or never")
	logLevel := logLevelFlag(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	toStdout := *outPath == "" || *outPath == "-"
	fmtName := *format
	if fmtName == "" {
		fmtName = "ndjson"
		if !toStdout && strings.EqualFold(filepath.Ext(*outPath), ".parquet") {
			fmtName = "parquet"
		}
	}
	ef, err := query.ParseExportFormat(fmtName)
	if err != nil {
		return fmt.Errorf("%w: --format: %v", errUsage, err)
	}
	if ef == query.Parquet && toStdout && isTerminal(stdout) {
		return fmt.Errorf("%w: Parquet is binary: give -o FILE or redirect standard output", errUsage)
	}
	switch *progress {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("%w: --progress %q: want auto, always or never", errUsage, *progress)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}

	// The embedded engine reads a piped standard input as the data of an
	// INSERT, which fails the schema migration (stdin_linux.go); export
	// reads none.
	in, err := takeStdin()
	if err != nil {
		return err
	}
	if in != os.Stdin {
		if c, ok := in.(io.Closer); ok {
			c.Close()
		}
	}

	// Open the output before the store, so that a path that cannot be
	// written fails at once.
	var out *outputFile
	var w io.Writer = stdout
	if !toStdout {
		if out, err = createOutput(*outPath); err != nil {
			return err
		}
		defer out.abort()
		w = out.f
	}
	st, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()

	// No buffer of ours: Events writes NDJSON in 32 KiB blocks, the engine
	// hands over Parquet in 256 KiB reads.
	cw := &countingWriter{w: w}
	var meter *exportMeter
	if *progress == "always" || (*progress == "auto" && isTerminal(stderr)) {
		meter = startExportMeter(stderr, ef, cw, time.Now)
	}
	if ef == query.Parquet && os.Getenv("GOGC") == "" {
		// A Parquet export holds two windows of rows (~115 MB live each
		// on 50k events) and a row group being encoded: collecting at
		// 50 % growth rather than 100 % took the peak from 0.90 to 0.79
		// GiB on 800k events, for ~5 % more time (farm-bench -n 4).
		debug.SetGCPercent(50)
	}
	_, err = query.Export(ctx, st, f, ef, cw, cw.sent.Store)
	if err == nil && out != nil {
		err = out.commit()
	}
	if meter != nil {
		meter.stop(err == nil)
	}
	return err
}

// outputFile is an export's -o file: written under a temporary name in
// the same directory and renamed when complete, so that a failed or
// interrupted export leaves no file that looks whole. A path that is
// there and is not a regular file (/dev/null, a named pipe, a terminal)
// is written in place, as a shell redirect would: renaming over it would
// replace the device with a file, which for /dev/null breaks every
// program on the machine that reads it.
type outputFile struct {
	f      *os.File
	path   string
	direct bool // written in place: nothing to sync, rename or remove
	done   bool
}

func createOutput(path string) (*outputFile, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%w: -o %s is a directory: name a file", errUsage, path)
	} else if err == nil && !fi.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s for the export: %w", path, err)
		}
		return &outputFile{f: f, path: path, direct: true}, nil
	}
	// Not os.CreateTemp, whose 0600 would outlive the rename: the file
	// gets the mode a shell redirect would give it (0666 less the umask).
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.partial-%d-%d", base, os.Getpid(), time.Now().UnixNano()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, fmt.Errorf("creating the export file %s: %w", path, err)
	}
	return &outputFile{f: f, path: path}, nil
}

// commit makes the file durable and gives it its name.
func (o *outputFile) commit() error {
	if o.direct {
		o.done = true
		if err := o.f.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", o.path, err)
		}
		return nil
	}
	if err := o.f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	if err := o.f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	if err := os.Rename(o.f.Name(), o.path); err != nil {
		return fmt.Errorf("naming the export file %s: %w", o.path, err)
	}
	o.done = true
	return nil
}

// abort removes the temporary file unless commit succeeded.
func (o *outputFile) abort() {
	if o.done {
		return
	}
	o.f.Close()
	if !o.direct {
		os.Remove(o.f.Name())
	}
}

// countingWriter counts the bytes and newlines written through it, for the
// progress line: NDJSON has one event per line. sent is what Export says
// of a Parquet export: the events written so far, a time window at a time.
type countingWriter struct {
	w                  io.Writer
	bytes, lines, sent atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.bytes.Add(int64(n))
	c.lines.Add(int64(bytes.Count(p[:n], []byte{'\n'})))
	return n, err
}

// exportMeter redraws a one-line progress report on stderr twice a second:
// events written and their rate for NDJSON; for Parquet the events
// written (a time window at a time) and their rate, and the bytes of the
// file.
type exportMeter struct {
	w     io.Writer
	ef    query.ExportFormat
	cw    *countingWriter
	now   func() time.Time
	start time.Time
	quit  chan struct{}
	wg    sync.WaitGroup
}

func startExportMeter(w io.Writer, ef query.ExportFormat, cw *countingWriter, now func() time.Time) *exportMeter {
	m := &exportMeter{w: w, ef: ef, cw: cw, now: now, start: now(), quit: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.quit:
				return
			case <-t.C:
				m.draw("")
			}
		}
	}()
	return m
}

func (m *exportMeter) draw(end string) {
	el := m.now().Sub(m.start)
	secs := max(el.Seconds(), 1e-3)
	b := m.cw.bytes.Load()
	if m.ef == query.NDJSON {
		n := m.cw.lines.Load()
		fmt.Fprintf(m.w, "\rexport: %d events, %s, %.0f events/s, %s%s   ", n, humanBytes(b), float64(n)/secs,
			el.Round(100*time.Millisecond), end)
		return
	}
	n := m.cw.sent.Load()
	fmt.Fprintf(m.w, "\rexport: %d events, %.0f events/s, %s of Parquet, %s%s   ", n, float64(n)/secs, humanBytes(b),
		el.Round(100*time.Millisecond), end)
}

// stop ends the redraws and leaves the final figures on their line.
func (m *exportMeter) stop(ok bool) {
	close(m.quit)
	m.wg.Wait()
	end := ", done"
	if !ok {
		end = ", failed"
	}
	m.draw(end)
	fmt.Fprintln(m.w)
}
