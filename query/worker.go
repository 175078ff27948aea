package query

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The worker protocol. The parent writes one JSON line, a workerRequest,
// then one frame per event; it closes the worker's stdin when the query
// is over. The worker answers the request with a ready frame (or a failed
// one). For each event it writes the event's outputs, each in its own
// frame, then one frame that ends the event: done, halt, or an error. A frame is a type byte, the payload's length as a uvarint, and
// the payload.
//
// The parent sends an event only after the previous one ended, so neither
// side ever waits on a full pipe the other is not reading, and the parent
// knows which event each output and each crash belongs to.
const (
	workerProtocol = 1

	frameEvent = 'E' // parent to worker: one raw event

	frameReady    = 'R' // the worker compiled the program: it comes first
	frameOutput   = 'O' // one output, compact JSON
	frameDone     = 'D' // the event is done
	frameHalt     = 'H' // the program halted: the query is done
	frameJQError  = 'J' // the program failed on the event: the error text
	frameBadEvent = 'B' // the event is not JSON: the error text
	frameLimit    = 'L' // the worker hit a limit: the Limits field
	frameFailed   = 'F' // the worker cannot go on: the error text
)

// Worker settings.
const (
	// workerMaxStack bounds a goroutine's stack in the worker (Go's
	// default is 1 GiB). A stack overflow is fatal: the sooner it comes,
	// the less memory a runaway recursion takes first. It allows nesting
	// some hundred thousand levels deep.
	workerMaxStack = 64 << 20
	// exitMemory is the worker's exit status when its heap grew far past
	// MaxMemory (see hardMemoryCap): the program did not stop when asked
	// to.
	exitMemory = 3
	// workerFlushInterval is how long an output may wait in the worker's
	// buffer: outputs of an event that runs long reach the client while
	// it runs, and are not lost when it then times out or crashes.
	workerFlushInterval = 20 * time.Millisecond
	// maxEventFrame bounds an event the worker reads.
	maxEventFrame = 1 << 30
	// maxMessageFrame bounds an error message or a Limits field name.
	maxMessageFrame = 1 << 20
)

// workerRequest is the first line the parent writes.
type workerRequest struct {
	Protocol int    `json:"protocol"`
	Program  string `json:"program"`
	// Timeout and MaxMemory are the worker's own limits (Limits fields;
	// negative for none). The parent enforces the others.
	Timeout   time.Duration `json:"timeout"`
	MaxMemory int64         `json:"max_memory"`
}

// ServeWorker is a jq worker: it runs one query's jq program over events
// for a parent process that started it with a ProcessRunner, reading from
// r (the process's stdin) and writing to w (its stdout). It returns nil
// when the parent closes r, and an error when it cannot go on; errors of
// the program (a jq error, a limit) are reported to the parent, not
// returned. A binary makes a subcommand call it and points a
// ProcessRunner at that subcommand.
//
// ServeWorker changes settings of the whole process while it runs: the
// largest stack a goroutine may have (so that a runaway recursion crashes
// the worker soon, with little memory), the Go memory limit
// (debug.SetMemoryLimit) and the likelihood of being chosen by the Linux
// OOM killer (raised, so that the worker dies rather than its parent). It
// exits the process, with status 3, if the program goes on growing the
// heap far past Limits.MaxMemory after being asked to stop. Call it in a
// process of its own.
func ServeWorker(ctx context.Context, r io.Reader, w io.Writer) error {
	defer debug.SetMaxStack(debug.SetMaxStack(workerMaxStack))
	raiseOOMScore()
	in := bufio.NewReaderSize(r, 64<<10)
	out := &frameWriter{w: bufio.NewWriterSize(w, 64<<10)}

	req, q, err := readRequest(in)
	if err != nil {
		out.frame(frameFailed, []byte(err.Error()))
		out.flush()
		return err
	}
	out.frame(frameReady, nil)
	if err := out.flush(); err != nil {
		return err
	}
	defer out.flushEvery(workerFlushInterval)()
	lim := Limits{Timeout: req.Timeout, MaxMemory: req.MaxMemory, MaxOutputs: -1, MaxOutputBytes: -1}
	if lim.MaxMemory > 0 {
		defer capMemory(lim.MaxMemory, func() { out.flush() })()
	}
	runCtx, stop := lim.start(ctx, true)
	defer stop()

	var (
		event []byte
		line  []byte
	)
	for {
		typ, n, err := readFrameHeader(in, maxEventFrame)
		if err == io.EOF {
			return nil // the query is over
		}
		if err == nil && typ != frameEvent {
			err = fmt.Errorf("unexpected frame type %q", typ)
		}
		if err == nil {
			event, err = readPayload(in, event, n)
		}
		if err != nil {
			return fmt.Errorf("reading an event: %w", err)
		}
		input, err := DecodeEvent(event)
		if err != nil {
			out.frame(frameBadEvent, fmt.Appendf(nil, "decoding the stored event: %v", err))
			if err := out.flush(); err != nil {
				return err
			}
			continue
		}
		err = q.run(runCtx, input, func(v any) error {
			var err error
			if line, err = appendJSON(line[:0], v); err != nil {
				return err
			}
			return out.frame(frameOutput, line)
		})
		if err := out.error(); err != nil {
			return err // the parent is gone
		}
		var le *LimitError
		switch {
		case err == nil:
			out.frame(frameDone, nil)
		case errors.Is(err, errHalt):
			out.frame(frameHalt, nil)
		case errors.Is(err, ErrJQFailed):
			out.frame(frameJQError, []byte(err.Error()))
		case ctx.Err() != nil:
			return err // the worker itself is told to stop
		case errors.As(limitErr(ctx, runCtx, err), &le):
			out.frame(frameLimit, []byte(le.Setting))
		default:
			out.frame(frameFailed, []byte(err.Error()))
		}
		if err := out.flush(); err != nil {
			return err
		}
		if le != nil {
			return nil // runCtx is over: so is the query
		}
	}
}

// readRequest reads and checks the first line from the parent and
// compiles its program.
func readRequest(in *bufio.Reader) (workerRequest, *JQ, error) {
	var req workerRequest
	line, err := in.ReadBytes('\n')
	if err != nil {
		return req, nil, fmt.Errorf("reading the request: %w", err)
	}
	if err := json.Unmarshal(line, &req); err != nil {
		return req, nil, fmt.Errorf("decoding the request: %w", err)
	}
	if req.Protocol != workerProtocol {
		return req, nil, fmt.Errorf("the parent speaks protocol %d, this worker %d: it is another version of the program", req.Protocol, workerProtocol)
	}
	q, err := CompileJQ(req.Program)
	if err != nil {
		return req, nil, err
	}
	return req, q, nil
}

// raiseOOMScore asks the Linux OOM killer to pick this process first, so
// a program that exhausts the machine's memory ends its worker and not
// the parent. It does nothing elsewhere.
func raiseOOMScore() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}

// hardMemoryCap is how much the worker's heap may grow, for a MaxMemory
// of limit, before the worker exits: twice limit, and at least 256 MiB
// more than limit.
func hardMemoryCap(limit int64) int64 { return limit + max(limit, 256<<20) }

// capMemory bounds the worker's memory beyond the heap watch of
// Limits.start, which asks the program to stop but cannot stop a builtin
// such as tojson or sort that works on a huge value without checking its
// context: it sets the Go memory limit to limit over what the process
// uses now, so garbage is collected before it counts against the program,
// and exits the process, after calling flush, if the heap grows by more
// than hardMemoryCap(limit). The function it returns undoes it.
func capMemory(limit int64, flush func()) (undo func()) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	read := func(i int) int64 {
		metrics.Read(sample)
		if sample[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(sample[i].Value.Uint64())
	}
	prev := debug.SetMemoryLimit(read(1) + limit)
	base := read(0)
	stop := every(heapCheckInterval, func() {
		if hard := hardMemoryCap(limit); read(0)-base > hard {
			// Hand over the outputs so far, unless that blocks.
			flushed := make(chan struct{})
			go func() { flush(); close(flushed) }()
			select {
			case <-flushed:
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprintf(os.Stderr, "jq worker: the heap grew by more than %s (Limits.MaxMemory is %s) and the program did not stop\n", formatBytes(hard), formatBytes(limit))
			os.Exit(exitMemory)
		}
	})
	return func() {
		stop()
		debug.SetMemoryLimit(prev)
	}
}

// every calls fn every d on its own goroutine until the function it
// returns is called; that function waits for a call in progress to end.
func every(d time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fn()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// frameWriter writes frames and keeps the first error. It is safe for
// concurrent use.
type frameWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
	hdr [1 + binary.MaxVarintLen64]byte
}

func (fw *frameWriter) frame(typ byte, payload []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err != nil {
		return fw.err
	}
	fw.hdr[0] = typ
	n := 1 + binary.PutUvarint(fw.hdr[1:], uint64(len(payload)))
	if _, err := fw.w.Write(fw.hdr[:n]); err != nil {
		fw.err = err
		return err
	}
	if _, err := fw.w.Write(payload); err != nil {
		fw.err = err
	}
	return fw.err
}

// write writes b as it is.
func (fw *frameWriter) write(b []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err == nil {
		_, fw.err = fw.w.Write(b)
	}
	return fw.err
}

func (fw *frameWriter) flush() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err == nil {
		fw.err = fw.w.Flush()
	}
	return fw.err
}

func (fw *frameWriter) error() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.err
}

// flushEvery flushes fw every d until the function it returns is called.
func (fw *frameWriter) flushEvery(d time.Duration) (stop func()) {
	return every(d, func() { _ = fw.flush() })
}

// readFrameHeader reads a frame's type and payload length, at most max.
// It returns io.EOF only when there is no frame at all.
func readFrameHeader(r *bufio.Reader, max int64) (typ byte, n int64, err error) {
	if typ, err = r.ReadByte(); err != nil {
		return 0, 0, err
	}
	u, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, noEOF(err)
	}
	if u > uint64(max) {
		return 0, 0, fmt.Errorf("a frame of type %q is %d bytes long, more than the %d allowed", typ, u, max)
	}
	return typ, int64(u), nil
}

// readPayload reads n bytes into buf, reusing it.
func readPayload(r io.Reader, buf []byte, n int64) ([]byte, error) {
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, noEOF(err)
	}
	return buf, nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
