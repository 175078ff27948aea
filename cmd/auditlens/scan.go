package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
)

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
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
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
	log, err := newLogger(stderr, *logLevel)
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
	st, err := store.Open(ctx, "chdb://"+dir, store.Options{ChdbLib: *chdbLib, Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := migrations.Apply(ctx, st, migrations.Config{}); err != nil {
		return fmt.Errorf("creating the schema: %w", err)
	}

	stats, err := ingest.Import(ctx, ingest.NewWriter(st, ingest.WriterConfig{ColumnsOnly: true, Logger: log}), files, ingest.ImportConfig{Cluster: *cluster, ClusterFromEnvelope: !clusterSet, Stdin: stdin})
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
	res, err := detectOnce(ctx, st, w, nil, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "detectors ran over %s in %s\n", w, time.Since(start).Round(time.Millisecond))
	if err := detect.Render(stdout, *format, res.Findings); err != nil {
		return err
	}
	return failOnFindings(res.Findings)
}
