package relist

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"

	"github.com/auditlens/auditlens/store"
)

// cannedQuerier answers each query with the rows answer gives for it:
// values whose JSON form (an object; numbers as Int64 or Float64, arrays
// of the first element's type) gives the result's columns and values.
type cannedQuerier func(sql string, p store.Params) []any

func (q cannedQuerier) Scan(_ context.Context, sql string, p store.Params, bind func([]store.Column) ([]any, error), row func() error) error {
	var (
		names []string
		dests []any
	)
	for _, r := range q(sql, p) {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var obj map[string]any
		if err := d.Decode(&obj); err != nil {
			return err
		}
		if names == nil {
			names = slices.Sorted(maps.Keys(obj))
			cols := make([]store.Column, len(names))
			for i, n := range names {
				cols[i] = store.Column{Name: n, Type: cannedType(obj[n])}
			}
			if dests, err = bind(cols); err != nil {
				return err
			}
		}
		for i, n := range names {
			if err := cannedSet(reflect.ValueOf(dests[i]).Elem(), obj[n]); err != nil {
				return fmt.Errorf("column %s: %w", n, err)
			}
		}
		if err := row(); err != nil {
			return err
		}
	}
	return nil
}

// cannedType is the ClickHouse type of a JSON value.
func cannedType(v any) string {
	switch v := v.(type) {
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "Int64"
		}
		return "Float64"
	case bool:
		return "Bool"
	case []any:
		if len(v) == 0 {
			return "Array(String)"
		}
		return "Array(" + cannedType(v[0]) + ")"
	}
	return "String"
}

// cannedSet stores the JSON value v in dst, of its cannedType's Go type.
func cannedSet(dst reflect.Value, v any) error {
	switch v := v.(type) {
	case json.Number:
		if dst.CanInt() {
			n, err := v.Int64()
			dst.SetInt(n)
			return err
		}
		f, err := v.Float64()
		dst.SetFloat(f)
		return err
	case bool:
		dst.SetBool(v)
	case string:
		dst.SetString(v)
	case []any:
		s := reflect.MakeSlice(dst.Type(), len(v), len(v))
		for i := range v {
			if err := cannedSet(s.Index(i), v[i]); err != nil {
				return err
			}
		}
		dst.Set(s)
	default:
		return fmt.Errorf("no canned column for %T", v)
	}
	return nil
}

// TestRelistMemoryBounded evaluates relist-herd and relist-loop over
// many windows, each holding a herd or a loop of its own (a new finding
// ID), as serve does for as long as it runs: the figures the detectors
// keep for merging stay bounded, and the latest evaluation's are kept.
func TestRelistMemoryBounded(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	evaluations := 3 * recentFindings
	window := func(i int) detect.Window {
		since := start.Add(time.Duration(i) * 10 * time.Minute)
		return detect.Window{Since: since, Until: since.Add(10 * time.Minute), Clusters: []string{"c"}}
	}

	t.Run("relist-herd", func(t *testing.T) {
		d := NewHerd(HerdConfig{})
		var last detect.Finding
		for i := range evaluations {
			w := window(i)
			at := w.Since.Add(2 * time.Minute)
			q := cannedQuerier(func(sql string, _ store.Params) []any {
				switch {
				case strings.Contains(sql, "SELECT DISTINCT cluster, q_group"):
					return []any{map[string]any{"cluster": "c", "api_group": "", "resource": "pods"}}
				case strings.Contains(sql, "AS wins"):
					return []any{map[string]any{"cluster": "c", "api_group": "", "resource": "pods",
						"wins": []int64{at.Unix() / 30 * 30}, "counts": []int{12}}}
				case strings.Contains(sql, "AS relists"):
					var rows []any
					for k := range 12 {
						rows = append(rows, herdClient{Client: fmt.Sprint(k), AuditID: fmt.Sprintf("%d-%d", i, k), Stage: "ResponseComplete",
							Start: at.Add(time.Duration(k) * time.Second).UnixMicro(), User: fmt.Sprintf("system:node:node-%d", k),
							Verb: "list", Code: 200, Relists: 1})
					}
					return rows
				case strings.Contains(sql, "FROM findings"):
					return nil
				case strings.Contains(sql, "min(ts)"):
					return []any{map[string]any{"cluster": "c", "first": w.Since.UnixMicro(), "last": w.Until.UnixMicro() - 1}}
				}
				t.Fatalf("unexpected query %.200s", sql)
				return nil
			})
			fs, err := d.Evaluate(ctx, q, w)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != 1 {
				t.Fatalf("window %d: %d findings, want 1", i, len(fs))
			}
			last = fs[0]
		}
		if n := d.figs.Len(); n > recentFindings {
			t.Errorf("%d herds' figures kept after %d evaluations, want at most %d", n, evaluations, recentFindings)
		}
		if _, ok := d.figs.Load(last.ID); !ok {
			t.Error("the latest herd's figures are gone")
		}
	})

	t.Run("relist-loop", func(t *testing.T) {
		d := NewLoop(LoopConfig{})
		var last detect.Finding
		for i := range evaluations {
			w := window(i)
			ident := fmt.Sprint(i) // another client each time
			q := cannedQuerier(func(sql string, _ store.Params) []any {
				switch {
				case strings.Contains(sql, "AS seq FROM"):
					return []any{map[string]any{"seq": "1"}}
				case strings.Contains(sql, "n_relist"):
					var rows []any
					for k := range 3 {
						at := w.Since.Add(time.Minute + time.Duration(k)*30*time.Second)
						rows = append(rows, turnRow{Reflector: events.Reflector{Cluster: "c", Ident: ident, User: "system:serviceaccount:x:" + ident,
							Program: "op", Resource: "pods"}, Seq: "1", AuditID: fmt.Sprintf("%d-w%d", i, k), Stage: "RequestReceived",
							Start: at.UnixMicro(), End: at.Add(10 * time.Millisecond).UnixMicro(), NextID: fmt.Sprintf("%d-l%d", i, k),
							NextStage: "RequestReceived", NextStart: at.Add(time.Second).UnixMicro(), NextVerb: "list"})
					}
					return rows
				}
				t.Fatalf("unexpected query %.200s", sql)
				return nil
			})
			fs, err := d.Evaluate(ctx, q, w)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != 1 {
				t.Fatalf("window %d: %d findings, want 1", i, len(fs))
			}
			last = fs[0]
		}
		if n := d.stats.Len(); n > recentFindings {
			t.Errorf("%d loops' figures kept after %d evaluations, want at most %d", n, evaluations, recentFindings)
		}
		if _, ok := d.stats.Load(last.ID); !ok {
			t.Error("the latest loop's figures are gone")
		}
	})
}

func TestRecent(t *testing.T) {
	r := newRecent[int](2)
	r.Store("a", 1)
	r.Store("b", 2)
	if v, ok := r.Load("a"); !ok || v != 1 { // a is now the most recent
		t.Fatalf("a = %d, %v", v, ok)
	}
	r.Store("c", 3) // drops b
	if _, ok := r.Load("b"); ok {
		t.Error("b kept")
	}
	r.Store("a", 4)
	if v, _ := r.Load("a"); v != 4 || r.Len() != 2 {
		t.Errorf("a = %d, %d kept", v, r.Len())
	}
}
