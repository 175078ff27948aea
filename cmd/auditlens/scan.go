package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
)

// loadScan loads the files into a throwaway store under dir. Logs of
// audit.k8s.io/v1 Events are read by the engine's own JSON parser into a
// Memory table (ingest.EngineLoad), or into a table on disk when the logs
// hold more than spillAbove bytes; anything it cannot read as the Go
// decoder would (cloud envelopes, EventLists, old versions, a malformed
// line) goes through the Go decoder into the durable schema, as import
// does, whose rejects say what is wrong.
func loadScan(ctx context.Context, dir string, files []string, stdin io.Reader, cluster string, clusterSet bool, chdbLib string, engine bool, spillAbove int64, onFile func(i, n int, path string), log *slog.Logger) (store.Store, ingest.ImportStats, error) {
	open := func(sub string) (store.Store, error) {
		return store.Open(ctx, store.ChdbURL(filepath.Join(dir, sub)), store.Options{ChdbLib: chdbLib, Logger: log})
	}
	if engine {
		st, stats, err := engineLoad(ctx, open, files, cluster, spillAbove, onFile)
		if err == nil || !errors.Is(err, ingest.ErrNotEngineReadable) {
			return st, stats, err
		}
		log.Info("reading the logs with the Go decoder", "why", err)
	}
	st, err := open("decoded")
	if err != nil {
		return nil, ingest.ImportStats{}, err
	}
	if err := migrate(ctx, st); err != nil {
		st.Close()
		return nil, ingest.ImportStats{}, err
	}
	stats, err := ingest.Import(ctx, ingest.NewWriter(st, ingest.WriterConfig{ColumnsOnly: true, Logger: log}), files,
		ingest.ImportConfig{Cluster: cluster, ClusterFromEnvelope: !clusterSet, Stdin: stdin})
	return st, stats, err
}

// migrate creates the schema in a scan's store.
func migrate(ctx context.Context, st store.Store) error {
	if _, err := migrations.Apply(ctx, st, migrations.Config{}); err != nil {
		return fmt.Errorf("creating the schema: %w", err)
	}
	return nil
}

// engineLoad is loadScan's engine reader: a store of its own, closed when
// the engine cannot read the logs. The engine reads into a table of its
// own (store.ScanEvents) while the schema is created beside it, and that
// table then becomes audit_events.
func engineLoad(ctx context.Context, open func(string) (store.Store, error), files []string, cluster string, spillAbove int64, onFile func(i, n int, path string)) (store.Store, ingest.ImportStats, error) {
	st, err := open("engine")
	if err != nil {
		return nil, ingest.ImportStats{}, err
	}
	fail := func(stats ingest.ImportStats, err error) (store.Store, ingest.ImportStats, error) {
		if cerr := st.Close(); cerr != nil {
			return nil, stats, cerr
		}
		return nil, stats, err
	}
	onDisk := ingest.LogBytes(files) > spillAbove
	if err := store.CreateScanEvents(ctx, st, onDisk); err != nil {
		return fail(ingest.ImportStats{}, err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- migrate(ctx, st) }()
	stats, err := ingest.EngineLoad(ctx, st, files, cluster, onFile)
	if merr := <-migrated; err == nil {
		err = merr
	}
	if err == nil {
		err = store.UseScanEvents(ctx, st, onDisk)
	}
	if err != nil {
		return fail(stats, err)
	}
	return st, stats, nil
}

// scanProgress says, on a terminal, which file the engine is reading: a
// large scan reads for a minute or more before it prints anything else.
func scanProgress(stderr io.Writer) func(i, n int, path string) {
	if !isTerminal(stderr) {
		return nil
	}
	return func(i, n int, path string) {
		fmt.Fprintf(stderr, "\rscan: reading file %d of %d: %s\033[K", i+1, n, filepath.Base(path))
		if i+1 == n {
			fmt.Fprint(stderr, "\n")
		}
	}
}

// runScan answers "is my cluster sick?" from audit log files alone: it
// imports them into a throwaway embedded store, runs every detector over
// the whole span and prints the findings. Exit status 1 when a finding is
// a warning or worse, 0 when clean.
func runScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("scan", "[--format text|json|markdown] FILE|DIR|-...", stderr)
	format := fs.String("format", "text", "output: text, json (an array of findings) or markdown")
	cluster := fs.String("cluster", "scan", "cluster name the findings carry; set, it overrides the one a cloud envelope names (AKS resourceId, EKS logGroup, GKE cluster_name)")
	chdbLib := fs.String("chdb-lib", "", "path to libchdb.so (default: $CHDB_LIB_PATH, the cache filled by 'make chdb', /usr/local/lib)")
	tmp := fs.String("tmp", "", "directory for the throwaway store (default: the system's temporary directory)")
	reader := fs.String("reader", "auto", "auto: the engine's JSON parser for logs of audit.k8s.io/v1 Events, the Go decoder for anything else; decoder: the Go decoder for everything, as import does")
	spillAbove := fs.Int64("spill-above", 2<<30, "bytes of log (gzip counted 10 times its size) above which the events go to a table on disk under --tmp rather than in memory")
	configFile := configFlag(fs)
	logLevel := logLevelFlag(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: name at least one audit log file or directory (- for standard input)", errUsage)
	}
	if !ingest.ValidName(*cluster) {
		return fmt.Errorf("%w: --cluster %q must be %s", errUsage, *cluster, ingest.NameRule)
	}
	clusterSet := false
	fs.Visit(func(f *flag.Flag) { clusterSet = clusterSet || f.Name == "cluster" })
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *reader != "auto" && *reader != "decoder" {
		return fmt.Errorf("%w: --reader %q: want auto or decoder", errUsage, *reader)
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
	dir, err := os.MkdirTemp(*tmp, "auditlens-scan-")
	if err != nil {
		return fmt.Errorf("creating the throwaway store: %w", err)
	}
	defer os.RemoveAll(dir) // after the store is closed: defers run last first
	st, stats, err := loadScan(ctx, dir, files, stdin, *cluster, clusterSet, *chdbLib, *reader == "auto", *spillAbove, scanProgress(stderr), log)
	if st != nil {
		defer st.Close()
	}
	// The summary goes to stderr: stdout holds only the findings.
	printImportSummary(stderr, stats)
	if err != nil {
		return err
	}
	if stats.Events == 0 {
		return fmt.Errorf("%w in %d files: nothing to scan", errNoEvents, stats.Files)
	}
	start := time.Now()
	w := detect.Window{Since: stats.First, Until: stats.Last.Add(time.Microsecond), Clusters: stats.Clusters}
	res, err := detectOnce(ctx, st, w, nil, params.Detectors, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "detectors ran over %s in %s\n", w, time.Since(start).Round(time.Millisecond))
	if err := detect.Render(stdout, *format, res.Findings); err != nil {
		return err
	}
	return failOnFindings(res.Findings)
}
