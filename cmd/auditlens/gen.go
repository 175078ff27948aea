package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/auditlens/auditlens/internal/auditgen"
)

// runGen writes a realistic synthetic audit log: demo data for a first look,
// and the corpus of the import benchmark.
func runGen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gen", "[--events N] [--out FILE]", stderr)
	n := fs.Int("events", 100000, "number of events")
	out := fs.String("out", "-", "output file (.gz compresses); - for stdout")
	seed := fs.Int64("seed", 1, "random seed: the same seed gives the same file")
	start := fs.String("start", "2026-01-01T00:00:00Z", "timestamp of the first event (RFC3339)")
	var sc genScenario
	sc.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sc.check(); err != nil {
		return err
	}
	t0, err := time.Parse(time.RFC3339, *start)
	if err != nil {
		return fmt.Errorf("%w: --start: %v", errUsage, err)
	}
	var w io.Writer = stdout
	var closers []io.Closer
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		closers = append(closers, f)
		w = f
		if strings.HasSuffix(*out, ".gz") {
			zw := gzip.NewWriter(f)
			closers = append([]io.Closer{zw}, closers...)
			w = zw
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if sc.name != "" {
		err = sc.write(bw, *seed, t0)
	} else {
		err = auditgen.New(*seed, t0).WriteLog(bw, *n)
	}
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	for _, c := range closers {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}
