package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/proctest"
	"github.com/auditlens/auditlens/store"
)

// workerEnv makes the test binary a jq worker: tests point a
// ProcessRunner at the test binary itself with it set.
const workerEnv = "AUDITLENS_QUERY_TEST_JQ_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := ServeWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "jq worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testWorker starts workers from this test binary.
func testWorker() *ProcessRunner {
	return &ProcessRunner{Path: os.Args[0], Env: workerEnviron()}
}

// workerEnviron makes the test binary a worker, and one that exits at
// once when built with -race (the race detector otherwise waits a second,
// and the query for the worker to exit).
func workerEnviron() []string {
	return append(os.Environ(), workerEnv+"=1", "GORACE=atexit_sleep_ms=0")
}

// crashProgram nests arrays a million deep and encodes the result, which
// recurses once per level: a stack overflow, fatal to any Go process with
// a stack limit of a few hundred MiB or less (the worker's is 64 MiB).
// reduce range(3e6) as $i (null; [.]) | tojson, the example of the
// documentation, needs three times as long to build its value.
const crashProgram = `reduce range(1e6) as $i (null; [.]) | tojson`

// checkNoChildren fails the test if a worker outlived its query.
func checkNoChildren(t *testing.T) {
	t.Helper()
	if pids := proctest.Children(t, os.Getpid()); len(pids) > 0 {
		t.Errorf("child processes left behind: %v", pids)
	}
}

// eventsResult is all that Events returns and writes.
type eventsResult struct {
	out   string
	stats Stats
	err   error
}

func runEvents(t *testing.T, ctx context.Context, rows []store.Row, program string, lim Limits) eventsResult {
	t.Helper()
	var w bytes.Buffer
	stats, err := Events(ctx, &fakeSelecter{rows: rows}, Filter{}, mustJQ(t, program), lim, &w)
	return eventsResult{w.String(), stats, err}
}

// TestEventsWorkerMatchesInProcess runs programs in this process and in a
// worker and checks the two write the same, count the same and fail the
// same way.
func TestEventsWorkerMatchesInProcess(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	rows := []store.Row{
		row("a", `{"auditID":"a","verb":"get","n":12345678901234567890,"user":{"username":"alice"},"f":1.50}`),
		row("b", "{\n  \"auditID\": \"b\",\n  \"verb\": \"watch\",\n  \"s\": \"x\\ny\",\n  \"user\": \"bob\"\n}\n"),
		row("c", `{"auditID":"c","verb":"watch","bad":"`+"\xff\xfe"+`","big":"`+big+`","user":{"username":"carol"}}`),
		row("d", `{"auditID":"d","verb":"list","items":[1,2,3],"user":{"username":"dave"}}`),
	}
	tests := []struct {
		name    string
		program string
		rows    []store.Row
		lim     Limits
		wantErr string // what the error says, "" for none
	}{
		{name: "identity", program: "."},
		{name: "several outputs per event", program: `select(.verb != "get") | .auditID, {verb}, (.s // empty), (.items // empty | .[])`},
		{name: "no outputs", program: "empty"},
		{name: "numbers keep their digits", program: `.n // .f // empty`},
		{name: "an output of a MiB", program: `.big // empty`},
		{name: "bytes that are not UTF-8", program: `.bad // empty`},
		{name: "no environment", program: `[env, $ENV]`},
		{name: "halt", program: `.auditID, if .auditID == "b" then halt else empty end`},
		{name: "jq error names the event", program: `.user.username`, wantErr: `event "b" (cluster "prod", stage ResponseComplete): jq program failed: expected an object but got: string ("bob")`},
		{name: "error builtin", program: `.auditID, error("boom")`, wantErr: `event "a" (cluster "prod", stage ResponseComplete): jq program failed: error: boom`},
		{name: "halt_error", program: `if .auditID == "c" then "bad\n" | halt_error else .auditID end`, wantErr: `event "c"`},
		{name: "stored event that is not JSON", program: ".", rows: []store.Row{rows[0], row("x", `{"a":`)},
			wantErr: `event "x" (cluster "prod", stage ResponseComplete): decoding the stored event: unexpected EOF`},
		{name: "MaxOutputs", program: `range(3)`, lim: Limits{MaxOutputs: 7}, wantErr: "more than 7 results (Limits.MaxOutputs)"},
		{name: "exactly MaxOutputs", program: `range(2)`, lim: Limits{MaxOutputs: 8}},
		{name: "MaxOutputBytes", program: `.auditID, .verb`, lim: Limits{MaxOutputBytes: 20}, wantErr: "more than 20 bytes of results (Limits.MaxOutputBytes)"},
		{name: "MaxOutputBytes on a huge output", program: `.big // empty`, lim: Limits{MaxOutputBytes: 1 << 20}, wantErr: "more than 1 MiB of results"},
		{name: "endless outputs", program: `repeat(1)`, lim: Limits{MaxOutputs: 1000}, wantErr: "more than 1000 results"},
		{name: "Timeout", program: `.auditID, if .auditID == "b" then (def f: f; f) else empty end`, lim: Limits{Timeout: 500 * time.Millisecond},
			wantErr: "the query ran longer than 500ms (Limits.Timeout)"},
		{name: "MaxMemory", program: `.auditID, if .auditID == "b" then [range(1e9)] else empty end`, lim: Limits{MaxMemory: 16 << 20, Timeout: time.Minute},
			wantErr: "the jq program made the heap grow by more than 16 MiB (Limits.MaxMemory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.rows == nil {
				tt.rows = rows
			}
			local := runEvents(t, t.Context(), tt.rows, tt.program, tt.lim)
			lim := tt.lim
			lim.Worker = testWorker()
			isolated := runEvents(t, t.Context(), tt.rows, tt.program, lim)
			checkNoChildren(t)

			if tt.wantErr == "" && local.err != nil {
				t.Fatalf("in process: %v", local.err)
			}
			if tt.wantErr != "" && (local.err == nil || !strings.Contains(local.err.Error(), tt.wantErr)) {
				t.Fatalf("in process: %v, want an error saying %q", local.err, tt.wantErr)
			}
			if isolated.out != local.out {
				t.Errorf("in a worker, wrote\n%.300q\nin process\n%.300q", isolated.out, local.out)
			}
			if isolated.stats != local.stats {
				t.Errorf("in a worker, stats %+v; in process %+v", isolated.stats, local.stats)
			}
			if fmt.Sprint(isolated.err) != fmt.Sprint(local.err) {
				t.Errorf("in a worker, error\n%v\nin process\n%v", isolated.err, local.err)
			}
			for _, target := range []error{ErrJQFailed, ErrLimit, context.DeadlineExceeded} {
				if errors.Is(isolated.err, target) != errors.Is(local.err, target) {
					t.Errorf("errors.Is(%v): %v in a worker, %v in process", target, errors.Is(isolated.err, target), errors.Is(local.err, target))
				}
			}
			var le1, le2 *LimitError
			if errors.As(isolated.err, &le1) != errors.As(local.err, &le2) || le1 != nil && *le1 != *le2 {
				t.Errorf("limit error %+v in a worker, %+v in process", le1, le2)
			}
		})
	}
}

// TestEventsWorkerCrash runs a program that overflows the stack: in a
// worker, the query fails with an error that says so, and this process
// lives on.
func TestEventsWorkerCrash(t *testing.T) {
	rows := []store.Row{row("a", `{"auditID":"a"}`), row("b", `{"auditID":"b"}`)}
	lim := Limits{Worker: testWorker()}
	got := runEvents(t, t.Context(), rows, `.auditID, (if .auditID == "b" then `+crashProgram+` else empty end)`, lim)
	checkNoChildren(t)
	if !errors.Is(got.err, ErrJQFailed) || errors.Is(got.err, ErrLimit) {
		t.Fatalf("Events: %v, want ErrJQFailed", got.err)
	}
	for _, want := range []string{
		`event "b" (cluster "prod", stage ResponseComplete): jq program failed: the program crashed its jq worker process by recursing or nesting values too deeply (deep recursion or nesting? the worker's stack is limited to 64 MiB): exit status 2`,
	} {
		if got.err.Error() != want {
			t.Errorf("error\n%v\nwant\n%s", got.err, want)
		}
	}
	if got.out != "\"a\"\n\"b\"\n" || got.stats != (Stats{Matched: 2, Emitted: 2, Bytes: 8}) {
		t.Errorf("wrote %q (%+v), want the outputs before the crash", got.out, got.stats)
	}

	// The next query runs as usual.
	got = runEvents(t, t.Context(), rows, ".auditID", lim)
	if got.err != nil || got.out != "\"a\"\n\"b\"\n" {
		t.Errorf("the query after the crash: %q, %v", got.out, got.err)
	}
	checkNoChildren(t)
}

// TestEventsWorkerKilled checks the worker is gone when Events returns
// after its timeout or its caller's context ended while the program was
// still running, and that both errors are the ones Events gives in
// process.
func TestEventsWorkerKilled(t *testing.T) {
	rows := []store.Row{row("a", `{}`)}
	const endless = `def f: f; f`
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		got := runEvents(t, t.Context(), rows, endless, Limits{Timeout: 200 * time.Millisecond, Worker: testWorker()})
		checkNoChildren(t)
		var le *LimitError
		if !errors.As(got.err, &le) || le.Setting != "Timeout" || !errors.Is(got.err, context.DeadlineExceeded) {
			t.Fatalf("Events: %v, want a Timeout *LimitError", got.err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned after %v", d)
		}
	})
	t.Run("caller's context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		got := runEvents(t, ctx, rows, endless, Limits{Timeout: time.Hour, Worker: testWorker()})
		checkNoChildren(t)
		if !errors.Is(got.err, context.DeadlineExceeded) || errors.Is(got.err, ErrLimit) {
			t.Fatalf("Events: %v, want the caller's deadline, not a limit", got.err)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		got := runEvents(t, ctx, rows, endless, Limits{Worker: testWorker()})
		checkNoChildren(t)
		if !errors.Is(got.err, context.Canceled) || errors.Is(got.err, ErrLimit) {
			t.Fatalf("Events: %v, want context.Canceled", got.err)
		}
	})
	t.Run("output limit while the worker writes", func(t *testing.T) {
		got := runEvents(t, t.Context(), rows, `repeat("x")`, Limits{MaxOutputs: 10, Worker: testWorker()})
		checkNoChildren(t)
		if !errors.Is(got.err, ErrLimit) || got.stats.Emitted != 10 {
			t.Fatalf("Events: %v (%+v), want MaxOutputs after 10", got.err, got.stats)
		}
	})
}

// TestEventsWorkerSelf starts the worker as this executable, as serve
// does, and without events: the worker has nothing to do and exits.
func TestEventsWorkerSelf(t *testing.T) {
	lim := Limits{Worker: &ProcessRunner{Env: workerEnviron()}}
	got := runEvents(t, t.Context(), []store.Row{row("a", `{"a":1}`)}, ".a", lim)
	if got.err != nil || got.out != "1\n" {
		t.Errorf("Events: %q, %v", got.out, got.err)
	}
	got = runEvents(t, t.Context(), nil, ".a", lim)
	if got.err != nil || got.out != "" {
		t.Errorf("Events without events: %q, %v", got.out, got.err)
	}
	checkNoChildren(t)
}

// TestEventsWorkerBroken points the ProcessRunner at programs that are
// not workers.
func TestEventsWorkerBroken(t *testing.T) {
	rows := []store.Row{row("a", `{}`)}
	tests := []struct {
		name   string
		runner *ProcessRunner
		want   string
	}{
		{"missing", &ProcessRunner{Path: filepath.Join(t.TempDir(), "nope")}, "starting the jq worker"},
		{"exits at once", &ProcessRunner{Path: "/bin/true"}, "/bin/true ended before it was ready: exit status 0"},
		{"says something else", &ProcessRunner{Path: "/bin/sh", Args: []string{"-c", "echo hello; exec cat >/dev/null"}}, `/bin/sh: its first frame is of type 'h', not the one that says it is ready`},
		{"another version", &ProcessRunner{Path: "/bin/sh", Args: []string{"-c", "printf 'F\\005older'; exec cat >/dev/null"}}, "/bin/sh: it failed: older"},
		{"fails", &ProcessRunner{Path: "/bin/sh", Args: []string{"-c", "echo oops >&2; exit 7"}}, "/bin/sh ended before it was ready: exit status 7: oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.runner.Path); err != nil && tt.name != "missing" {
				t.Skip(err)
			}
			got := runEvents(t, t.Context(), rows, ".", Limits{Worker: tt.runner, Timeout: 10 * time.Second})
			checkNoChildren(t)
			if got.err == nil || !strings.Contains(got.err.Error(), tt.want) {
				t.Fatalf("Events: %v, want an error saying %q", got.err, tt.want)
			}
		})
	}
}

// BenchmarkEventsWorker compares a query in a worker with one in this
// process: the first benchmarks measure a query of one event (the
// worker's start-up), the others a thousand events. With
// AUDITLENS_BENCH_BINARY set to an auditlens binary, they also measure
// its jq-worker command, whose start-up initializes every package of the
// binary.
func BenchmarkEventsWorker(b *testing.B) {
	raw, err := os.ReadFile("testdata/event.json")
	if err != nil {
		b.Fatal(err)
	}
	one := []store.Row{row("a", string(bytes.TrimSpace(raw)))}
	many := make([]store.Row, 1000)
	for i := range many {
		many[i] = row(strconv.Itoa(i), string(bytes.TrimSpace(raw)))
	}
	q := mustJQ(b, `{verb, user: .user.username, code: .responseStatus.code}`)
	type bench struct {
		name   string
		rows   []store.Row
		worker *ProcessRunner
	}
	benches := []bench{
		{"1 event/in process", one, nil},
		{"1 event/worker", one, testWorker()},
		{"1000 events/in process", many, nil},
		{"1000 events/worker", many, testWorker()},
	}
	if bin := os.Getenv("AUDITLENS_BENCH_BINARY"); bin != "" {
		auditlens := &ProcessRunner{Path: bin, Args: []string{"jq-worker"}}
		benches = append(benches, bench{"1 event/auditlens jq-worker", one, auditlens}, bench{"1000 events/auditlens jq-worker", many, auditlens})
	}
	for _, bm := range benches {
		b.Run(bm.name, func(b *testing.B) {
			st := &fakeSelecter{rows: bm.rows}
			for b.Loop() {
				if _, err := Events(b.Context(), st, Filter{}, q, Limits{Worker: bm.worker}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
