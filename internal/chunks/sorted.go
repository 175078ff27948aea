package chunks

import (
	"bytes"
	"cmp"
	"slices"
)

// Sorted holds the items of one time window of an export, each with its
// event's key, and hands them out in the order of the events table: by
// time, then audit ID, stage and cluster, strings compared bytewise as the
// engine compares them. An item whose key equals the one before it (an
// event stored twice) is left out. The keys' bytes lie in the chunks
// beside the items: three strings of their own per item were most of an
// export's allocations. The zero value is empty and ready.
type Sorted struct {
	chunks Chunks
	items  []item
	open   item // the item Begin started
}

// item is where one item's key (audit ID, stage and cluster, one after
// the other) and then its bytes lie in its chunk.
type item struct {
	time                        int64 // microseconds, as the engine compares DateTime64(6)
	chunk                       int32
	off, idEnd, stageEnd, start int32 // key: [off, start); the item: [start, end)
	end                         int32
}

// Key is an item's event key, its bytes in the chunks: valid until Reset.
type Key struct {
	AuditID, Stage, Cluster []byte
}

// Begin starts an item with its key: the caller appends the item's bytes
// to the returned buffer and hands it to End. An item not ended (its
// bytes could not be made) is not kept.
func (s *Sorted) Begin(time int64, auditID, stage, cluster string) []byte {
	c, buf := s.chunks.Next()
	it := item{time: time, chunk: int32(c), off: int32(len(buf))}
	buf = append(buf, auditID...)
	it.idEnd = int32(len(buf))
	buf = append(buf, stage...)
	it.stageEnd = int32(len(buf))
	buf = append(buf, cluster...)
	it.start = int32(len(buf))
	s.open = it
	return buf
}

// End keeps the item Begin started, buf being Begin's buffer with the
// item's bytes appended.
func (s *Sorted) End(buf []byte) {
	it := s.open
	it.end = int32(len(buf))
	s.chunks.Put(int(it.chunk), buf)
	s.items = append(s.items, it)
}

// Len is the number of items held, copies of an event included.
func (s *Sorted) Len() int { return len(s.items) }

func (s *Sorted) key(it *item) Key {
	k := s.chunks.Bytes(it.chunk, it.off, it.start)
	id, st := it.idEnd-it.off, it.stageEnd-it.off
	return Key{AuditID: k[:id:id], Stage: k[id:st:st], Cluster: k[st:]}
}

func (s *Sorted) compare(a, b *item) int {
	if c := cmp.Compare(a.time, b.time); c != 0 {
		return c
	}
	ka, kb := s.key(a), s.key(b)
	return cmp.Or(bytes.Compare(ka.AuditID, kb.AuditID), bytes.Compare(ka.Stage, kb.Stage), bytes.Compare(ka.Cluster, kb.Cluster))
}

// Sort puts the items in order, descending when asked.
func (s *Sorted) Sort(descending bool) {
	slices.SortStableFunc(s.items, func(a, b item) int {
		if descending {
			return s.compare(&b, &a)
		}
		return s.compare(&a, &b)
	})
}

// Each calls fn with each item in order and its key, an item with the key
// of the one before it left out, until fn returns an error, which it
// returns.
func (s *Sorted) Each(fn func(k Key, item []byte) error) error {
	for i := range s.items {
		it := &s.items[i]
		if i > 0 && s.compare(it, &s.items[i-1]) == 0 {
			continue
		}
		if err := fn(s.key(it), s.chunks.Bytes(it.chunk, it.start, it.end)); err != nil {
			return err
		}
	}
	return nil
}

// Reset empties s for the next window, keeping its memory.
func (s *Sorted) Reset() {
	s.chunks.Reset()
	s.items = s.items[:0]
}
