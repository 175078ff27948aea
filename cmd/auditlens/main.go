// Command auditlens turns the kube-apiserver audit stream into answers: it
// receives audit webhooks and imports audit log files into ClickHouse, and
// answers filter and jq queries over them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	name    string
	summary string // "" hides the command from the usage
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "receive audit webhooks, store events, serve the API", runServe},
	{"import", "load audit log files (plain, .gz, directories, stdin; AKS, EKS and GKE exports) into the store", runImport},
	{"query", "print stored events matching filters, optionally through jq", runQuery},
	{"export", "write every stored event matching filters to NDJSON or Parquet, streaming", runExport},
	{"detect", "run the detectors over stored events and print their findings", runDetect},
	{"report", "build a report of findings, volume, top talkers and feed health over a window", runReport},
	{"scan", "import audit log files into a throwaway store and print what the detectors find", runScan},
	{"migrate", "create or upgrade the ClickHouse schema", runMigrate},
	{"policy", "check that an audit policy lets the detectors see what they read", runPolicy},
	{"gen", "write a realistic synthetic audit log (demo data, benchmarks)", runGen},
	{"webhook-config", "print the kubeconfig for kube-apiserver's --audit-webhook-config-file", runWebhookConfig},
	{"jq-worker", "", runJQWorker}, // hidden: serve starts it to run API jq programs
	{"version", "print the version", func(_ context.Context, _ []string, out, _ io.Writer) error {
		fmt.Fprintln(out, "auditlens", version)
		return nil
	}},
}

func usage(w io.Writer) {
	fmt.Fprint(w, `auditlens: Kubernetes audit events in, answers out.

Usage: auditlens <command> [flags]

Commands:
`)
	for _, c := range commands {
		if c.summary == "" {
			continue // a hidden command
		}
		fmt.Fprintf(w, "  %-15s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Stores (--store):
  chdb:///abs/path, chdb://./rel/path   embedded ClickHouse (chDB), the default
  clickhouse://user:pass@host:9000/db    a ClickHouse server or cluster (>= 25.8)

Run "auditlens <command> -h" for a command's flags.
`)
}

// errUsage marks errors caused by wrong invocation (exit code 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if len(os.Args) > 1 {
		limitImportHeap(os.Args[1])
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "auditlens %s: %v\n", c.name, err)
			return 2
		case errors.Is(err, errFindings):
			return 1
		default:
			fmt.Fprintf(stderr, "auditlens %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "auditlens: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// errFindings is returned by commands whose exit status reports findings.
var errFindings = errors.New("findings reported")

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("auditlens "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: auditlens %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// logLevelFlag registers --log-level on fs with the command's default.
func logLevelFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("log-level", def, "debug, info, warn or error")
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
