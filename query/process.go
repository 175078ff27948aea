package query

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProcessRunner starts jq worker processes for Events (see
// Limits.Worker): a program that calls ServeWorker, such as
// "auditlens jq-worker". Each query with a jq program starts one worker,
// which runs the program over the query's events and exits when the query
// is over. The worker is killed when the query ends early (a limit, the
// caller's context, halt, an error), and on Linux when this process dies.
type ProcessRunner struct {
	// Path is the program to run. Empty means this process's own
	// executable: on Linux /proc/self/exe, the very file this process
	// runs even when it was replaced on disk since, elsewhere
	// os.Executable.
	Path string
	// Args are the arguments after the program name, such as the
	// subcommand that calls ServeWorker.
	Args []string
	// Env is the worker's environment; nil passes this process's.
	Env []string
}

const (
	// workerExitGrace is how long a worker may take to exit once its
	// stdin is closed before it is killed; also exec.Cmd.WaitDelay.
	workerExitGrace = time.Second
	// workerTimeoutGrace is how much longer than the query a worker gives
	// itself. The parent kills it first; this bounds a worker whose
	// parent could not.
	workerTimeoutGrace = 5 * time.Second
	// maxOutputFrame bounds one output the parent reads. The output
	// limits stop a query long before, unless they are off.
	maxOutputFrame = 1 << 40
)

// workerSession is one worker process, running one query's program.
type workerSession struct {
	ctx    context.Context // the query's: ending it kills the worker
	lim    Limits
	path   string
	cmd    *exec.Cmd
	stdin  io.Closer
	in     *frameWriter
	out    *bufio.Reader
	stderr *headBuffer
	ready  bool   // the worker said it is ready
	buf    []byte // the payload of the last frame read
	err    error  // set once the worker died; every run returns it

	waited  bool
	waitErr error
}

// start starts a worker for q under ctx, which kills it when it ends,
// and sends it the program and the limits it enforces itself: the time
// left to ctx (plus workerTimeoutGrace) and lim.MaxMemory.
func (p *ProcessRunner) start(ctx context.Context, q *JQ, lim Limits) (*workerSession, error) {
	path := p.Path
	if path == "" {
		var err error
		if path, err = selfExecutable(); err != nil {
			return nil, fmt.Errorf("starting a jq worker: finding this executable: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, path, p.Args...)
	if p.Path == "" {
		if exe, err := os.Executable(); err == nil {
			cmd.Args[0] = exe // for ps and error messages, not /proc/self/exe
		}
	}
	cmd.Env = p.Env
	cmd.SysProcAttr = workerSysProcAttr()
	cmd.WaitDelay = workerExitGrace
	s := &workerSession{ctx: ctx, lim: lim, path: cmd.Args[0], cmd: cmd, stderr: &headBuffer{max: 8 << 10}}
	cmd.Stderr = s.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("starting the jq worker %s: %w", path, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdin.Close()
		return nil, fmt.Errorf("starting the jq worker %s: %w", path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the jq worker %s: %w", s.path, err)
	}
	s.stdin = stdin
	s.in = &frameWriter{w: bufio.NewWriterSize(stdin, 64<<10)}
	s.out = bufio.NewReaderSize(stdout, 64<<10)

	req := workerRequest{Protocol: workerProtocol, Program: q.program, Timeout: -1, MaxMemory: lim.MaxMemory}
	if d, ok := ctx.Deadline(); ok {
		req.Timeout = time.Until(d) + workerTimeoutGrace
	}
	line, err := json.Marshal(req)
	if err != nil {
		s.close(true)
		return nil, err
	}
	// The worker compiles the program while the store runs the query.
	s.in.write(append(line, '\n'))
	if err := s.in.flush(); err != nil {
		return nil, s.fail(err)
	}
	return s, nil
}

func (s *workerSession) run(raw []byte, out *lineWriter) error {
	if s.err != nil {
		return s.err
	}
	if !s.ready {
		if err := s.awaitReady(); err != nil {
			return err
		}
	}
	s.in.frame(frameEvent, raw)
	if err := s.in.flush(); err != nil {
		return s.fail(err)
	}
	for {
		typ, n, err := readFrameHeader(s.out, maxOutputFrame)
		if err != nil {
			return s.fail(err)
		}
		switch typ {
		case frameOutput:
			// Check the limits before reading an output that may be
			// huge; write checks them again and counts it.
			if err := out.budget.check(out.lim, n+1); err != nil {
				return err
			}
		case frameDone, frameHalt, frameJQError, frameBadEvent, frameLimit, frameFailed:
			if n > maxMessageFrame {
				return s.fail(fmt.Errorf("a frame of type %q is %d bytes long, more than the %d allowed", typ, n, maxMessageFrame))
			}
		default:
			return s.fail(fmt.Errorf("unexpected frame type %q", typ))
		}
		if s.buf, err = readPayload(s.out, s.buf, n); err != nil {
			return s.fail(err)
		}
		switch typ {
		case frameOutput:
			s.buf = append(s.buf, '\n')
			if err := out.write(s.buf); err != nil {
				return err
			}
		case frameDone:
			return nil
		case frameHalt:
			return errHalt
		case frameJQError:
			return &workerError{msg: string(s.buf), sentinel: ErrJQFailed}
		case frameBadEvent:
			return eventError{&workerError{msg: string(s.buf)}}
		case frameLimit:
			return s.limitError(string(s.buf))
		case frameFailed:
			return &workerError{msg: string(s.buf)}
		}
	}
}

// awaitReady reads the frame that says the worker is ready.
func (s *workerSession) awaitReady() error {
	typ, n, err := readFrameHeader(s.out, maxMessageFrame)
	if err == nil && typ != frameReady && typ != frameFailed {
		err = fmt.Errorf("its first frame is of type %q, not the one that says it is ready", typ)
	}
	if err == nil {
		s.buf, err = readPayload(s.out, s.buf, n)
	}
	if err == nil && typ == frameFailed {
		err = fmt.Errorf("it failed: %s", s.buf)
	}
	if err != nil {
		return s.fail(err)
	}
	s.ready = true
	return nil
}

// limitError is the error for the limit the worker reported.
func (s *workerSession) limitError(setting string) error {
	switch setting {
	case "MaxMemory":
		return &LimitError{Setting: setting, Limit: formatBytes(s.lim.MaxMemory)}
	case "Timeout":
		if err := s.ctx.Err(); err != nil {
			return err // Events tells the query's timeout from the caller's
		}
		return &LimitError{Setting: setting, Limit: s.lim.Timeout.String(), err: context.DeadlineExceeded}
	}
	return &LimitError{Setting: setting, Limit: "(in the jq worker)"}
}

// close ends the worker: it closes its stdin, which makes an idle worker
// exit, after killing it when stop is set. It reports a worker that
// failed while exiting, unless stop is set. It may be called again.
func (s *workerSession) close(stop bool) error {
	if s.waited {
		return nil
	}
	if stop {
		s.kill()
	}
	s.stdin.Close()
	var late atomic.Bool
	t := time.AfterFunc(workerExitGrace, func() {
		late.Store(true)
		s.kill()
	})
	s.wait()
	t.Stop()
	if stop || s.waitErr == nil || late.Load() {
		// A worker that does not exit once it has answered for every
		// event changes nothing to the results.
		return nil
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the jq worker %s failed as it exited: %v%s", s.path, s.waitErr, s.stderr.detail())
}

func (s *workerSession) kill() { _ = s.cmd.Process.Kill() }

func (s *workerSession) wait() {
	if !s.waited {
		s.waited = true
		s.waitErr = s.cmd.Wait()
	}
}

// fail ends the worker after err, an error writing to it or reading from
// it, and returns (and keeps) the error that explains why the worker went
// away.
func (s *workerSession) fail(err error) error {
	if s.err != nil {
		return s.err
	}
	gone := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed)
	if !gone {
		s.kill() // it broke the protocol, or the pipe failed
	}
	t := time.AfterFunc(workerExitGrace, s.kill)
	s.stdin.Close()
	s.wait()
	t.Stop()
	var exit *exec.ExitError
	errors.As(s.waitErr, &exit)
	switch {
	case s.ctx.Err() != nil:
		// Killed because the query's time is up or its caller went away;
		// Events turns a timeout into a *LimitError.
		s.err = s.ctx.Err()
	case exit != nil && exit.ExitCode() == exitMemory:
		s.err = &LimitError{Setting: "MaxMemory", Limit: formatBytes(s.lim.MaxMemory)}
	case !gone:
		s.err = fmt.Errorf("the jq worker %s: %w%s", s.path, err, s.stderr.detail())
	case !s.ready:
		s.err = fmt.Errorf("the jq worker %s ended before it was ready: %s%s", s.path, exitStatus(s.waitErr), s.stderr.detail())
	default:
		s.err = s.crashError()
	}
	return s.err
}

// crashError explains a worker that died in the middle of an event.
func (s *workerSession) crashError() error {
	status := exitStatus(s.waitErr)
	stderr := s.stderr.String()
	var exit *exec.ExitError
	killed := errors.As(s.waitErr, &exit) && isKilled(exit)
	switch {
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		return fmt.Errorf("%w: the program crashed its jq worker process by recursing or nesting values too deeply (deep recursion or nesting? the worker's stack is limited to %s): %s",
			ErrJQFailed, formatBytes(workerMaxStack), status)
	case strings.Contains(stderr, "out of memory") || killed:
		return fmt.Errorf("%w: the program crashed its jq worker process, which ran out of memory or was killed: %s%s",
			ErrJQFailed, status, s.stderr.detail())
	}
	return fmt.Errorf("%w: the program crashed its jq worker process: %s%s", ErrJQFailed, status, s.stderr.detail())
}

// isKilled reports whether the process was killed by SIGKILL, as the
// Linux OOM killer does.
func isKilled(exit *exec.ExitError) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func exitStatus(waitErr error) string {
	if waitErr == nil {
		return "exit status 0"
	}
	return waitErr.Error()
}

// workerError is an error the worker reported, with its text.
type workerError struct {
	msg      string
	sentinel error // ErrJQFailed, or nil
}

func (e *workerError) Error() string { return e.msg }
func (e *workerError) Unwrap() error { return e.sentinel }

// headBuffer keeps the first max bytes written to it: the worker's
// stderr, where the Go runtime explains a crash before a long traceback.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

// detail returns ": " and the first line the worker wrote to stderr,
// or "" when it wrote nothing.
func (h *headBuffer) detail() string {
	for line := range strings.Lines(h.String()) {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			return ": " + line
		}
	}
	return ""
}
