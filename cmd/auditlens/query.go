package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/query"
)

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("query", "--store URL [filters] [--jq PROGRAM]", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	var ff filterFlags
	ff.register(fs)
	jq := fs.String("jq", "", "jq program run over each matching event")
	limit := fs.Int("limit", 1000, fmt.Sprintf("most events to read (1 to %d; --all for every one)", query.MaxLimit))
	all := fs.Bool("all", false, "stream every matching event, however many (an export: e.g. a day with --since and --until)")
	jqTimeout := fs.Duration("jq-timeout", 60*time.Second, "longest the jq program may run")
	logLevel := logLevelFlag(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	v := ff.values()
	if !*all {
		v.Set("limit", strconv.Itoa(*limit))
	}
	f, err := query.ParseFilter(v, time.Now())
	if err != nil {
		if *limit > query.MaxLimit {
			return fmt.Errorf("%w: %v; --all streams every matching event", errUsage, err)
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	f.All = *all
	var prog *query.JQ
	if *jq != "" {
		if prog, err = query.CompileJQ(*jq); err != nil {
			return err
		}
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
	out := bufio.NewWriterSize(stdout, 64<<10)
	// The user's own program runs in this process (no Limits.Worker, as
	// serve sets for programs from the network): a crash ends only it.
	lim := query.Limits{Timeout: *jqTimeout}
	if *all {
		// Every event, however many, as the flag says: no cap on the
		// lines or bytes written (the API's defaults stop at 1M lines).
		lim.MaxOutputs, lim.MaxOutputBytes = -1, -1
	}
	stats, err := query.Events(ctx, st, f, prog, lim, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err == nil && stats.Truncated {
		fmt.Fprintf(stderr, "auditlens query: stopped after %d events; more match (narrow the filters or raise --limit)\n", stats.Matched)
	}
	return err
}
