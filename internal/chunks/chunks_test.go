package chunks

import (
	"bytes"
	"testing"
)

// TestChunks: items appended one after the other come back whole, one
// longer than a chunk included; after Reset the same chunks are filled
// again rather than new ones taken.
func TestChunks(t *testing.T) {
	type span struct{ c, off, end int32 }
	var c Chunks
	held := 0
	for round := range 2 {
		c.Reset()
		var spans []span
		var items [][]byte
		for i := range 3000 {
			item := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%1500)
			if i == 777 {
				item = bytes.Repeat([]byte{'z'}, Size+5)
			}
			n, b := c.Next()
			off := len(b)
			b = append(b, item...)
			c.Put(n, b)
			spans = append(spans, span{int32(n), int32(off), int32(len(b))})
			items = append(items, item)
		}
		for i, s := range spans {
			if got := c.Bytes(s.c, s.off, s.end); !bytes.Equal(got, items[i]) {
				t.Fatalf("round %d: item %d is %d bytes %.10q…, want %d bytes %.10q…", round, i, len(got), got, len(items[i]), items[i])
			}
		}
		if round == 0 {
			held = c.Len()
			if held < 3 {
				t.Fatalf("%d chunks: the test means to fill several", held)
			}
		} else if c.Len() != held {
			t.Errorf("filled again: %d chunks, first %d", c.Len(), held)
		}
	}
}
