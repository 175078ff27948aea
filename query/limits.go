package query

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strconv"
	"time"
)

// Defaults for the fields of Limits.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxOutputs     = 1_000_000
	DefaultMaxOutputBytes = 256 << 20
	DefaultMaxMemory      = 1 << 30
)

// Limits bound one query. A zero field takes its default (DefaultTimeout,
// DefaultMaxOutputs, DefaultMaxOutputBytes, DefaultMaxMemory); a negative
// field removes that limit, for trusted callers such as the command line.
type Limits struct {
	// Timeout bounds the whole query: the SQL, the jq program and writing
	// the results.
	Timeout time.Duration
	// MaxOutputs bounds the number of lines written (events, or jq
	// outputs).
	MaxOutputs int
	// MaxOutputBytes bounds the bytes written, newlines included.
	MaxOutputBytes int64
	// MaxMemory bounds how much a jq program may make the process heap
	// grow while the query runs, so that a program such as [range(1e9)]
	// fails before it exhausts the machine. Go cannot account memory to a
	// goroutine: the heap of the whole process is sampled every few
	// milliseconds, so set this well above what the rest of the process
	// allocates between two garbage collections. With Worker set, the
	// worker process enforces it on its own heap instead.
	MaxMemory int64
	// Worker, when not nil, makes Events run the jq program in a child
	// process that Worker starts (see ProcessRunner and ServeWorker)
	// instead of in this one. Set it where programs come from the network:
	// Go cannot recover from a stack overflow and gojq does not limit
	// nesting, so a program such as
	// reduce range(3e6) as $i (null; [.]) | tojson would end the whole
	// process. A worker that dies fails the query with an error wrapping
	// ErrJQFailed, or a *LimitError when it hit a limit. Leave it nil to
	// run programs in this process, as the command line does with the
	// user's own program. JQ.Run always runs in this process.
	Worker *ProcessRunner
}

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxOutputs == 0 {
		l.MaxOutputs = DefaultMaxOutputs
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxMemory == 0 {
		l.MaxMemory = DefaultMaxMemory
	}
	return l
}

// heapCheckInterval is how often a query with a jq program samples the
// heap.
const heapCheckInterval = 5 * time.Millisecond

// start derives the context a query runs under from the caller's. It ends
// with a *LimitError as its cause when Timeout passes or, with jq set, when
// the heap grows by more than MaxMemory. stop releases it; call limitErr
// before stop.
func (l Limits) start(ctx context.Context, jq bool) (runCtx context.Context, stop func()) {
	cancelTimeout := context.CancelFunc(func() {})
	if l.Timeout > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, l.Timeout,
			&LimitError{Setting: "Timeout", Limit: l.Timeout.String(), err: context.DeadlineExceeded})
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	if jq && l.MaxMemory > 0 {
		go func() {
			defer close(done)
			watchHeap(ctx, cancel, l.MaxMemory)
		}()
	} else {
		close(done)
	}
	return ctx, func() {
		cancel(nil)
		cancelTimeout()
		<-done
	}
}

// watchHeap cancels ctx when the heap grows by more than limit bytes over
// what it was when watchHeap began, and returns when ctx ends.
func watchHeap(ctx context.Context, cancel context.CancelCauseFunc, limit int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() int64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(sample[0].Value.Uint64())
	}
	base := heap()
	tick := time.NewTicker(heapCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if heap()-base > limit {
			cancel(&LimitError{Setting: "MaxMemory", Limit: formatBytes(limit)})
			return
		}
	}
}

// limitErr returns the *LimitError that ended runCtx when the query failed
// (err is not nil) because of it, rather than because the caller's ctx
// ended; otherwise err.
func limitErr(ctx, runCtx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var le *LimitError
	if errors.As(context.Cause(runCtx), &le) {
		return le
	}
	return err
}

// ErrLimit is wrapped by every *LimitError.
var ErrLimit = errors.New("query limit reached")

// LimitError reports that a query hit one of its Limits. Results written
// before it are valid but incomplete.
type LimitError struct {
	// Setting is the field of Limits that was hit: "Timeout",
	// "MaxOutputs", "MaxOutputBytes" or "MaxMemory". The flag or setting
	// that fills it is the one to raise.
	Setting string
	// Limit is the value that was hit, such as "30s".
	Limit string

	err error // the cause: context.DeadlineExceeded for Timeout
}

// Error says which limit was hit and what to do about it.
func (e *LimitError) Error() string {
	switch e.Setting {
	case "Timeout":
		return fmt.Sprintf("%v: the query ran longer than %s (Limits.Timeout); narrow the time range or the filters, simplify the jq program, or raise the query timeout",
			ErrLimit, e.Limit)
	case "MaxOutputs":
		return fmt.Sprintf("%v: more than %s results (Limits.MaxOutputs); narrow the filters, make the jq program emit fewer values, or raise the output limit",
			ErrLimit, e.Limit)
	case "MaxOutputBytes":
		return fmt.Sprintf("%v: more than %s of results (Limits.MaxOutputBytes); narrow the filters, make the jq program emit less, or raise the output size limit",
			ErrLimit, e.Limit)
	case "MaxMemory":
		return fmt.Sprintf("%v: the jq program made the heap grow by more than %s (Limits.MaxMemory); build smaller values (avoid collecting many values into one array or string), narrow the filters, or raise the memory limit",
			ErrLimit, e.Limit)
	}
	return fmt.Sprintf("%v: %s %s", ErrLimit, e.Setting, e.Limit)
}

// Is reports whether target is ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Unwrap returns the cause: context.DeadlineExceeded for a timeout.
func (e *LimitError) Unwrap() error { return e.err }

// budget counts what a query has written against its limits.
type budget struct {
	outputs int
	bytes   int64
}

// spend accounts for one more output of n bytes and fails, without
// accounting for it, when that would exceed lim.
func (b *budget) spend(lim Limits, n int64) error {
	if err := b.check(lim, n); err != nil {
		return err
	}
	b.outputs++
	b.bytes += n
	return nil
}

// check fails as spend would, without accounting for the output.
func (b *budget) check(lim Limits, n int64) error {
	if lim.MaxOutputs > 0 && b.outputs >= lim.MaxOutputs {
		return &LimitError{Setting: "MaxOutputs", Limit: strconv.Itoa(lim.MaxOutputs)}
	}
	if lim.MaxOutputBytes > 0 && b.bytes+n > lim.MaxOutputBytes {
		return &LimitError{Setting: "MaxOutputBytes", Limit: formatBytes(lim.MaxOutputBytes)}
	}
	return nil
}

// formatBytes renders n as bytes, KiB, MiB or GiB, exact when it can be.
func formatBytes(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB"}
	u := 0
	for u < len(units)-1 && n >= 1024 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return strconv.FormatInt(n, 10) + " " + units[u]
}
