package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/query"
)

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("query", "--store URL [filters] [--jq PROGRAM]", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	// Each filter flag maps to the HTTP API parameter of the same name, so
	// the CLI and /api/v1/events parse filters with one function.
	filters := []struct{ name, help string }{
		{"since", "start: RFC3339 time or a duration ago, e.g. 2h"},
		{"until", "end: RFC3339 time or a duration ago"},
		{"cluster", "cluster name (comma-separated for several)"},
		{"apiserver", "apiserver name, on a control plane that runs several (comma-separated for several)"},
		{"verb", "verb, e.g. watch,list"},
		{"resource", "resource, e.g. services"},
		{"namespace", "namespace"},
		{"name", "object name"},
		{"user", "user name (a trailing * matches a prefix)"},
		{"user-agent", "user agent (a trailing * matches a prefix)"},
		{"code", "response code, e.g. 409"},
		{"stage", "stage, e.g. ResponseComplete"},
		{"level", "audit level"},
		{"order", "asc (default) or desc"},
	}
	vals := make([]*string, len(filters))
	for i, f := range filters {
		vals[i] = fs.String(f.name, "", f.help)
	}
	jq := fs.String("jq", "", "jq program run over each matching event")
	limit := fs.Int("limit", 1000, fmt.Sprintf("most events to read (1 to %d; --all for every one)", query.MaxLimit))
	all := fs.Bool("all", false, "stream every matching event, however many (an export: e.g. a day with --since and --until)")
	jqTimeout := fs.Duration("jq-timeout", 60*time.Second, "longest the jq program may run")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	v := url.Values{}
	for i, f := range filters {
		if *vals[i] != "" {
			v.Set(apiName(f.name), *vals[i])
		}
	}
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
	stats, err := query.Events(ctx, st, f, prog, query.Limits{Timeout: *jqTimeout}, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err == nil && stats.Truncated {
		fmt.Fprintf(stderr, "auditlens query: stopped after %d events; more match (narrow the filters or raise --limit)\n", stats.Matched)
	}
	return err
}

func apiName(flagName string) string {
	if flagName == "user-agent" {
		return "user_agent"
	}
	return flagName
}
