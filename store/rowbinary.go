package store

// Framing of the embedded engine's RowBinaryWithNamesAndTypes output, for
// whatever decodes its rows (rowDecoder into Rows, scanDecoder into the
// destinations of Scan).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// rbRows decodes the rows of a RowBinaryWithNamesAndTypes result.
type rbRows interface {
	// bind takes the result's column names and types, before any row.
	bind(names, types []string) error
	// decode reads the row at the start of data and returns its length,
	// or errShort when data ends within it.
	decode(data []byte) (int, error)
	// emit hands on the row decode read last.
	emit() error
}

// rbStream splits the engine's output, chunk by chunk as the engine
// streams it, into the header (column count, names, types), handed to
// rows.bind, and rows, each decoded by rows.decode and handed on by
// rows.emit. The engine's streaming API formats each block as an output
// of its own, so a chunk that starts at a row boundary may start with the
// header again, which is skipped; a row that straddles two chunks is
// joined first.
type rbStream struct {
	rows   rbRows
	header []byte // the header as the first chunk had it; nil until read
	carry  []byte // the start of a row (or the header) whose end is in a later chunk
}

// errShort says the data ends within a row.
var errShort = errors.New("the data ends within a row")

// write decodes the rows of one chunk of output.
func (s *rbStream) write(chunk []byte) error {
	if s.header == nil { // the header, perhaps over several chunks
		data := chunk
		if len(s.carry) > 0 {
			s.carry = append(s.carry, chunk...)
			data = s.carry
		}
		n, err := s.readHeader(data)
		if errors.Is(err, errShort) {
			if len(s.carry) == 0 {
				s.carry = append(s.carry, chunk...)
			}
			return nil
		}
		if err != nil {
			return err
		}
		s.header = bytes.Clone(data[:n])
		s.carry = nil // data's memory is now rows' alone
		return s.decodeAll(data[n:])
	}
	if len(s.carry) > 0 {
		// Finish the straddling row with as much of the chunk as it
		// needs, growing the piece taken so a long row is copied a few
		// times at most, and never the whole chunk for a short one.
		base := len(s.carry)
		for taken := 0; ; {
			take := min(len(chunk)-taken, max(len(s.carry), 4<<10))
			s.carry = append(s.carry, chunk[taken:taken+take]...)
			taken += take
			n, err := s.rows.decode(s.carry)
			if errors.Is(err, errShort) && taken < len(chunk) {
				continue
			}
			if errors.Is(err, errShort) {
				return nil // the row goes on in the next chunk
			}
			if err != nil {
				return err
			}
			if err := s.rows.emit(); err != nil {
				return err
			}
			chunk = chunk[n-base:]
			s.carry = s.carry[:0]
			break
		}
	} else if bytes.HasPrefix(chunk, s.header) {
		// A block's output of its own, header first. (A row that began
		// with the header's bytes would need a first column value of
		// exactly the header's shape; engine output is trusted.)
		chunk = chunk[len(s.header):]
	}
	return s.decodeAll(chunk)
}

// decodeAll decodes the whole rows of data, keeping the start of a row
// that does not end in it.
func (s *rbStream) decodeAll(data []byte) error {
	for len(data) > 0 {
		n, err := s.rows.decode(data)
		if errors.Is(err, errShort) {
			s.carry = append(s.carry[:0], data...)
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.rows.emit(); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// end reports output that stopped within a row.
func (s *rbStream) end() error {
	if len(s.carry) > 0 {
		return fmt.Errorf("the output ends within a row (%d bytes of it)", len(s.carry))
	}
	return nil
}

// readHeader reads the header at the start of data, hands it to
// rows.bind and returns its length.
func (s *rbStream) readHeader(data []byte) (int, error) {
	rd := rbReader{b: data}
	n := rd.uvarint()
	if n > uint64(len(data)) {
		rd.short = true
	}
	if rd.short {
		return 0, errShort
	}
	names := make([]string, n)
	for i := range names {
		names[i] = string(rd.bytes())
	}
	types := make([]string, n)
	for i := range types {
		types[i] = string(rd.bytes())
	}
	if rd.short {
		return 0, errShort
	}
	if n == 0 {
		return 0, errors.New("a result without columns")
	}
	if err := s.rows.bind(names, types); err != nil {
		return 0, err
	}
	return rd.i, nil
}

// maxInterned bounds the distinct LowCardinality values an interner
// keeps.
const maxInterned = 4096

// interner hands out one string per distinct LowCardinality value, so
// that repeated values (verbs, users, user agents, …) are allocated once.
type interner struct{ m map[string]string }

// str returns v as a string, the interned one when lc is set.
func (in *interner) str(v []byte, lc bool) string {
	if !lc {
		return string(v)
	}
	if s, ok := in.m[string(v)]; ok { // no allocation to look up
		return s
	}
	s := string(v)
	if len(in.m) < maxInterned {
		if in.m == nil {
			in.m = make(map[string]string)
		}
		in.m[s] = s
	}
	return s
}

// rbReader reads RowBinary values from b; reading past its end sets short
// and yields zero values.
type rbReader struct {
	b     []byte
	i     int
	short bool
}

func (r *rbReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b[r.i:])
	if n <= 0 {
		r.short = true // the engine writes no overlong varint
		r.i = len(r.b)
		return 0
	}
	r.i += n
	return v
}

// count reads an Array's or Map's length, which cannot exceed the bytes
// left (every element takes one at least).
func (r *rbReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.i) {
		r.short = true
		r.i = len(r.b)
		return 0
	}
	return int(n)
}

func (r *rbReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.i) {
		r.short = true
		r.i = len(r.b)
		return nil
	}
	v := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return v
}

// raw reads the next n bytes.
func (r *rbReader) raw(n int) []byte {
	if len(r.b)-r.i < n {
		r.short = true
		r.i = len(r.b)
		return nil
	}
	v := r.b[r.i : r.i+n]
	r.i += n
	return v
}

// fixed reads a little-endian integer of size bytes (1, 2, 4 or 8).
func (r *rbReader) fixed(size int) uint64 {
	if len(r.b)-r.i < size {
		r.short = true
		r.i = len(r.b)
		return 0
	}
	b := r.b[r.i : r.i+size]
	r.i += size
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}
