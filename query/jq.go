package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/itchyny/gojq"
)

// ErrBadJQ is wrapped by every error about a jq program that does not
// compile. Callers map it to HTTP 400.
var ErrBadJQ = errors.New("invalid jq program")

// ErrJQFailed is wrapped by every error a jq program raised while running
// (error("…"), halt_error, .a on a string, …).
var ErrJQFailed = errors.New("jq program failed")

// MaxProgramLength is the longest jq program CompileJQ accepts, in bytes.
const MaxProgramLength = 64 << 10

// JQ is a compiled jq program. It is safe for concurrent use.
//
// Programs run with gojq (a jq implementation in Go) and have no access to
// the environment ($ENV and env are empty), to files or modules (import and
// include fail), or to further inputs (input and inputs fail).
type JQ struct {
	program string
	code    *gojq.Code
	limits  Limits
}

// CompileJQ parses and compiles a jq program. The error for a program that
// does not parse wraps ErrBadJQ and says where the program is wrong, as a
// line and column, followed by gojq's description.
//
// Run obeys the default Limits; see WithLimits.
func CompileJQ(program string) (*JQ, error) {
	if strings.TrimSpace(program) == "" {
		return nil, fmt.Errorf("%w: the program is empty; use . to pass events through unchanged", ErrBadJQ)
	}
	if len(program) > MaxProgramLength {
		return nil, fmt.Errorf("%w: the program is %d bytes long, more than the %d allowed", ErrBadJQ, len(program), MaxProgramLength)
	}
	parsed, err := gojq.Parse(program)
	if err != nil {
		var pe *gojq.ParseError
		if errors.As(err, &pe) {
			line, col, near := position(program, pe)
			return nil, fmt.Errorf("%w: line %d, column %d%s: %w", ErrBadJQ, line, col, near, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadJQ, err)
	}
	code, err := gojq.Compile(parsed, gojq.WithEnvironLoader(func() []string { return nil }))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadJQ, err)
	}
	return &JQ{program: program, code: code}, nil
}

// position returns the 1-based line and column (in characters) where the
// token that stopped the parser begins, and a short excerpt of the program
// that ends there for the error message.
func position(program string, pe *gojq.ParseError) (line, col int, near string) {
	off := min(max(pe.Offset, 0), len(program))
	// Offset is where the parser stopped, just past the offending token.
	if tok := pe.Token; tok != "" && strings.HasSuffix(program[:off], tok) {
		off -= len(tok)
	}
	line = 1 + strings.Count(program[:off], "\n")
	lineStart := strings.LastIndexByte(program[:off], '\n') + 1
	col = 1 + utf8.RuneCountInString(program[lineStart:off])
	end := min(len(program), off+max(len(pe.Token), 1))
	if i := strings.IndexByte(program[off:end], '\n'); i >= 0 {
		end = off + i
	}
	start := max(lineStart, end-30)
	for start > lineStart && !utf8.RuneStart(program[start]) {
		start--
	}
	if excerpt := strings.TrimSpace(program[start:end]); excerpt != "" {
		near = fmt.Sprintf(" (at %q)", excerpt)
	}
	return line, col, near
}

// String returns the program text.
func (q *JQ) String() string { return q.program }

// WithLimits returns a copy of q whose Run obeys lim instead of the
// default Limits. Zero fields of lim take their default. Events does not
// use them: it takes the limits of the whole query as an argument.
func (q *JQ) WithLimits(lim Limits) *JQ {
	c := *q
	c.limits = lim
	return &c
}

// Run runs the program over one input and calls emit for each output, in
// order. input must be what encoding/json decodes into an any (nil, bool,
// float64 or json.Number, string, []any, map[string]any); DecodeEvent
// gives that.
//
// Run obeys q's limits (see WithLimits) for this one call: it stops with a
// *LimitError after Timeout, when the program makes the heap grow by more
// than MaxMemory, and before emitting more than MaxOutputs values or more
// than MaxOutputBytes bytes of them encoded as compact JSON lines. It
// stops with ctx's error when ctx ends first, with an error wrapping
// ErrJQFailed when the program raises one, and with emit's error as it
// is. The program's halt stops it without an error.
func (q *JQ) Run(ctx context.Context, input any, emit func(v any) error) error {
	lim := q.limits.withDefaults()
	runCtx, stop := lim.start(ctx, true)
	defer stop()
	var b budget
	err := q.run(runCtx, input, func(v any) error {
		var n int64
		if lim.MaxOutputBytes > 0 {
			enc, err := gojq.Marshal(v)
			if err != nil {
				return fmt.Errorf("encoding jq output: %w", err)
			}
			n = int64(len(enc)) + 1
		}
		if err := b.spend(lim, n); err != nil {
			return err
		}
		return emit(v)
	})
	if errors.Is(err, errHalt) {
		err = nil
	}
	return limitErr(ctx, runCtx, err)
}

// errHalt stops a run because the program called halt.
var errHalt = errors.New("halt")

// run runs the program over input until it ends, ctx ends or emit fails.
// It returns errHalt when the program halts.
func (q *JQ) run(ctx context.Context, input any, emit func(v any) error) error {
	iter := q.code.RunWithContext(ctx, input)
	for {
		v, ok, err := next(iter)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err, isErr := v.(error); isErr {
			var he *gojq.HaltError
			switch {
			case errors.As(err, &he) && he.Value() == nil:
				return errHalt
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
				return err
			}
			return fmt.Errorf("%w: %w", ErrJQFailed, err)
		}
		if err := emit(v); err != nil {
			return err
		}
	}
}

// next is iter.Next, with a panic in the jq engine turned into an error:
// a program from the network must not bring the process down.
func next(iter gojq.Iter) (v any, ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: internal error in the jq engine: %v", ErrJQFailed, r)
		}
	}()
	v, ok = iter.Next()
	return v, ok, nil
}

// DecodeEvent decodes the JSON text of one event into the values a jq
// program takes as input. Numbers stay json.Number, so integers of any size
// keep every digit and are written back exactly as they were.
func DecodeEvent(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if rest := bytes.Trim(data[d.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// appendJSON appends the compact JSON encoding of a jq output to b.
func appendJSON(b []byte, v any) ([]byte, error) {
	enc, err := gojq.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("encoding jq output: %w", err)
	}
	return append(b, enc...), nil
}
