package query

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestCompileJQErrors(t *testing.T) {
	tests := []struct {
		program string
		want    []string // substrings of the error text
	}{
		{"", []string{"invalid jq program", "empty", "use ."}},
		{"  \n", []string{"empty"}},
		{".foo | select(.a == )", []string{"invalid jq program: line 1, column 21", `(at ".foo | select(.a == )")`, `unexpected token ")"`}},
		{".a |", []string{"line 1, column 5", "unexpected EOF"}},
		{".a\n| foo(", []string{"line 2, column 7", `(at "| foo(")`, "unexpected EOF"}},
		{`"abc`, []string{"line 1, column 5", "unterminated string literal"}},
		{`"\q"`, []string{"line 1, column 2", `invalid escape sequence "\q"`}},
		{"é | ]", []string{"line 1, column 1", `unexpected token "é"`}},
		{"{a: 1} | .a ]", []string{"line 1, column 13", `unexpected token "]"`}},
		{".[] | frob", []string{"invalid jq program", "function not defined: frob/0"}},
		{"$x", []string{"variable not defined: $x"}},
		{"input", []string{"input(s)/0 is not allowed"}},
		{`import "a" as a; .`, []string{`cannot load module: "a"`}},
		{`include "a"; .`, []string{`cannot load module: "a"`}},
		{strings.Repeat(" ", MaxProgramLength) + ".", []string{"65537 bytes long, more than the 65536 allowed"}},
	}
	for _, tt := range tests {
		_, err := CompileJQ(tt.program)
		if err == nil {
			t.Errorf("CompileJQ(%.40q) succeeded", tt.program)
			continue
		}
		if !errors.Is(err, ErrBadJQ) {
			t.Errorf("CompileJQ(%.40q): %v does not wrap ErrBadJQ", tt.program, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CompileJQ(%.40q): %q does not contain %q", tt.program, err, w)
			}
		}
	}
}

// runJQ runs program over the JSON input and returns the outputs encoded
// as compact JSON.
func runJQ(t *testing.T, ctx context.Context, program string, lim Limits, input string) ([]string, error) {
	t.Helper()
	q, err := CompileJQ(program)
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeEvent([]byte(input))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	err = q.WithLimits(lim).Run(ctx, v, func(v any) error {
		b, err := appendJSON(nil, v)
		if err != nil {
			return err
		}
		out = append(out, string(b))
		return nil
	})
	return out, err
}

func TestJQRun(t *testing.T) {
	event, err := os.ReadFile("testdata/event.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, program, input string
		want                 []string
	}{
		{"identity keeps numbers", ".", `{"a":12345678901234567890123,"b":1.50,"c":-0,"d":1e400}`,
			[]string{`{"a":12345678901234567890123,"b":1.50,"c":-0,"d":1e400}`}},
		{"number comparison", `select(.responseStatus.code == 200) | .auditID`, string(event),
			[]string{`"5b0d6a5e-8a2f-4c4e-9f3a-2d1f0c7e9b11"`}},
		{"number comparison false", `select(.responseStatus.code >= 400)`, string(event), nil},
		{"arithmetic on numbers", `.responseStatus.code + 1`, string(event), []string{"201"}},
		{"large integer stays exact", `.n`, `{"n":918273645918273645918273645}`, []string{"918273645918273645918273645"}},
		{"large integer arithmetic", `.n + 1`, `{"n":9007199254740993}`, []string{"9007199254740994"}},
		{"resource versions are strings", `.objectRef.resourceVersion`, string(event), []string{`"918273645"`}},
		{"several outputs", `.user.groups[]`, string(event),
			[]string{`"system:serviceaccounts"`, `"system:serviceaccounts:kube-system"`, `"system:authenticated"`}},
		{"object construction", `{verb, user: .user.username, code: .responseStatus.code}`, string(event),
			[]string{`{"code":200,"user":"system:serviceaccount:kube-system:endpoint-controller","verb":"update"}`}},
		{"no environment", `[env, $ENV]`, `null`, []string{`[{},{}]`}},
		{"halt stops quietly", `1, halt, 2`, `null`, []string{"1"}},
		{"html characters unescaped", `"<a&b>"`, `null`, []string{`"<a&b>"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runJQ(t, t.Context(), tt.program, Limits{}, tt.input)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("outputs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestJQRunErrors(t *testing.T) {
	tests := []struct {
		name, program string
		want          []string
	}{
		{"error builtin", `error("boom")`, []string{"jq program failed", "boom"}},
		{"type error", `.a.b`, []string{"jq program failed", "expected an object but got: string"}},
		{"halt_error", `"bad\n" | halt_error`, []string{"jq program failed", "bad"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runJQ(t, t.Context(), tt.program, Limits{}, `{"a":"x"}`)
			if !errors.Is(err, ErrJQFailed) {
				t.Fatalf("Run: %v, want ErrJQFailed", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestJQRunLimits(t *testing.T) {
	const timeout = 50 * time.Millisecond
	tests := []struct {
		name, program string
		lim           Limits
		wantOut       []string // nil: any outputs
		wantSetting   string
		wantText      string
	}{
		{"endless recursion", "def f: f; f", Limits{Timeout: timeout}, nil,
			"Timeout", "the query ran longer than 50ms (Limits.Timeout); narrow the time range or the filters, simplify the jq program, or raise the query timeout"},
		{"huge array", "[range(1e9)] | length", Limits{Timeout: timeout}, nil,
			"Timeout", "longer than 50ms"},
		{"endless output", "repeat(1)", Limits{Timeout: timeout, MaxOutputs: -1, MaxOutputBytes: -1}, nil,
			"Timeout", "longer than 50ms"},
		{"too many outputs", "range(10)", Limits{MaxOutputs: 3}, []string{"0", "1", "2"},
			"MaxOutputs", "more than 3 results (Limits.MaxOutputs); narrow the filters, make the jq program emit fewer values, or raise the output limit"},
		{"exactly the output limit", "range(3)", Limits{MaxOutputs: 3}, []string{"0", "1", "2"}, "", ""},
		{"too many bytes", `range(10) | tostring | . + "xxxxxxx"`, Limits{MaxOutputBytes: 33}, []string{`"0xxxxxxx"`, `"1xxxxxxx"`, `"2xxxxxxx"`},
			"MaxOutputBytes", "more than 33 bytes of results (Limits.MaxOutputBytes)"},
		{"memory", "[range(1e9)] | length", Limits{Timeout: time.Minute, MaxMemory: 16 << 20}, nil,
			"MaxMemory", "the jq program made the heap grow by more than 16 MiB (Limits.MaxMemory); build smaller values"},
		{"unlimited", "range(5)", Limits{MaxOutputs: -1, MaxOutputBytes: -1, Timeout: -1}, []string{"0", "1", "2", "3", "4"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runJQ(t, t.Context(), tt.program, tt.lim, `null`)
			if tt.wantOut != nil && strings.Join(got, ",") != strings.Join(tt.wantOut, ",") {
				t.Errorf("outputs %.200q, want %q", got, tt.wantOut)
			}
			if tt.wantSetting == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			var le *LimitError
			if !errors.As(err, &le) || !errors.Is(err, ErrLimit) {
				t.Fatalf("Run: %v, want a *LimitError", err)
			}
			if le.Setting != tt.wantSetting {
				t.Errorf("limit %s hit, want %s", le.Setting, tt.wantSetting)
			}
			if tt.wantSetting == "Timeout" && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v does not wrap context.DeadlineExceeded", err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("%q does not contain %q", err, tt.wantText)
			}
		})
	}
}

func TestJQRunCallerContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := runJQ(t, ctx, "def f: f; f", Limits{}, `null`)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrLimit) {
		t.Fatalf("Run with a cancelled context: %v, want context.Canceled and no limit", err)
	}
}

func TestJQRunEmitError(t *testing.T) {
	q, err := CompileJQ("range(5)")
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("client went away")
	n := 0
	err = q.Run(t.Context(), nil, func(any) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Fatalf("Run returned %v after %d outputs, want emit's error after 2", err, n)
	}
}

func TestJQString(t *testing.T) {
	q, err := CompileJQ(".verb")
	if err != nil {
		t.Fatal(err)
	}
	if q.String() != ".verb" || q.WithLimits(Limits{MaxOutputs: 1}).String() != ".verb" {
		t.Errorf("String() = %q", q.String())
	}
}

func TestDecodeEvent(t *testing.T) {
	for _, bad := range []string{"", "{", `{"a":1} {"b":2}`, `{"a":1}x`, "nul"} {
		if _, err := DecodeEvent([]byte(bad)); err == nil {
			t.Errorf("DecodeEvent(%q) succeeded", bad)
		}
	}
	for _, good := range []string{`{"a":1}`, " {\"a\":1}\r\n\t ", "[]", "1"} {
		if _, err := DecodeEvent([]byte(good)); err != nil {
			t.Errorf("DecodeEvent(%q): %v", good, err)
		}
	}
}
