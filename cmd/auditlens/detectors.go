package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/config"
	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/store"
)

// detectFlags are serve's flags for continuous detection.
type detectFlags struct {
	enabled  bool
	interval time.Duration
	window   time.Duration
}

func (d *detectFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.enabled, "detect", true, "evaluate the detectors continuously over sliding windows of stored events (--detect=false turns it off)")
	fs.DurationVar(&d.interval, "detect-interval", time.Minute, "time between two detector evaluations")
	fs.DurationVar(&d.window, "detect-window", time.Hour, "length of the window each evaluation reads, ending now; longer than --detect-interval so windows overlap")
}

// startDetectors starts serve's continuous detector evaluation over st.
// stop cancels it and waits until it has ended; call it before closing st.
func startDetectors(st store.Store, df detectFlags, params detectors.Config, log *slog.Logger, reg prometheus.Registerer) (stop func(), err error) {
	if !df.enabled {
		log.Info("detectors off (--detect=false)")
		return func() {}, nil
	}
	repo := detect.NewRepository(st, nil)
	r, err := detect.NewRunner(st, repo, detect.RunnerConfig{
		Detectors: params.Detectors(), Interval: df.interval, Window: df.window, Logger: log, Metrics: detect.NewMetrics(reg), State: repo,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx) // returns ctx's error; evaluation errors are logged
	}()
	return func() { cancel(); <-done }, nil
}

// detectOnce evaluates the detectors (all, or those named) with params
// over w and stores their findings.
func detectOnce(ctx context.Context, st store.Store, w detect.Window, names []string, params detectors.Config, log *slog.Logger) (detect.Result, error) {
	ds, err := selectDetectors(params, names)
	if err != nil {
		return detect.Result{}, err
	}
	repo := detect.NewRepository(st, nil)
	r, err := detect.NewRunner(st, repo, detect.RunnerConfig{Detectors: ds, Logger: log, State: repo, Parallel: runtime.GOMAXPROCS(0)})
	if err != nil {
		return detect.Result{}, err
	}
	return r.RunOnce(ctx, w)
}

// selectDetectors returns the detectors named, or all when names is
// empty, with params.
func selectDetectors(params detectors.Config, names []string) ([]detect.Detector, error) {
	all := params.Detectors()
	if len(names) == 0 {
		return all, nil
	}
	var out []detect.Detector
	var known []string
	for _, d := range all {
		known = append(known, d.Name())
	}
	for _, n := range names {
		found := false
		for _, d := range all {
			if d.Name() == n {
				out = append(out, d)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: unknown detector %q: want %s", errUsage, n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// checkFormat validates a --format value.
func checkFormat(format string) error {
	for _, f := range detect.Formats {
		if f == format {
			return nil
		}
	}
	return fmt.Errorf("%w: --format %q: want %s", errUsage, format, strings.Join(detect.Formats, ", "))
}

// failOnFindings returns errFindings when a finding is a warning or worse.
func failOnFindings(fs []detect.Finding) error {
	for _, f := range fs {
		if f.Severity.AtLeast(detect.Warning) {
			return errFindings
		}
	}
	return nil
}

// printFindingsSummary writes one line per finding, for commands whose
// main output is something else (import).
func printFindingsSummary(w io.Writer, res detect.Result, err error) {
	if err != nil {
		fmt.Fprintf(w, "detectors: %v\n", err)
		if len(res.Findings) == 0 {
			return
		}
	}
	noun := "findings"
	if len(res.Findings) == 1 {
		noun = "finding"
	}
	fmt.Fprintf(w, "detectors: %d %s (%d new, %d updated) over %s\n", len(res.Findings), noun, res.New, res.Updated, res.Window)
	const shown = 20
	for i, f := range res.Findings {
		if i == shown {
			fmt.Fprintf(w, "  … and %d more (auditlens detect, or GET /api/v1/findings)\n", len(res.Findings)-shown)
			break
		}
		fmt.Fprintf(w, "  %-8s %-19s %s [%s]\n", strings.ToUpper(string(f.Severity)), f.Detector, f.Title, f.ID)
	}
}

// splitList splits a comma-separated flag value.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

var errNoEvents = errors.New("no audit events")

// loadConfig reads --config (no file: every default) and logs what in it
// still works but should change.
func loadConfig(path string, log *slog.Logger) (config.File, error) {
	if path == "" {
		return config.File{}, nil
	}
	f, warnings, err := config.Load(path)
	if err != nil {
		return config.File{}, fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	for _, w := range warnings {
		log.Warn("--config: " + w)
	}
	return f, nil
}

// configFlag is --config of the commands that run detectors once (scan,
// detect, import): they read its detectors section.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "configuration file (YAML): its detectors section sets detector parameters (see docs/configuration.md)")
}
