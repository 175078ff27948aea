package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/auditlens/auditlens/query"
)

// jqWorkerArgs start a jq worker: serve runs the jq programs of API
// queries in one (query.Limits.Worker) so that a program that crashes the
// Go runtime (a stack overflow from deep recursion or nesting) or runs out
// of memory takes down only its worker.
var jqWorkerArgs = []string{"jq-worker"}

// runJQWorker is the hidden jq-worker command: the worker side of
// query.ProcessRunner. It speaks the worker protocol on stdin and stdout
// (see query.ServeWorker); it is not meant to be run by hand.
func runJQWorker(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: jq-worker takes no arguments: its parent sends the program on stdin", errUsage)
	}
	// The worker's life is its parent's business: it ends when its stdin
	// closes, when its parent kills it, or (on Linux) when its parent
	// dies. A SIGTERM to every process of a service (systemd) must not cut
	// short the queries the parent drains as it shuts down.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	return query.ServeWorker(ctx, os.Stdin, stdout)
}
