package chunks

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

type keyed struct {
	us                 int64
	id, stage, cluster string
}

func (k keyed) item() string { return k.id + "/" + k.stage + "/" + k.cluster }

func collect(t *testing.T, s *Sorted) []string {
	t.Helper()
	var out []string
	err := s.Each(func(k Key, item []byte) error {
		if want := string(k.AuditID) + "/" + string(k.Stage) + "/" + string(k.Cluster); string(item) != want {
			t.Errorf("item %s has key %s", item, want)
		}
		out = append(out, string(item))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSortedOrder: items added in no order come out as the engine's ORDER
// BY ts, audit_id, stage, cluster would give them (ties on time broken by
// each key in turn, bytewise), reversed when descending, and an item
// whose key is the one before it (an event stored twice) once.
func TestSortedOrder(t *testing.T) {
	sorted := []keyed{
		{0, "b", "ResponseComplete", "x"},
		{1, "a", "ResponseComplete", "x"},
		{1, "b", "RequestReceived", "y"},
		{1, "b", "ResponseComplete", "x"},
		{1, "b", "ResponseComplete", "y"},
		{1, "b", "ResponseStarted", "x"},
		{1, "b\x00", "RequestReceived", "x"},
		{2, "B", "RequestReceived", "x"},
	}
	for _, desc := range []bool{false, true} {
		in := slices.Clone(sorted)
		in = append(in, sorted[3], sorted[0]) // stored twice
		// A fixed shuffle: every pair out of place.
		slices.Reverse(in)
		in[0], in[3] = in[3], in[0]
		in[5], in[1] = in[1], in[5]
		var s Sorted
		for _, k := range in {
			s.End(append(s.Begin(k.us, k.id, k.stage, k.cluster), k.item()...))
		}
		s.Sort(desc)
		var want []string
		for _, k := range sorted {
			want = append(want, k.item())
		}
		if desc {
			slices.Reverse(want)
		}
		if got := collect(t, &s); !slices.Equal(got, want) {
			t.Errorf("descending %v:\n got %q\nwant %q", desc, got, want)
		}
	}
}

// TestSortedNotEnded: an item begun and not ended (its bytes could not be
// made) is not kept, and leaves nothing in the next one.
func TestSortedNotEnded(t *testing.T) {
	var s Sorted
	_ = append(s.Begin(1, "lost", "RequestReceived", "x"), "half"...)
	s.End(append(s.Begin(2, "kept", "RequestReceived", "x"), "kept/RequestReceived/x"...))
	s.Sort(false)
	if got := collect(t, &s); !slices.Equal(got, []string{"kept/RequestReceived/x"}) {
		t.Errorf("got %q", got)
	}
}

// TestSortedChunks: more items than one chunk holds, one of them longer
// than a chunk, come back whole; filled again after Reset, the window
// reuses its chunks rather than taking new ones.
func TestSortedChunks(t *testing.T) {
	var items [][]byte
	for i := range 5000 {
		it := fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%977))
		if i == 1234 {
			it = fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("y", Size+10))
		}
		items = append(items, it)
	}
	var s Sorted
	nchunks := 0
	for round := range 2 {
		s.Reset()
		for i := len(items) - 1; i >= 0; i-- {
			s.End(append(s.Begin(int64(i), fmt.Sprintf("id-%05d", i), "ResponseComplete", "c"), items[i]...))
		}
		s.Sort(false)
		if s.Len() != len(items) {
			t.Fatalf("round %d: %d items, want %d", round, s.Len(), len(items))
		}
		i := 0
		err := s.Each(func(_ Key, got []byte) error {
			if !bytes.Equal(got, items[i]) {
				return fmt.Errorf("round %d: item %d is %.60s…, want %.60s…", round, i, got, items[i])
			}
			i++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			nchunks = s.chunks.Len()
			if nchunks < 3 {
				t.Fatalf("%d chunks: the test means to fill several", nchunks)
			}
		} else if s.chunks.Len() != nchunks {
			t.Errorf("filled again, the window has %d chunks, first %d", s.chunks.Len(), nchunks)
		}
	}
}
