package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/query"
)

// runDetect evaluates the detectors once over stored events and prints
// the findings; they are stored too, so the findings API shows them.
func runDetect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("detect", "--store URL --since DURATION [--until TIME] [--format text|json|markdown]", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	since := fs.String("since", "1h", "start of the window: a duration before now (15m, 24h, 7d) or an RFC3339 time")
	until := fs.String("until", "", "end of the window: a duration before now or an RFC3339 time (default now)")
	format := fs.String("format", "text", "output: text, json (an array of findings) or markdown")
	clusters := fs.String("cluster", "", "only these clusters (comma-separated; default all)")
	var all []string
	for _, d := range detectors.Default() {
		all = append(all, d.Name())
	}
	only := fs.String("detector", "", "only these detectors (comma-separated; default all: "+strings.Join(all, ", ")+")")
	configFile := configFlag(fs)
	logLevel := logLevelFlag(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	now := time.Now()
	w, err := parseWindow(*since, *until, now)
	if err != nil {
		return err
	}
	w.Clusters = splitList(*clusters)
	names := splitList(*only)
	if _, err := selectDetectors(detectors.Config{}, names); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*configFile, log)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := detectOnce(ctx, st, w, names, cfg.Detectors, log)
	if rerr := detect.Render(stdout, *format, res.Findings); err == nil {
		err = rerr
	}
	return err
}

// parseWindow reads --since and --until as the query API reads since and
// until; until defaults to now.
func parseWindow(since, until string, now time.Time) (detect.Window, error) {
	v := url.Values{"since": {since}}
	if until != "" {
		v.Set("until", until)
	}
	f, err := query.ParseFilter(v, now)
	if err != nil {
		return detect.Window{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	w := detect.Window{Since: f.Since, Until: f.Until}
	if w.Until.IsZero() {
		w.Until = now
	}
	if w.Since.IsZero() {
		return detect.Window{}, fmt.Errorf("%w: --since is required", errUsage)
	}
	if err := w.Validate(); err != nil {
		return detect.Window{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return w, nil
}
