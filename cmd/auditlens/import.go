package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

// importHeapLimit is the Go heap's soft limit for import and scan unless
// GOMEMLIMIT says otherwise. An import holds about two batches of decoded
// events (~270 MB live at 50k rows), and the collector's default lets the
// heap grow to twice that before it runs; the embedded engine needs about
// as much again beside it. Measured on the 1M-event log: peak RSS 1.22 GiB
// without a limit, 1.13 GiB with this one, and the collector's CPU did not
// grow (19 cycles, 3.3 s; 25 cycles, 2.5 s); a 384 MiB limit took 61 cycles
// and 10 s of CPU.
const importHeapLimit = 512 << 20

// limitImportHeap sets importHeapLimit for the import and scan commands
// unless GOMEMLIMIT is set. main calls it, not the commands: a test binary
// that runs them in process keeps its own heap.
func limitImportHeap(command string) {
	if (command == "import" || command == "scan") && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(importHeapLimit)
	}
}

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", "--store URL [--cluster NAME] [--apiserver NAME] [flags] FILE|DIR|-...", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	cluster := fs.String("cluster", "", "cluster name to tag the events with; overrides the one a cloud envelope names (AKS resourceId, EKS logGroup, GKE cluster_name). Required for the apiserver's own log format")
	apiserver := fs.String("apiserver", "", "name of the kube-apiserver that wrote the files, on a control plane that runs several (each writes its own log); overrides the one a cloud envelope names (AKS pod, EKS logStream)")
	batch := fs.Int("batch-rows", ingest.DefaultBatchRows, "rows per insert (larger inserts mean fewer parts for the engine to merge)")
	progress := fs.String("progress", "auto", "progress bar: auto (on a terminal), always or never")
	logLevel := logLevelFlag(fs, "warn")
	decodeOnly := fs.Bool("decode-only", false, "read and decode without storing (a baseline for benchmarks)")
	noDetect := fs.Bool("no-detect", false, "do not run the detectors over the imported span")
	configFile := configFlag(fs)
	var rf redactFlags
	rf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cluster != "" && !ingest.ValidName(*cluster) {
		return fmt.Errorf("%w: --cluster %q must be %s", errUsage, *cluster, ingest.NameRule)
	}
	if *apiserver != "" && !ingest.ValidName(*apiserver) {
		return fmt.Errorf("%w: --apiserver %q must be %s", errUsage, *apiserver, ingest.NameRule)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: name at least one audit log file or directory (- for standard input)", errUsage)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	params, err := loadConfig(*configFile, log)
	if err != nil {
		return err
	}
	files, err := ingest.ExpandPaths(fs.Args())
	if err != nil {
		return err
	}
	stdin, err := stdinFor(files)
	if err != nil {
		return err
	}
	var w *ingest.Writer
	var st store.Store
	if !*decodeOnly {
		st, err = sf.open(ctx, log)
		if err != nil {
			return err
		}
		defer st.Close()
		w = ingest.NewWriter(st, ingest.WriterConfig{MaxRows: *batch, Logger: log})
	}

	redactor, err := rf.redactor()
	if err != nil {
		return err
	}
	cfg := ingest.ImportConfig{Cluster: *cluster, ClusterFromEnvelope: *cluster == "", APIServer: *apiserver, BatchRows: *batch, Stdin: stdin, Redactor: redactor}
	var bar *progressBar
	if *progress == "always" || (*progress == "auto" && isTerminal(stderr)) {
		bar = &progressBar{w: stderr}
		cfg.OnProgress = bar.update
	}
	stats, err := ingest.Import(ctx, w, files, cfg)
	if bar != nil {
		bar.finish()
	}
	printImportSummary(stdout, stats)
	if err == nil && st != nil && !*noDetect && stats.Events > 0 {
		// The detectors over what was imported (clusters and span).
		res, derr := detectOnce(ctx, st, detect.Window{Since: stats.First, Until: stats.Last.Add(time.Microsecond),
			Clusters: stats.Clusters}, nil, params.Detectors, log)
		printFindingsSummary(stdout, res, derr)
		err = derr
	}
	if err == nil && stats.NoCluster > 0 {
		// What else was imported is stored and scanned; these lines wait
		// for a cluster name.
		err = fmt.Errorf("%w: %d lines or records name no cluster: pass --cluster NAME (required for the apiserver's own log format)", errUsage, stats.NoCluster)
	}
	return err
}

// stdinFor takes standard input away from the embedded engine (takeStdin)
// when one of the files to import is "-", before the store is opened.
func stdinFor(files []string) (io.Reader, error) {
	for _, f := range files {
		if f == ingest.Stdin {
			return takeStdin()
		}
	}
	return nil, nil
}

func printImportSummary(w io.Writer, s ingest.ImportStats) {
	fmt.Fprintf(w, "imported %d files (%s): %d events, %d stored, %d duplicates, %d rejected in %s (%.0f events/s)\n",
		s.Files, humanBytes(s.Bytes), s.Events, s.Stored, s.Duplicates, s.Rejected,
		s.Elapsed.Round(time.Millisecond), s.EventsPerSecond())
	if len(s.Kinds) > 0 {
		kinds := make([]string, 0, len(s.Kinds))
		for k := range s.Kinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = fmt.Sprintf("%s %d", k, s.Kinds[k])
		}
		fmt.Fprintf(w, "events by format: %s; clusters: %s\n", strings.Join(parts, ", "), strings.Join(s.Clusters, ", "))
	}
	if s.Redacted > 0 {
		fmt.Fprintf(w, "redacted %d events (--redact, --redact-defaults): annotation %s names what was cut\n", s.Redacted, ingest.RedactedAnnotation)
	}
	if s.Skipped > 0 {
		fmt.Fprintf(w, "skipped %d envelope records that hold no audit event (other log categories or streams, control messages)\n", s.Skipped)
	}
	if !s.First.IsZero() {
		fmt.Fprintf(w, "events span %s to %s\n", s.First.Format(time.RFC3339), s.Last.Format(time.RFC3339))
	}
	for _, r := range s.RejectSamples {
		fmt.Fprintf(w, "rejected: %s\n", r)
	}
	if s.Rejected > int64(len(s.RejectSamples)) {
		fmt.Fprintf(w, "… and %d more rejected\n", s.Rejected-int64(len(s.RejectSamples)))
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// progressBar draws a one-line progress bar on a terminal.
type progressBar struct {
	w    io.Writer
	last ingest.ImportProgress
}

func (b *progressBar) update(p ingest.ImportProgress) {
	b.last = p
	const width = 30
	frac := 0.0
	if p.BytesTotal > 0 {
		frac = min(float64(p.BytesRead)/float64(p.BytesTotal), 1)
	}
	filled := int(frac * width)
	bar := make([]byte, width)
	for i := range bar {
		switch {
		case i < filled:
			bar[i] = '='
		case i == filled:
			bar[i] = '>'
		default:
			bar[i] = ' '
		}
	}
	rate := 0.0
	if p.Elapsed > 0 {
		rate = float64(p.Events) / p.Elapsed.Seconds()
	}
	eta := ""
	if frac > 0.01 && frac < 1 {
		left := time.Duration(float64(p.Elapsed) * (1 - frac) / frac)
		eta = " ETA " + left.Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r[%s] %3.0f%% %s/%s %d events %.0f ev/s%s   ", bar, frac*100,
		humanBytes(p.BytesRead), humanBytes(p.BytesTotal), p.Events, rate, eta)
}

func (b *progressBar) finish() { fmt.Fprintln(b.w) }
