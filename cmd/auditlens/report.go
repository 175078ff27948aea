package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/report"
	"github.com/auditlens/auditlens/store"
)

// runReport builds one report over the window that ends now (or --until),
// stores it in the reports table and writes it to stdout, or to one file
// per format in --out.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", "--store URL [--window 24h] [--format html|md|json] [--out DIR]", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	name := fs.String("name", "report", "report name: changes are computed against the previous stored report of this name")
	window := fs.Duration("window", 24*time.Hour, "how far back the report looks (1h to 744h)")
	until := fs.String("until", "", "end of the window, RFC3339 (default now; truncated to the minute)")
	format := fs.String("format", "md", "html, md or json; with --out, a comma-separated list (one file each)")
	out := fs.String("out", "", "directory to write <name>-<window end>.<ext> files into (default stdout)")
	clusters := fs.String("cluster", "", "only these clusters (comma-separated; default all)")
	detectors := fs.String("detector", "", "only findings of these detectors (comma-separated; default all)")
	severity := fs.String("severity", "", "only findings at least this severe: info, warning or critical")
	save := fs.Bool("save", true, "store the report in the reports table (the next report compares with it)")
	logLevel := logLevelFlag(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	formats := splitList(*format)
	if len(formats) == 0 || (*out == "" && len(formats) > 1) {
		return fmt.Errorf("%w: --format %q: want one of html, md, json (several, comma-separated, only with --out)", errUsage, *format)
	}
	for _, f := range formats {
		if !slices.Contains(report.Formats, f) {
			return fmt.Errorf("%w: --format %q: want html, md or json", errUsage, f)
		}
	}
	now := time.Now
	if *until != "" {
		t, err := time.Parse(time.RFC3339, *until)
		if err != nil {
			return fmt.Errorf("%w: --until %q: want an RFC3339 time", errUsage, *until)
		}
		now = func() time.Time { return t }
	}
	cfg := report.Config{Name: *name, Window: *window, Clusters: splitList(*clusters), Detectors: splitList(*detectors), Now: now}
	if *severity != "" {
		sev, err := detect.ParseSeverity(*severity)
		if err != nil {
			return fmt.Errorf("%w: --severity: %v", errUsage, err)
		}
		cfg.MinSeverity = sev
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := report.Build(ctx, st, detect.NewRepository(st, nil), cfg)
	if err != nil {
		return err
	}
	if *save {
		if err := report.Save(ctx, st, r); err != nil {
			return err
		}
	}
	if *out == "" {
		return report.Render(stdout, formats[0], r)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("creating --out directory: %w", err)
	}
	for _, f := range formats {
		var buf bytes.Buffer
		if err := report.Render(&buf, f, r); err != nil {
			return err
		}
		path := filepath.Join(*out, report.FileName(r, f))
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing report: %w", err)
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}

// startReports runs the scheduled reports in the background; the returned
// function stops them and waits (call it before closing the store).
func startReports(st store.Store, specs []report.Spec, log *slog.Logger, reg prometheus.Registerer) (func(), error) {
	if len(specs) == 0 {
		return func() {}, nil
	}
	sch, err := report.NewScheduler(report.SchedulerConfig{
		Store: st, Findings: detect.NewRepository(st, nil), Reports: specs, Logger: log,
		Metrics: report.NewMetrics(reg),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sch.Run(ctx); err != nil {
			log.Error("report scheduler stopped", "err", err)
		}
	}()
	for _, s := range specs {
		log.Info("scheduled report", "report", s.Name, "schedule", s.Schedule, "time_zone", s.TimeZone)
	}
	return func() { cancel(); <-done }, nil
}
