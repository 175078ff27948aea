package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// eventColumns are the columns Events selects: the key, the raw event of
// rows stored before residuals (empty since), and what Rebuild needs to
// restore an event stored as its residual: the residual and the typed
// columns of the skeleton (residual.Skeleton).
const eventColumns = "cluster, audit_id, stage, raw, residual, level, verb, request_uri, ts, received_at, " +
	"user, user_groups, impersonated_user, user_agent, source_ip, resource, subresource, api_group, " +
	"api_version, namespace, name, object_rv, object_uid, code, annotations"

// eventRow is the key of a result row of Events' query (and, in tests, a
// row of the old form: a raw event).
type eventRow struct {
	Cluster string `json:"cluster"`
	AuditID string `json:"audit_id"`
	Stage   string `json:"stage"`
	Raw     string `json:"raw"`
}

// rowReader decodes result rows, reusing its buffers from row to row.
type rowReader struct {
	row  eventRow  // all but Raw
	raw  []byte    // the raw column of the last row read, valid until the next
	res  []byte    // its residual column
	cols store.Row // its typed columns (the skeleton's)
	// stored says the row had a residual column: it was read from the
	// store, where an empty raw means the event is stored as its residual.
	stored  bool
	rebuilt []byte // the last event rebuilt
}

// key names the event in error messages.
func (r *eventRow) key() string {
	return fmt.Sprintf("%q (cluster %q, stage %s)", r.AuditID, r.Cluster, r.Stage)
}

// event returns the stored event of the last row read: its raw column
// when set (a row stored before residuals), else the event rebuilt from
// its columns and residual. It is valid until the next read or event.
func (rr *rowReader) event() ([]byte, error) {
	if len(rr.raw) > 0 || !rr.stored {
		return rr.raw, nil
	}
	var err error
	rr.rebuilt, err = residual.AppendRebuild(rr.rebuilt[:0], &rr.cols, rr.res)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the stored event: %w", err)
	}
	return rr.rebuilt, nil
}

// read decodes one JSONEachRow row. Rows are objects whose values are
// strings, most of the bytes in the escaped raw event or residual, the
// typed columns' numbers, arrays and maps beside them; decoding them
// directly is several times faster than encoding/json, which validates the
// whole row before it unquotes. Bytes that are not UTF-8 are kept as they
// are (encoding/json would replace them), so raw events and residuals come
// back exactly as stored. A row of any other shape goes to encoding/json,
// unless it holds a residual, which that would corrupt.
func (rr *rowReader) read(data []byte) error {
	if err := rr.readFast(data); err == nil {
		return nil
	}
	var r struct {
		eventRow
		Residual string `json:"residual"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	if r.Residual != "" {
		return errors.New("a row with a residual in a form the row decoder does not read")
	}
	rr.row = r.eventRow
	rr.raw = append(rr.raw[:0], rr.row.Raw...)
	rr.res, rr.stored = rr.res[:0], false
	rr.row.Raw = ""
	return nil
}

var errNotFlat = errors.New("not an object of strings")

func (rr *rowReader) readFast(data []byte) error {
	rr.row, rr.raw, rr.res, rr.stored = eventRow{}, rr.raw[:0], rr.res[:0], false
	clear(rr.cols.Annotations)
	rr.cols = store.Row{Groups: rr.cols.Groups[:0], Annotations: rr.cols.Annotations}
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
		i = skipSpace(data, i+1)
		switch string(key) {
		case "raw", "residual":
			dst := &rr.raw
			if string(key) == "residual" {
				dst, rr.stored = &rr.res, true
			}
			// A non-nil destination: the value must not alias data.
			buf := (*dst)[:0]
			if buf == nil {
				buf = make([]byte, 0, len(data))
			}
			if *dst, i, err = unquote(buf, data, i); err != nil {
				return err
			}
		case "code":
			if rr.cols.Code, i, err = readInt32(data, i); err != nil {
				return err
			}
		case "user_groups":
			if i, err = rr.readGroups(data, i); err != nil {
				return err
			}
		case "annotations":
			if i, err = rr.readAnnotations(data, i); err != nil {
				return err
			}
		default:
			if i < len(data) && data[i] != '"' {
				// A column Events does not read (a number, a Bool, an
				// array): an export's row holds every column.
				start := i
				if i, err = skipValue(data, i); err != nil {
					return err
				}
				if !json.Valid(data[start:i]) {
					return errNotFlat
				}
				break
			}
			var val []byte
			if val, i, err = unquote(nil, data, i); err != nil {
				return err
			}
			rr.setString(string(key), val)
		}
		i = skipSpace(data, i)
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

// setString sets the column key of the row read to v; other keys are
// ignored.
func (rr *rowReader) setString(key string, v []byte) {
	c := &rr.cols
	switch key {
	case "cluster":
		rr.row.Cluster = string(v)
	case "audit_id":
		rr.row.AuditID = string(v)
		c.AuditID = rr.row.AuditID
	case "stage":
		rr.row.Stage = string(v)
		c.Stage = rr.row.Stage
	case "level":
		c.Level = string(v)
	case "verb":
		c.Verb = string(v)
	case "request_uri":
		c.RequestURI = string(v)
	case "ts":
		c.Time = parseColumnTime(v)
	case "received_at":
		c.ReceivedAt = parseColumnTime(v)
	case "user":
		c.User = string(v)
	case "impersonated_user":
		c.ImpersonatedUser = string(v)
	case "user_agent":
		c.UserAgent = string(v)
	case "source_ip":
		c.SourceIP = string(v)
	case "resource":
		c.Resource = string(v)
	case "subresource":
		c.Subresource = string(v)
	case "api_group":
		c.APIGroup = string(v)
	case "api_version":
		c.APIVersion = string(v)
	case "namespace":
		c.Namespace = string(v)
	case "name":
		c.Name = string(v)
	case "object_rv":
		c.ObjectRV = string(v)
	case "object_uid":
		c.ObjectUID = string(v)
	}
}

// parseColumnTime reads a DateTime64(6, 'UTC') as the engines print it,
// "2006-01-02 15:04:05.000000". A time it cannot read is the zero time:
// the skeleton marks such times untrusted, so the residual holds the
// original's.
func parseColumnTime(v []byte) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05.999999", string(v))
	if err != nil {
		return time.Time{}
	}
	return t
}

// readInt32 reads the integer at data[i].
func readInt32(data []byte, i int) (int32, int, error) {
	start := i
	if i < len(data) && data[i] == '-' {
		i++
	}
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(string(data[start:i]), 10, 32)
	if err != nil {
		return 0, 0, errNotFlat
	}
	return int32(n), i, nil
}

// readGroups reads an array of strings into the row's groups.
func (rr *rowReader) readGroups(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '[' {
		return 0, errNotFlat
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, nil
	}
	for {
		v, n, err := unquote(nil, data, i)
		if err != nil {
			return 0, err
		}
		rr.cols.Groups = append(rr.cols.Groups, string(v))
		var more bool
		if i, more, err = afterItem(data, n, ']'); err != nil || !more {
			return i, err
		}
	}
}

// afterItem reads what follows an item of an array or object that end
// closes: a comma (more follow; i is then the next item's start) or end
// (i is just past it).
func afterItem(data []byte, i int, end byte) (next int, more bool, err error) {
	i = skipSpace(data, i)
	if i >= len(data) {
		return 0, false, errNotFlat
	}
	switch data[i] {
	case ',':
		return skipSpace(data, i+1), true, nil
	case end:
		return i + 1, false, nil
	}
	return 0, false, errNotFlat
}

// readAnnotations reads an object of strings into the row's annotations.
func (rr *rowReader) readAnnotations(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '{' {
		return 0, errNotFlat
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	if rr.cols.Annotations == nil {
		rr.cols.Annotations = map[string]string{}
	}
	for {
		k, n, err := unquote(nil, data, i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(data, n)
		if i >= len(data) || data[i] != ':' {
			return 0, errNotFlat
		}
		v, n, err := unquote(nil, data, skipSpace(data, i+1))
		if err != nil {
			return 0, err
		}
		rr.cols.Annotations[string(k)] = string(v)
		var more bool
		if i, more, err = afterItem(data, n, '}'); err != nil || !more {
			return i, err
		}
	}
}

// skipValue returns the index after the JSON value at data[i]: a number,
// true, false, null, or an array or object (whose strings may hold
// brackets).
func skipValue(data []byte, i int) (int, error) {
	depth := 0
	for i < len(data) {
		switch c := data[i]; {
		case c == '"':
			_, n, err := unquote(nil, data, i)
			if err != nil {
				return i, err
			}
			i = n
			if depth == 0 {
				return i, nil
			}
			continue
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth == 0 {
				return i, nil // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return i, nil
		}
		i++
	}
	if depth != 0 {
		return i, errNotFlat
	}
	return i, nil
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
