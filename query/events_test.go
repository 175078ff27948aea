package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/auditlens/auditlens/store"
)

// fakeSelecter returns canned rows and remembers the query it was asked.
type fakeSelecter struct {
	rows   []store.Row
	err    error // returned after the rows
	block  bool  // wait for the context to end instead of returning
	sql    string
	params store.Params
}

func (s *fakeSelecter) SelectRows(ctx context.Context, sql string, params store.Params, fn func(r *store.Row) error) error {
	s.sql, s.params = sql, params
	for i := range s.rows {
		r := s.rows[i] // a copy: fn may not keep it
		if err := fn(&r); err != nil {
			return fmt.Errorf("fake engine: %w", err) // engines may wrap fn's error
		}
	}
	if s.block {
		<-ctx.Done()
		return fmt.Errorf("fake engine: %w", ctx.Err())
	}
	return s.err
}

// Scan returns each row's key and raw event.
func (s *fakeSelecter) Scan(ctx context.Context, sql string, params store.Params, bind func([]store.Column) ([]any, error), row func() error) error {
	dests, err := bind([]store.Column{{Name: "cluster", Type: "String"}, {Name: "audit_id", Type: "String"},
		{Name: "stage", Type: "String"}, {Name: "raw", Type: "String"}})
	if err != nil {
		return err
	}
	return s.SelectRows(ctx, sql, params, func(r *store.Row) error {
		for i, v := range []string{r.Cluster, r.AuditID, r.Stage, string(r.Raw)} {
			*dests[i].(*string) = v
		}
		return row()
	})
}

func row(id, raw string) store.Row {
	return store.Row{Cluster: "prod", AuditID: id, Stage: "ResponseComplete", Raw: []byte(raw)}
}

// flushWriter counts Flush calls, as an http.ResponseWriter would see them.
type flushWriter struct {
	bytes.Buffer
	flushes int
}

func (w *flushWriter) Flush() { w.flushes++ }

func mustJQ(t testing.TB, program string) *JQ {
	t.Helper()
	q, err := CompileJQ(program)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestEvents(t *testing.T) {
	rows := []store.Row{
		row("a", `{"auditID":"a","verb":"get","n":12345678901234567890}`),
		row("b", `{ "auditID" : "b", "verb": "watch" }`),
		row("c", "{\n  \"auditID\": \"c\",\n  \"verb\": \"watch\",\n  \"s\": \"x\\ny\"\n}"),
	}
	tests := []struct {
		name      string
		jq        string
		f         Filter
		want      string
		wantStats Stats
	}{
		{
			name:      "raw events as stored",
			want:      `{"auditID":"a","verb":"get","n":12345678901234567890}` + "\n" + `{ "auditID" : "b", "verb": "watch" }` + "\n" + `{"auditID":"c","verb":"watch","s":"x\ny"}` + "\n",
			wantStats: Stats{Matched: 3, Emitted: 3, Bytes: 133},
		},
		{
			name:      "jq outputs",
			jq:        `select(.verb == "watch") | .auditID, {verb}`,
			want:      "\"b\"\n{\"verb\":\"watch\"}\n\"c\"\n{\"verb\":\"watch\"}\n",
			wantStats: Stats{Matched: 3, Emitted: 4, Bytes: 42},
		},
		{
			name:      "numbers keep their digits",
			jq:        `.n // empty`,
			want:      "12345678901234567890\n",
			wantStats: Stats{Matched: 3, Emitted: 1, Bytes: 21},
		},
		{
			name:      "halt ends the query",
			jq:        `.auditID, halt`,
			want:      "\"a\"\n",
			wantStats: Stats{Matched: 1, Emitted: 1, Bytes: 4},
		},
		{
			name:      "limit reached",
			f:         Filter{Limit: 2},
			jq:        `empty`,
			wantStats: Stats{Matched: 2, Truncated: true},
		},
		{
			// Truncated means more events match, not that the limit
			// was met.
			name:      "limit met exactly",
			f:         Filter{Limit: 3},
			jq:        `empty`,
			wantStats: Stats{Matched: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var jq *JQ
			if tt.jq != "" {
				jq = mustJQ(t, tt.jq)
			}
			st := &fakeSelecter{rows: rows}
			var w bytes.Buffer
			stats, err := Events(t.Context(), st, tt.f, jq, Limits{}, &w)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			if w.String() != tt.want {
				t.Errorf("wrote\n%s\nwant\n%s", w.String(), tt.want)
			}
			if stats != tt.wantStats {
				t.Errorf("stats %+v, want %+v", stats, tt.wantStats)
			}
			if !strings.Contains(st.sql, "SELECT "+eventColumns+"\nFROM audit_events\n") {
				t.Errorf("query:\n%s", st.sql)
			}
		})
	}
}

func TestEventsErrors(t *testing.T) {
	storeErr := errors.New("connection reset")
	tests := []struct {
		name     string
		st       *fakeSelecter
		f        Filter
		jq       string
		lim      Limits
		wantOut  string
		wantIs   error
		wantText []string
	}{
		{
			name:     "bad filter",
			st:       &fakeSelecter{},
			f:        Filter{Limit: -1},
			wantIs:   ErrBadFilter,
			wantText: []string{"limit -1"},
		},
		{
			name:     "store error",
			st:       &fakeSelecter{rows: []store.Row{row("a", `{}`)}, err: storeErr},
			wantOut:  "{}\n",
			wantIs:   storeErr,
			wantText: []string{"selecting events: connection reset"},
		},
		{
			name: "jq error names the event",
			st: &fakeSelecter{rows: []store.Row{
				row("a", `{"user":{"username":"alice"}}`),
				row("b'x", `{"user":"bob"}`),
				row("c", `{"user":{"username":"carol"}}`),
			}},
			jq:       `.user.username`,
			wantOut:  "\"alice\"\n",
			wantIs:   ErrJQFailed,
			wantText: []string{`event "b'x" (cluster "prod", stage ResponseComplete): jq program failed: expected an object but got: string ("bob")`},
		},
		{
			name:     "output limit across events",
			st:       &fakeSelecter{rows: []store.Row{row("a", `{}`), row("b", `{}`), row("c", `{}`)}},
			jq:       `1, 2`,
			lim:      Limits{MaxOutputs: 3},
			wantOut:  "1\n2\n1\n",
			wantIs:   ErrLimit,
			wantText: []string{"more than 3 results (Limits.MaxOutputs)"},
		},
		{
			name:     "memory limit",
			st:       &fakeSelecter{rows: []store.Row{row("a", `{}`), row("b", `{}`)}},
			jq:       `"x", [range(1e9)]`,
			lim:      Limits{MaxMemory: 16 << 20},
			wantOut:  "\"x\"\n",
			wantIs:   ErrLimit,
			wantText: []string{"more than 16 MiB (Limits.MaxMemory)"},
		},
		{
			name:     "byte limit on raw events",
			st:       &fakeSelecter{rows: []store.Row{row("a", `{"a":1}`), row("b", `{"b":2}`)}},
			lim:      Limits{MaxOutputBytes: 10},
			wantOut:  "{\"a\":1}\n",
			wantIs:   ErrLimit,
			wantText: []string{"more than 10 bytes of results (Limits.MaxOutputBytes)"},
		},
		{
			name:     "empty stored event",
			st:       &fakeSelecter{rows: []store.Row{row("a", " \n")}},
			wantText: []string{`event "a" (cluster "prod", stage ResponseComplete): the stored event is empty`},
		},
		{
			name:     "stored event that is not JSON, for jq",
			st:       &fakeSelecter{rows: []store.Row{row("a", `{"a":`)}},
			jq:       ".",
			wantText: []string{`event "a" (cluster "prod", stage ResponseComplete): decoding the stored event: unexpected EOF`},
		},
		{
			name:     "multi-line stored event that is not JSON",
			st:       &fakeSelecter{rows: []store.Row{row("a", "{\n\"a\":")}},
			wantText: []string{`event "a"`, "compacting the stored event"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var jq *JQ
			if tt.jq != "" {
				jq = mustJQ(t, tt.jq)
			}
			var w bytes.Buffer
			_, err := Events(t.Context(), tt.st, tt.f, jq, tt.lim, &w)
			if err == nil {
				t.Fatal("Events succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q does not wrap %q", err, tt.wantIs)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if w.String() != tt.wantOut {
				t.Errorf("wrote %q, want %q", w.String(), tt.wantOut)
			}
		})
	}
}

func TestEventsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fakeSelecter{rows: []store.Row{row("a", `{}`)}, block: true}
		var w bytes.Buffer
		start := time.Now()
		stats, err := Events(t.Context(), st, Filter{}, nil, Limits{Timeout: 5 * time.Second}, &w)
		var le *LimitError
		if !errors.As(err, &le) || le.Setting != "Timeout" || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Events: %v, want a Timeout *LimitError", err)
		}
		if !strings.Contains(err.Error(), "the query ran longer than 5s (Limits.Timeout)") {
			t.Errorf("error %q", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("gave up after %v, want 5s", d)
		}
		if w.String() != "{}\n" || stats.Emitted != 1 {
			t.Errorf("wrote %q (%+v), want the event read before the timeout", w.String(), stats)
		}
	})
}

func TestEventsCallerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		st := &fakeSelecter{block: true}
		_, err := Events(ctx, st, Filter{}, nil, Limits{Timeout: time.Hour}, &bytes.Buffer{})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLimit) {
			t.Fatalf("Events: %v, want the caller's deadline, not a limit", err)
		}
	})
}

func TestEventsFlushes(t *testing.T) {
	rows := make([]store.Row, 2*flushEvery+1)
	for i := range rows {
		rows[i] = row(fmt.Sprint(i), fmt.Sprintf(`{"i":%d}`, i))
	}
	var w flushWriter
	stats, err := Events(t.Context(), &fakeSelecter{rows: rows}, Filter{}, nil, Limits{}, &w)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Emitted != len(rows) || strings.Count(w.String(), "\n") != len(rows) {
		t.Fatalf("wrote %d lines (%+v), want %d", strings.Count(w.String(), "\n"), stats, len(rows))
	}
	if w.flushes != 3 {
		t.Errorf("flushed %d times, want 3 (every %d lines and at the end)", w.flushes, flushEvery)
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestEventsWriteError(t *testing.T) {
	rows := make([]store.Row, flushEvery)
	for i := range rows {
		rows[i] = row(fmt.Sprint(i), `{}`)
	}
	_, err := Events(t.Context(), &fakeSelecter{rows: rows}, Filter{}, nil, Limits{}, failWriter{})
	if err == nil || !strings.Contains(err.Error(), "writing results: broken pipe") {
		t.Fatalf("Events: %v, want the write error", err)
	}
}

func TestEventsPassesFilter(t *testing.T) {
	st := &fakeSelecter{}
	f := Filter{Verb: []string{"watch"}, Order: Desc, Limit: 7}
	if _, err := Events(t.Context(), st, f, nil, Limits{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	wantSQL, wantParams := f.SQL(eventColumns)
	if st.sql != wantSQL || fmt.Sprint(st.params) != fmt.Sprint(wantParams) {
		t.Errorf("query\n%s\n%v\nwant\n%s\n%v", st.sql, st.params, wantSQL, wantParams)
	}
}

// TestEventsNoFlushWithoutLines checks a query that fails before it
// wrote a line leaves the caller's writer unflushed, so an HTTP handler
// can still answer with an error status.
func TestEventsNoFlushWithoutLines(t *testing.T) {
	var w flushWriter
	st := &fakeSelecter{rows: []store.Row{row("a", `{"a":"x"}`)}}
	if _, err := Events(t.Context(), st, Filter{}, mustJQ(t, ".a.b"), Limits{}, &w); !errors.Is(err, ErrJQFailed) {
		t.Fatalf("Events: %v", err)
	}
	if w.flushes != 0 || w.Len() != 0 {
		t.Errorf("flushed %d times, wrote %q; want nothing", w.flushes, w.String())
	}
}
