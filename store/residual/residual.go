// Package residual stores an audit event as what its typed columns cannot
// restore, and rebuilds the event from the columns and that residual.
//
// Most of a Metadata-level event is already in the typed columns of
// audit_events (store.Row): its level, IDs, URI, user, object reference,
// status code, times and annotations. Split compares the event as
// received with the Skeleton, the JSON those columns alone produce, and
// keeps only the difference; Rebuild applies it to the skeleton of the row
// read back. The rebuilt event is the same JSON value as the original (the
// same keys, values, string bytes, numbers as written, nesting; the order
// of keys may differ) whatever the input, by construction: a member of the
// original is left out of the residual only when the skeleton writes the
// same key with a byte-identical value, every other member is kept with
// its original bytes, and keys the skeleton writes that the original
// lacks are listed for deletion. An event that cannot be taken apart so
// (not a JSON object, a key repeated or written with escapes) is kept
// whole.
//
// # Format
//
// A residual is one of:
//
//	""              the event is the skeleton
//	'v' EVENT       the event verbatim
//	'p' OPS         the skeleton patched by OPS
//
// where OPS is a sequence of
//
//	's' KEY VALUE   set KEY to VALUE (JSON text), replacing or adding it
//	'd' KEY         delete KEY
//	'o' KEY OPS     patch the object at KEY with OPS (length-prefixed)
//
// KEY, VALUE and a nested OPS are a uvarint length and that many bytes. A
// key is as written between its quotes in the original, which has no
// escapes (see objectMembers).
//
// The skeleton is part of the stored format: a stored residual means
// "this skeleton, patched", so what Skeleton writes for a row, and which
// columns it reads, must not change for the residuals already stored. A
// different skeleton needs its own mark beside 'p'.
package residual

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/auditlens/auditlens/store"
)

const (
	markVerbatim = 'v'
	markPatch    = 'p'
	opSet        = 's'
	opDelete     = 'd'
	opObject     = 'o'
)

// ErrCorrupt is wrapped by Rebuild's errors: the residual is not one Split
// writes for this row.
var ErrCorrupt = errors.New("corrupt event residual")

// splitter is the scratch space of one Split.
type splitter struct {
	sk     skeleton
	top    []member
	sub    []member
	ops    []byte
	nested []byte
}

var splitters = sync.Pool{New: func() any { return new(splitter) }}

// Split returns the residual of raw, an event whose row r was decoded from
// it: what Rebuild needs besides r to restore raw as a JSON value. It never
// fails: an input it cannot take apart is kept verbatim.
func Split(raw []byte, r *store.Row) []byte {
	return AppendSplit(nil, raw, r)
}

// AppendSplit appends the residual of raw (see Split) to dst.
func AppendSplit(dst, raw []byte, r *store.Row) []byte {
	sp := splitters.Get().(*splitter)
	defer splitters.Put(sp)
	top, ok := objectMembers(raw, sp.top)
	sp.top = top[:0]
	if !ok {
		return append(append(dst, markVerbatim), raw...)
	}
	sp.sk.build(r, sp.sk.buf)
	sp.ops = sp.diff(sp.ops[:0], top, sp.sk.top, true)
	if len(sp.ops) == 0 {
		return dst
	}
	if len(sp.ops) >= len(raw) {
		// Nothing gained (an event unlike any the apiserver writes).
		return append(append(dst, markVerbatim), raw...)
	}
	dst = append(dst, markPatch)
	return append(dst, sp.ops...)
}

// diff appends the ops that turn the skeleton fields sk into the original
// members orig. At the top level (nested), objects the skeleton keeps
// members of are compared member by member.
func (sp *splitter) diff(ops []byte, orig []member, sk []field, nested bool) []byte {
	buf := sp.sk.buf
	// The original's members are mostly in the skeleton's order: look for
	// each after the last one found first. seen marks the skeleton's
	// fields found (the first 64; hasKey looks for the others).
	var seen uint64
	next := 0
	for _, m := range orig {
		var f *field
		if j := find(sk, m.key, next); j >= 0 {
			f, next = &sk[j], j+1
			if j < 64 {
				seen |= 1 << j
			}
		}
		switch {
		case f == nil:
			ops = appendOp(ops, opSet, m.key, m.value)
		case !f.untrusted && bytes.Equal(buf[f.start:f.end], m.value):
		case nested && f.kids != nil && len(m.value) > 0 && m.value[0] == '{':
			// Only the top level recurses, so sp.sub and sp.nested are free.
			sub, ok := objectMembers(m.value, sp.sub)
			if !ok {
				ops = appendOp(ops, opSet, m.key, m.value)
				continue
			}
			sp.sub = sub[:0]
			sp.nested = sp.diff(sp.nested[:0], sub, f.kids, false)
			switch {
			case len(sp.nested) == 0:
				// The same members, spaced or ordered otherwise.
			case len(sp.nested) >= len(m.value):
				ops = appendOp(ops, opSet, m.key, m.value)
			default:
				ops = appendOp(ops, opObject, m.key, sp.nested)
			}
		default:
			ops = appendOp(ops, opSet, m.key, m.value)
		}
	}
	for i := range sk {
		if i < 64 && seen&(1<<i) == 0 || i >= 64 && !hasKey(orig, sk[i].key) {
			ops = append(ops, opDelete)
			ops = appendBytes(ops, []byte(sk[i].key))
		}
	}
	return ops
}

// find returns the index of the field of fs named key, or -1; it looks at
// fs[hint] first.
func find(fs []field, key []byte, hint int) int {
	if hint < len(fs) && fs[hint].key == string(key) {
		return hint
	}
	for i := range fs {
		if fs[i].key == string(key) {
			return i
		}
	}
	return -1
}

func hasKey(ms []member, key string) bool {
	for _, m := range ms {
		if string(m.key) == key {
			return true
		}
	}
	return false
}

func appendOp(ops []byte, op byte, key, value []byte) []byte {
	ops = append(ops, op)
	ops = appendBytes(ops, key)
	return appendBytes(ops, value)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Rebuild returns the event r and its residual describe: Skeleton(r)
// patched by residual. The result is compact JSON with the keys in the
// order the apiserver writes them, unknown keys after the known ones.
func Rebuild(r *store.Row, residual []byte) ([]byte, error) {
	return AppendRebuild(nil, r, residual)
}

// outField is a member of the event being rebuilt: its value is val, or
// the object of kids when obj is set; sk is the skeleton's field it comes
// from, nil for a member the residual adds.
type outField struct {
	key  string
	val  []byte
	kids []outField
	obj  bool
	rank int
	sk   *field
}

// rebuilder is the scratch space of one Rebuild.
type rebuilder struct {
	sk  skeleton
	top []outField
}

var rebuilders = sync.Pool{New: func() any { return new(rebuilder) }}

// AppendRebuild appends the event r and its residual describe (see
// Rebuild) to dst.
func AppendRebuild(dst []byte, r *store.Row, residual []byte) ([]byte, error) {
	if len(residual) > 0 && residual[0] == markVerbatim {
		return append(dst, residual[1:]...), nil
	}
	rb := rebuilders.Get().(*rebuilder)
	defer rebuilders.Put(rb)
	sk := &rb.sk
	sk.build(r, sk.buf)
	if len(residual) == 0 {
		return append(dst, sk.buf...), nil
	}
	if residual[0] != markPatch {
		return dst, fmt.Errorf("%w: starts with %q", ErrCorrupt, residual[0])
	}
	top := rb.top[:0]
	for i := range sk.top {
		f := &sk.top[i]
		top = append(top, outField{key: f.key, val: sk.buf[f.start:f.end], rank: rankOf("", f.key, i), sk: f})
	}
	top, err := patch(top, residual[1:], "")
	rb.top = top[:0]
	if err != nil {
		return dst, err
	}
	return appendObject(dst, top), nil
}

// unknownRank is the rank of the first key an order does not list.
const unknownRank = 1 << 20

// ranks are the places of the keys of orderOf's orders.
var ranks = map[string]map[string]int{}

func init() {
	for _, obj := range []string{"", "user", "impersonatedUser", "objectRef", "responseStatus"} {
		m := map[string]int{}
		for i, k := range orderOf(obj) {
			m[k] = i
		}
		ranks[obj] = m
	}
}

// rankOf is the place of key in the object at obj ("" for the top level):
// its place in orderOf(obj), else unknownRank+i; in a map (orderOf nil)
// the skeleton's sorted order, i.
func rankOf(obj, key string, i int) int {
	m, ok := ranks[obj]
	if !ok {
		return i
	}
	if j, ok := m[key]; ok {
		return j
	}
	return unknownRank + i
}

// patch applies ops to the fields fs of the object at key ("" for the top
// level).
func patch(fs []outField, ops []byte, key string) ([]outField, error) {
	added := 0
	for len(ops) > 0 {
		op := ops[0]
		k, rest, err := readBytes(ops[1:])
		if err != nil {
			return nil, err
		}
		ops = rest
		i := slices.IndexFunc(fs, func(f outField) bool { return f.key == string(k) })
		switch op {
		case opSet:
			var v []byte
			if v, ops, err = readBytes(ops); err != nil {
				return nil, err
			}
			if i >= 0 {
				fs[i] = outField{key: fs[i].key, val: v, rank: fs[i].rank}
				continue
			}
			rank := rankOf(key, string(k), unknownRank+added)
			if _, sorted := ranks[key]; !sorted {
				rank = unknownRank + added // after the skeleton's sorted keys
			}
			added++
			fs = append(fs, outField{key: string(k), val: v, rank: rank})
		case opDelete:
			if i < 0 {
				return nil, fmt.Errorf("%w: deletes %q, which the skeleton lacks", ErrCorrupt, k)
			}
			fs = slices.Delete(fs, i, i+1)
		case opObject:
			var sub []byte
			if sub, ops, err = readBytes(ops); err != nil {
				return nil, err
			}
			if i < 0 || fs[i].sk == nil || fs[i].sk.kids == nil || key != "" {
				return nil, fmt.Errorf("%w: patches %q, which is not an object of the skeleton", ErrCorrupt, k)
			}
			f := &fs[i]
			kids := make([]outField, 0, len(f.sk.kids)+4)
			for j := range f.sk.kids {
				c := &f.sk.kids[j]
				// The skeleton's fields point into the buffer f.val is cut from.
				val := f.val[c.start-f.sk.start : c.end-f.sk.start]
				kids = append(kids, outField{key: c.key, val: val, rank: rankOf(f.key, c.key, j)})
			}
			if f.kids, err = patch(kids, sub, f.key); err != nil {
				return nil, err
			}
			f.obj = true
		default:
			return nil, fmt.Errorf("%w: unknown op %q", ErrCorrupt, op)
		}
	}
	return fs, nil
}

func readBytes(b []byte) (v, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}

// appendObject writes fs as a JSON object in rank order.
func appendObject(b []byte, fs []outField) []byte {
	byRank := func(a, b outField) int { return a.rank - b.rank }
	if !slices.IsSortedFunc(fs, byRank) {
		slices.SortStableFunc(fs, byRank)
	}
	b = append(b, '{')
	for i := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, fs[i].key)
		b = append(b, ':')
		if fs[i].obj {
			b = appendObject(b, fs[i].kids)
		} else {
			b = append(b, fs[i].val...)
		}
	}
	return append(b, '}')
}
