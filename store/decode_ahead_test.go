package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestDecodeAhead: decode sees every chunk in order and whole, although
// the stream reuses its buffer once take returns; decode's first error
// stops the stream within the chunks already handed over and is what
// comes back, and decode is not called again; a stream's own error comes
// back as it was.
func TestDecodeAhead(t *testing.T) {
	const n = 200
	stream := func(stopped *int) func(take func([]byte) error) error {
		return func(take func([]byte) error) error {
			buf := make([]byte, 0, 64)
			for i := range n {
				buf = fmt.Appendf(buf[:0], "chunk %d", i) // the engine's chunk is gone after take
				if err := take(buf); err != nil {
					*stopped = i
					return fmt.Errorf("stream: %w", err)
				}
			}
			return nil
		}
	}

	var got []string
	var stopped int
	err := decodeAhead(stream(&stopped), func(b []byte) error {
		got = append(got, string(b))
		return nil
	})
	if err != nil || len(got) != n {
		t.Fatalf("got %d chunks, %v; want %d, nil", len(got), err, n)
	}
	for i, g := range got {
		if want := fmt.Sprintf("chunk %d", i); g != want {
			t.Fatalf("chunk %d is %q, want %q", i, g, want)
		}
	}

	bad := errors.New("bad chunk")
	calls := 0
	stopped = -1
	err = decodeAhead(stream(&stopped), func(b []byte) error {
		calls++
		if string(b) == "chunk 10" {
			return bad
		}
		return nil
	})
	if !errors.Is(err, bad) || err != bad {
		t.Errorf("decode's error: got %v, want it as it was", err)
	}
	if calls != 11 {
		t.Errorf("decode called %d times, want 11 (not after its error)", calls)
	}
	if stopped < 10 || stopped > 10+aheadChunks+1 {
		t.Errorf("the stream stopped at chunk %d, want soon after chunk 10", stopped)
	}

	broken := errors.New("engine failed")
	err = decodeAhead(func(take func([]byte) error) error {
		if err := take([]byte("one")); err != nil {
			return err
		}
		return broken
	}, func([]byte) error { return nil })
	if err != broken {
		t.Errorf("the stream's error: got %v, want %v", err, broken)
	}
}
