package ingest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/auditlens/auditlens/gen/auditgen"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// captureStore keeps what Insert was given and stores nothing; its first
// inserts fail when fail is set.
type captureStore struct {
	inserted []store.Row
	fail     int
}

func (c *captureStore) Insert(_ context.Context, rows []store.Row) error {
	if c.fail > 0 {
		c.fail--
		return errors.New("connection refused")
	}
	c.inserted = append(c.inserted, rows...)
	return nil
}

func (c *captureStore) Scan(context.Context, string, store.Params, func([]store.Column) ([]any, error), func() error) error {
	return nil
}

// TestWriterStoresResiduals: the writer hands the store each event as its
// residual with raw empty, the residual rebuilds the event, and the
// caller's rows keep their raw bytes, so that a failed write is retried
// from them whole.
func TestWriterStoresResiduals(t *testing.T) {
	b, err := DecodeBody("c", auditgen.New(9, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)).EventListBody(300))
	if err != nil {
		t.Fatal(err)
	}
	rows := b.Rows
	raws := make([][]byte, len(rows))
	for i := range rows {
		raws[i] = bytes.Clone(rows[i].Raw)
	}
	st := &captureStore{fail: 1}
	w := NewWriter(st, WriterConfig{Parallel: 1})
	if _, err := w.Write(t.Context(), rows); err == nil {
		t.Fatal("the failing insert succeeded")
	}
	if _, err := w.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	if len(st.inserted) != len(rows) {
		t.Fatalf("%d rows inserted, want %d", len(st.inserted), len(rows))
	}
	for i, r := range st.inserted {
		if len(r.Raw) != 0 || len(r.Residual) == 0 && !bytes.Equal(residual.Skeleton(&r), raws[i]) {
			t.Fatalf("row %d stored with raw %q and residual %q", i, r.Raw, r.Residual)
		}
		got, err := residual.Rebuild(&r, r.Residual)
		if err != nil || !bytes.Equal(got, raws[i]) {
			t.Fatalf("row %d rebuilds as %s (%v), want %s", i, got, err, raws[i])
		}
		if !bytes.Equal(rows[i].Raw, raws[i]) || rows[i].Residual != nil {
			t.Fatalf("the caller's row %d changed", i)
		}
	}
}

// TestWriterColumnsOnly: with ColumnsOnly the store gets each row's typed
// columns and neither the event nor its residual, and the caller's rows
// keep their raw bytes.
func TestWriterColumnsOnly(t *testing.T) {
	b, err := DecodeBody("c", auditgen.New(9, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)).EventListBody(300))
	if err != nil {
		t.Fatal(err)
	}
	rows := b.Rows
	st := &captureStore{}
	if _, err := NewWriter(st, WriterConfig{Parallel: 1, ColumnsOnly: true}).Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	if len(st.inserted) != len(rows) {
		t.Fatalf("%d rows inserted, want %d", len(st.inserted), len(rows))
	}
	for i, r := range st.inserted {
		want := rows[i]
		want.Raw = nil
		if r.Raw != nil || r.Residual != nil || r.Key() != rows[i].Key() || r.RequestURI != want.RequestURI || r.User != want.User {
			t.Fatalf("row %d stored as %+v, want the columns of %+v without raw or residual", i, r, want)
		}
		if len(rows[i].Raw) == 0 {
			t.Fatalf("the caller's row %d lost its raw bytes", i)
		}
	}
}
