package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// eventRow is one result row of Events' query.
type eventRow struct {
	Cluster string `json:"cluster"`
	AuditID string `json:"audit_id"`
	Stage   string `json:"stage"`
	Raw     string `json:"raw"`
}

// rowReader decodes result rows, reusing one buffer for the raw events.
type rowReader struct {
	row eventRow // all but Raw
	raw []byte   // the raw event of the last row read, valid until the next
}

// key names the event in error messages.
func (r *eventRow) key() string {
	return fmt.Sprintf("%q (cluster %q, stage %s)", r.AuditID, r.Cluster, r.Stage)
}

// read decodes one JSONEachRow row. Rows are objects whose values are
// strings, most of the bytes in the escaped raw event; decoding them
// directly is several times faster than encoding/json, which validates the
// whole row before it unquotes. Bytes that are not UTF-8 are kept as they
// are (encoding/json would replace them), so raw events come back exactly
// as stored. A row of any other shape goes to encoding/json.
func (rr *rowReader) read(data []byte) error {
	if err := rr.readFast(data); err == nil {
		return nil
	}
	rr.row = eventRow{}
	if err := json.Unmarshal(data, &rr.row); err != nil {
		return err
	}
	rr.raw = append(rr.raw[:0], rr.row.Raw...)
	rr.row.Raw = ""
	return nil
}

var errNotFlat = errors.New("not an object of strings")

func (rr *rowReader) readFast(data []byte) error {
	rr.row, rr.raw = eventRow{}, rr.raw[:0]
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errNotFlat
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return trailing(data, i+1)
	}
	for {
		key, n, err := unquote(nil, data, i)
		if err != nil {
			return err
		}
		i = skipSpace(data, n)
		if i >= len(data) || data[i] != ':' {
			return errNotFlat
		}
		var dst []byte // nil: the value may alias data
		if string(key) == "raw" {
			if dst = rr.raw[:0]; dst == nil {
				dst = make([]byte, 0, len(data))
			}
		}
		val, n, err := unquote(dst, data, skipSpace(data, i+1))
		if err != nil {
			return err
		}
		switch string(key) {
		case "cluster":
			rr.row.Cluster = string(val)
		case "audit_id":
			rr.row.AuditID = string(val)
		case "stage":
			rr.row.Stage = string(val)
		case "raw":
			rr.raw = val
		}
		i = skipSpace(data, n)
		if i >= len(data) {
			return errNotFlat
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return trailing(data, i+1)
		default:
			return errNotFlat
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

func trailing(data []byte, i int) error {
	if skipSpace(data, i) != len(data) {
		return errNotFlat
	}
	return nil
}

// unquote appends the JSON string that starts at data[i] to dst and
// returns the result with the index just past the closing quote. When dst
// is nil and the string holds no escapes, the result aliases data.
func unquote(dst, data []byte, i int) ([]byte, int, error) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, errNotFlat
	}
	i++
	start := i
	for i < len(data) && data[i] != '"' && data[i] != '\\' {
		if data[i] < ' ' {
			return nil, 0, errNotFlat
		}
		i++
	}
	if i >= len(data) {
		return nil, 0, errNotFlat
	}
	if dst == nil && data[i] == '"' {
		return data[start:i], i + 1, nil
	}
	out := append(dst, data[start:i]...)
	for {
		j := i
		for j < len(data) && data[j] != '"' && data[j] != '\\' && data[j] >= ' ' {
			j++
		}
		out = append(out, data[i:j]...)
		i = j
		if i >= len(data) || data[i] < ' ' {
			return nil, 0, errNotFlat
		}
		if data[i] == '"' {
			return out, i + 1, nil
		}
		if i+1 >= len(data) {
			return nil, 0, errNotFlat
		}
		switch e := data[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(data, i+2)
			if !ok {
				return nil, 0, errNotFlat
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A pair, as encoding/json reads it: a lone or broken
				// surrogate becomes U+FFFD.
				r2, ok := rune(0), false
				if i+1 < len(data) && data[i] == '\\' && data[i+1] == 'u' {
					r2, ok = hex4(data, i+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					out = utf8.AppendRune(out, dec)
					i += 6
				} else {
					out = utf8.AppendRune(out, utf8.RuneError)
				}
				continue
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, 0, errNotFlat
		}
		i += 2
	}
}

// hex4 reads the four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
