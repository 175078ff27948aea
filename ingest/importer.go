package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/store"
)

// ImportConfig configures Import.
type ImportConfig struct {
	// Cluster tags every imported event, unless ClusterFromEnvelope.
	Cluster string
	// ClusterFromEnvelope, when true, tags the events of a cloud envelope
	// that names a cluster with that cluster, and only the others with
	// Cluster; with Cluster empty, lines that name no cluster are rejected
	// (ErrNoCluster). See LineSource for the rule.
	ClusterFromEnvelope bool
	// APIServer, when set, names the kube-apiserver of the cluster that
	// wrote the files (each apiserver of an HA control plane writes its
	// own log); a valid name (ValidName). Unset, the envelope's
	// apiserver, if it names one, is kept.
	APIServer string
	// Stdin is read for the file named "-" (default os.Stdin).
	Stdin io.Reader
	// BatchRows is the number of rows per insert (default DefaultBatchRows).
	BatchRows int
	// OnProgress, when set, is called about every 200ms and once at the end.
	OnProgress func(ImportProgress)
	// MaxRejectsShown bounds ImportStats.RejectSamples (default 20).
	MaxRejectsShown int
	// Redactor cuts what must never be stored out of each event before
	// it is written (nil: nothing).
	Redactor *Redactor
}

// ImportProgress is a snapshot of a running import.
type ImportProgress struct {
	File       string
	BytesRead  int64 // of the files as stored (compressed bytes for .gz)
	BytesTotal int64
	Events     int64
	Elapsed    time.Duration
}

// ImportStats summarises an import.
type ImportStats struct {
	Files         int
	Lines         int64
	Events        int64            // decoded events
	Kinds         map[string]int64 // decoded events by kind of line (KindAudit, KindAKS, ...)
	Clusters      []string         // the clusters of the decoded events, sorted
	Skipped       int64            // envelope records that carry no audit event (Batch.Skipped)
	Rejected      int64            // malformed lines and events
	NoCluster     int64            // of Rejected: lines and records that name no cluster (ErrNoCluster)
	Duplicates    int64            // already stored or repeated
	Redacted      int64            // events with parts cut out (ImportConfig.Redactor)
	Stored        int64
	Bytes         int64
	Elapsed       time.Duration
	First, Last   time.Time // span of the imported events
	RejectSamples []string  // "file:line: reason"
}

// EventsPerSecond is the decode-and-store rate of the import.
func (s ImportStats) EventsPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Events) / s.Elapsed.Seconds()
}

// Stdin is the file name that ExpandPaths and Import read as standard
// input.
const Stdin = "-"

// ExpandPaths turns files and directories into the list of files to import,
// sorted by name within each directory. Hidden files are skipped. "-"
// (Stdin) stays as it is.
func ExpandPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == Stdin {
			out = append(out, p)
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		var files []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && path != p {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", p, err)
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no files to import", p)
		}
		out = append(out, files...)
	}
	return out, nil
}

// Import loads audit log files into the store through w: one Event JSON per
// line as the apiserver's log backend writes it, or one EventList per line
// as captured from a webhook, or the cloud providers' envelopes of them
// (DecodeImportLine), detected line by line; plain or gzip-compressed;
// "-" is standard input. Importing the same file again adds nothing. With a nil writer it only reads and decodes, which
// is the baseline the import benchmark compares against.
func Import(ctx context.Context, w *Writer, files []string, cfg ImportConfig) (ImportStats, error) {
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.MaxRejectsShown <= 0 {
		cfg.MaxRejectsShown = 20
	}
	if cfg.Cluster == "" && !cfg.ClusterFromEnvelope {
		return ImportStats{}, errors.New("import: a cluster name is required")
	}
	if cfg.APIServer != "" && !ValidName(cfg.APIServer) {
		return ImportStats{}, fmt.Errorf("import: apiserver name %q must be %s", cfg.APIServer, NameRule)
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	src := LineSource{Cluster: cfg.Cluster, Fixed: !cfg.ClusterFromEnvelope, APIServer: cfg.APIServer}
	var st ImportStats
	start := time.Now()
	for _, f := range files {
		if f == Stdin {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return st, err
		}
		st.Bytes += fi.Size()
	}
	var (
		read     atomic.Int64
		events   atomic.Int64
		curFile  atomic.Value
		progDone = make(chan struct{})
	)
	curFile.Store("")
	report := func() {
		if cfg.OnProgress != nil {
			cfg.OnProgress(ImportProgress{File: curFile.Load().(string), BytesRead: read.Load(),
				BytesTotal: st.Bytes, Events: events.Load(), Elapsed: time.Since(start)})
		}
	}
	if cfg.OnProgress != nil {
		go func() {
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					report()
				case <-progDone:
					return
				}
			}
		}()
	}

	// Decoding and storing overlap: one goroutine reads and decodes, this
	// one writes. Decoding is several times faster than storing, so a
	// queue of decoded batches would only hold memory (each 50k-row batch,
	// with its events, is ~120 MB of heap): the decoder hands over a batch
	// when the writer takes it and decodes the next meanwhile.
	batches := make(chan []store.Row)
	decodeErr := make(chan error, 1)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var dec ImportStats // owned by the decoder until batches is closed
	go func() {
		defer close(batches)
		rows := make([]store.Row, 0, cfg.BatchRows)
		var b Batch
		dec.Kinds = map[string]int64{}
		clusters := map[string]bool{}
		for _, f := range files {
			curFile.Store(f)
			name := f
			if f == Stdin {
				name = "stdin"
			}
			err := readLines(dctx, f, cfg.Stdin, &read, func(lineNo int64, line []byte) error {
				dec.Lines++
				b.Rows, b.Rejects, b.Skipped = b.Rows[:0], b.Rejects[:0], 0
				kind, err := DecodeImportLine(src, line, &b)
				if err != nil {
					dec.Rejected++
					if errors.Is(err, ErrNoCluster) {
						dec.NoCluster++
					}
					if len(dec.RejectSamples) < cfg.MaxRejectsShown {
						dec.RejectSamples = append(dec.RejectSamples, fmt.Sprintf("%s:%d: %v", name, lineNo, err))
					}
					return nil
				}
				dec.Skipped += int64(b.Skipped)
				for _, rj := range b.Rejects {
					dec.Rejected++
					if rj.Reason == noClusterReason {
						dec.NoCluster++
					}
					if len(dec.RejectSamples) < cfg.MaxRejectsShown {
						dec.RejectSamples = append(dec.RejectSamples, fmt.Sprintf("%s:%d: event %d (%s): %s", name, lineNo, rj.Index, rj.AuditID, rj.Reason))
					}
				}
				if len(b.Rows) > 0 {
					dec.Kinds[kind] += int64(len(b.Rows))
				}
				for i := range b.Rows {
					if c := b.Rows[i].Cluster; !clusters[c] {
						clusters[c] = true
						dec.Clusters = append(dec.Clusters, strings.Clone(c))
					}
					t := b.Rows[i].Time
					if dec.First.IsZero() || t.Before(dec.First) {
						dec.First = t
					}
					if t.After(dec.Last) {
						dec.Last = t
					}
				}
				rows = append(rows, b.Rows...)
				dec.Events += int64(len(b.Rows))
				events.Add(int64(len(b.Rows)))
				if len(rows) >= cfg.BatchRows {
					select {
					case batches <- rows:
					case <-dctx.Done():
						return dctx.Err()
					}
					rows = make([]store.Row, 0, cfg.BatchRows)
				}
				return nil
			})
			if err != nil {
				decodeErr <- err
				return
			}
			dec.Files++
		}
		if len(rows) > 0 {
			select {
			case batches <- rows:
			case <-dctx.Done():
			}
		}
	}()
	var writeErr error
	for rows := range batches {
		if writeErr != nil || w == nil {
			continue
		}
		st.Redacted += int64(cfg.Redactor.Apply(rows))
		ws, err := w.Write(ctx, rows)
		st.Stored += int64(ws.Stored)
		st.Duplicates += int64(ws.Duplicates)
		if err != nil {
			writeErr = err
			cancel()
		}
	}
	close(progDone)
	st.Files, st.Lines, st.Events, st.Rejected = dec.Files, dec.Lines, dec.Events, dec.Rejected
	st.Kinds, st.Skipped, st.NoCluster = dec.Kinds, dec.Skipped, dec.NoCluster
	st.Clusters = dec.Clusters
	sort.Strings(st.Clusters)
	st.First, st.Last, st.RejectSamples = dec.First, dec.Last, dec.RejectSamples
	st.Elapsed = time.Since(start)
	report()
	if writeErr != nil {
		return st, writeErr
	}
	select {
	case err := <-decodeErr:
		return st, err
	default:
	}
	return st, ctx.Err()
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readLines calls fn for each non-empty line of a plain or gzip file, or
// of stdin for the path "-". A gzip file may be several gzip members one
// after the other (as Firehose writes them): they read as one. A file
// that is one JSON array, such as `gcloud logging read --format=json`
// writes, is read element by element instead (readArray).
func readLines(ctx context.Context, path string, stdin io.Reader, read *atomic.Int64, fn func(lineNo int64, line []byte) error) error {
	in := stdin
	if path != Stdin {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	br := bufio.NewReaderSize(countingReader{in, read}, 1<<20)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = bufio.NewReaderSize(zr, 1<<20)
	}
	lr, ok := r.(*bufio.Reader)
	if !ok {
		lr = bufio.NewReader(r)
	}
	if startsWithArray(lr) {
		return readArray(ctx, path, lr, fn)
	}
	var (
		lineNo int64
		long   []byte
	)
	for {
		if lineNo%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		chunk, err := lr.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if len(long) > 0 {
			long = append(long, chunk...)
			line = long
		}
		if len(line) > 0 {
			lineNo++
			if t := bytes.TrimSpace(line); len(t) > 0 {
				if ferr := fn(lineNo, t); ferr != nil {
					return ferr
				}
			}
		}
		long = long[:0]
		if cap(long) > 16<<20 {
			long = nil
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
	}
}

// startsWithArray reports whether the first byte of r that is not white
// space opens a JSON array. Log lines are objects or start with a time.
func startsWithArray(r *bufio.Reader) bool {
	for n := 1; n <= 4096; n++ {
		b, err := r.Peek(n)
		if len(b) < n {
			return false
		}
		switch b[n-1] {
		case ' ', '\t', '\r', '\n':
			if err != nil {
				return false
			}
			continue
		case '[':
			return true
		}
		return false
	}
	return false
}

// readArray calls fn for each element of the JSON array r holds, numbered
// from 1 as lines are.
func readArray(ctx context.Context, path string, r io.Reader, fn func(n int64, elem []byte) error) error {
	dec := stdjson.NewDecoder(r)
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("reading %s as a JSON array: %w", path, err)
	}
	for n := int64(1); dec.More(); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		var elem stdjson.RawMessage
		if err := dec.Decode(&elem); err != nil {
			return fmt.Errorf("reading element %d of the JSON array in %s: %w", n, path, err)
		}
		if err := fn(n, elem); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("reading %s as a JSON array: %w", path, err)
	}
	return nil
}
