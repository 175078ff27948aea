// Package chunks keeps many short byte strings — the rows or events of
// one time window of an export — in chunks of a fixed size, kept from one
// window to the next, rather than in one buffer. A buffer of a window's
// size (~60-120 MB) grows by copying itself, a copy that long cannot be
// preempted (the garbage collector's stack scan spun on it, signalling),
// and each larger buffer is fresh memory to fault in.
package chunks

// Size is the size of a chunk. An item longer than a chunk's room grows
// the chunk (rare: audit events are ~1 KiB).
const Size = 1 << 20

// Chunks is a reusable set of chunks. The zero value is empty and ready.
type Chunks struct {
	chunks [][]byte
	used   int // chunks[:used] hold this round's items
}

// Next returns the chunk the next item is to be appended to, and its
// index for Put: the last one in use, or a fresh (or reused) one when
// less than a sixteenth of a chunk is left in it.
func (c *Chunks) Next() (int, []byte) {
	if c.used == 0 || cap(c.chunks[c.used-1])-len(c.chunks[c.used-1]) < Size/16 {
		if c.used == len(c.chunks) {
			c.chunks = append(c.chunks, make([]byte, 0, Size))
		}
		c.used++
	}
	return c.used - 1, c.chunks[c.used-1]
}

// Put keeps b, the chunk Next returned as i with items appended.
func (c *Chunks) Put(i int, b []byte) { c.chunks[i] = b }

// Bytes returns the bytes [off, end) of chunk i.
func (c *Chunks) Bytes(i int32, off, end int32) []byte { return c.chunks[i][off:end] }

// Reset empties every chunk for the next round, keeping their memory.
func (c *Chunks) Reset() {
	for i := range c.chunks[:c.used] {
		c.chunks[i] = c.chunks[i][:0]
	}
	c.used = 0
}

// Len is the number of chunks held, in use or not.
func (c *Chunks) Len() int { return len(c.chunks) }
