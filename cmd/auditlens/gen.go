package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
)

// runGen writes a realistic synthetic audit log: demo data for a first look,
// and the corpus of the import benchmark.
func runGen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gen", "[--events N] [--out FILE]", stderr)
	n := fs.Int("events", 100000, "number of events")
	out := fs.String("out", "-", "output file (.gz compresses); - for stdout")
	seed := fs.Int64("seed", 1, "random seed: the same seed gives the same file")
	start := fs.String("start", "2026-01-01T00:00:00Z", "timestamp of the first event (RFC3339)")
	rate := fs.Float64("rate", auditgen.DefaultRate, "events per second of event time in the random traffic (a busy apiserver sends ~4,000; a large cluster's several tens of thousands)")
	var sc genScenario
	sc.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sc.check(); err != nil {
		return err
	}
	if *rate <= 0 {
		return fmt.Errorf("%w: --rate must be above 0", errUsage)
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
		g := auditgen.New(*seed, t0)
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "rate" { // unset, the files stay those of earlier releases
				g.SetRate(*rate)
			}
		})
		err = g.WriteLog(bw, *n)
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
