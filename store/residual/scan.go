package residual

import (
	"encoding/binary"
	"unicode/utf8"
)

// A small validating scanner of JSON text: Split needs the members of an
// object with their values' exact bytes, and must know the text is valid
// JSON before it copies any of it, so that what Rebuild writes is valid
// whenever the original was.

// maxDepth is the deepest nesting accepted, as encoding/json's decoder
// refuses deeper text; Split keeps such an event verbatim.
const maxDepth = 10000

// member is one member of an object: the key as written between its quotes
// and the value's bytes, without surrounding space.
type member struct {
	key   []byte
	value []byte
}

// maxMembers bounds the members objectMembers takes apart: finding a
// repeated key is quadratic, and an event has about twenty. An object with
// more is kept whole.
const maxMembers = 256

// objectMembers returns the members of the object b (space around it
// allowed), in order. ok is false when b is not a valid JSON object, when
// a key is not plain (it holds an escape or is not UTF-8: it would compare
// unlike the key it decodes to), when a key repeats or when there are more
// than maxMembers.
func objectMembers(b []byte, buf []member) (ms []member, ok bool) {
	ms = buf[:0]
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ms, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		end, plain := scanString(b, i)
		if end < 0 || !plain {
			return nil, false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend := scanValue(b, i, 1)
		if vend < 0 {
			return nil, false
		}
		if len(ms) == maxMembers {
			return nil, false
		}
		for _, m := range ms {
			if string(m.key) == string(key) {
				return nil, false
			}
		}
		ms = append(ms, member{key: key, value: b[i:vend]})
		i = skipSpace(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ms, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanValue returns the index just past the JSON value that starts at
// b[i], or -1 when there is no valid value there. depth is the nesting of
// the value's container.
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		end, _ := scanString(b, i)
		return end
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return -1
		}
		return scanContainer(b, i, depth+1)
	case c == '-' || ('0' <= c && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return -1
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// scanContainer scans the object or array at b[i].
func scanContainer(b []byte, i, depth int) int {
	obj := b[i] == '{'
	closer := byte(']')
	if obj {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1
	}
	for {
		if obj {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			end, _ := scanString(b, i)
			if end < 0 {
				return -1
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipSpace(b, i+1)
		}
		end := scanValue(b, i, depth)
		if end < 0 {
			return -1
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case closer:
			return i + 1
		default:
			return -1
		}
	}
}

// strStop marks the bytes scanString stops at: the quote, the backslash,
// control bytes (invalid in a string) and, for plain, non-ASCII bytes.
var strStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// scanString scans the string at b[i] (its opening quote). plain reports
// that it holds no escape and is valid UTF-8.
func scanString(b []byte, i int) (end int, plain bool) {
	i++
	plain = true
	ascii := true
	start := i
	for i < len(b) {
		// Eight bytes at a time while none is a quote, a backslash, a
		// control byte or not ASCII (the SWAR tests of each byte's high bit).
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			const ones, highs = 0x0101010101010101, 0x8080808080808080
			quote, bslash := w^(ones*'"'), w^(ones*'\\')
			stop := (w - ones*0x20) | (quote-ones)&^quote | (bslash-ones)&^bslash | w
			if stop&highs != 0 {
				break
			}
			i += 8
		}
		for i < len(b) && !strStop[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			if plain && !ascii && !utf8.Valid(b[start:i]) {
				plain = false
			}
			return i + 1, plain
		case c < 0x20:
			return -1, false
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return -1, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1, false
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1, false
					}
				}
				i += 6
			default:
				return -1, false
			}
		default: // not ASCII
			ascii = false
			i++
		}
	}
	return -1, false
}

// scanNumber scans a number as JSON writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return -1
	}
	switch {
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// digits returns the index after the one or more digits at b[i], or -1
// when there is none.
func digits(b []byte, i int) int {
	d := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == d {
		return -1
	}
	return i
}
