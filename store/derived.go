package store

// Two columns of audit_events are stored as what the other columns do not
// already say, and read back through ALIAS columns of the same names that
// put them together (migration 0009): received_at as a lag behind ts,
// request_uri as a template whose namespace, name, resourceVersion and
// timeoutSeconds come from their own columns. The inserts write the stored
// columns, computed here; readers, SQL or SelectRows, read received_at and
// request_uri as before.

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
)

// Indexes in rowColumns of the two columns stored in another form.
var (
	colReceivedAt = columnIndex["received_at"]
	colRequestURI = columnIndex["request_uri"]
)

// storedColumn is a column of audit_events that the inserts write.
type storedColumn struct{ name, typ string }

// storedColumns are the columns the inserts write, in the table's order:
// rowColumns with received_at and request_uri replaced by their stored
// forms.
var storedColumns = func() []storedColumn {
	var cols []storedColumn
	for i, c := range rowColumns {
		switch i {
		case colReceivedAt:
			cols = append(cols, storedColumn{"received_at_full", c.typ}, storedColumn{"received_lag", "Int64"})
		case colRequestURI:
			cols = append(cols, storedColumn{"request_uri_full", c.typ}, storedColumn{"request_uri_tmpl", "LowCardinality(String)"})
		default:
			cols = append(cols, storedColumn{c.name, c.typ})
		}
	}
	return cols
}()

// storedColumnNames returns the names of storedColumns.
func storedColumnNames() []string {
	names := make([]string, len(storedColumns))
	for i, c := range storedColumns {
		names[i] = c.name
	}
	return names
}

// noLag is received_lag's default, which rows written before migration
// 0009 read: received_at is then received_at_full.
const noLag = math.MinInt64

// splitReceivedAt returns what is stored of r.ReceivedAt: received_at_full
// and received_lag, in microseconds. received_at reads back as
// ts - received_lag, or as received_at_full when the lag is noLag (a lag
// that does not fit an Int64).
func splitReceivedAt(r *Row) (full, lag int64) {
	ts, recv := micros(r.Time), micros(r.ReceivedAt)
	lag = ts - recv
	if (ts >= 0) != (recv >= 0) && (lag >= 0) != (ts >= 0) || lag == noLag {
		// Overflowed, or the sentinel itself.
		return recv, noLag
	}
	return 0, lag
}

// Placeholders of request_uri_tmpl: 0xFF, which no UTF-8 text holds, and
// one byte saying which column holds the text it stands for. The ALIAS
// column request_uri replaces them in the reverse of the order
// splitRequestURI puts them in.
const (
	phName      = "\xff\x01" // name
	phRV        = "\xff\x02" // req_rv
	phTimeout   = "\xff\x03" // timeout_seconds
	phNamespace = "\xff\x04" // namespace
)

// uriCut is a span of a request URI that its template replaces with a
// placeholder.
type uriCut struct {
	from, to int
	ph       string
}

// uriTemplate finds the spans of r.RequestURI that request_uri_tmpl
// replaces with placeholders: its namespace segment, its last path segment
// when that is the name (or the one before a subresource), and the values
// of resourceVersion= and timeoutSeconds= when they are r.RequestedRV and
// r.TimeoutSeconds; in URI order. ok is false when the URI is stored as is
// (request_uri_full): when it is empty, or it or a column put back into it
// holds a 0xFF byte. Replacing each placeholder's first occurrence in the
// template restores the URI exactly, since with no 0xFF byte anywhere else
// each placeholder occurs once.
func uriTemplate(r *Row) (cuts [4]uriCut, n int, ok bool) {
	u := r.RequestURI
	if u == "" || strings.IndexByte(u, 0xff) >= 0 || strings.IndexByte(r.Name, 0xff) >= 0 ||
		strings.IndexByte(r.Namespace, 0xff) >= 0 || strings.IndexByte(r.RequestedRV, 0xff) >= 0 {
		return cuts, 0, false
	}
	path := u
	q := strings.IndexByte(u, '?')
	if q >= 0 {
		path = u[:q]
	}
	nsEnd := 0
	if ns := r.Namespace; ns != "" {
		const seg = "/namespaces/"
		if i := strings.Index(path, seg); i >= 0 && strings.HasPrefix(path[i+len(seg):], ns) {
			from := i + len(seg)
			if to := from + len(ns); to == len(path) || path[to] == '/' {
				cuts[n] = uriCut{from, to, phNamespace}
				n++
				nsEnd = to
			}
		}
	}
	if name := r.Name; name != "" {
		for _, to := range [...]int{len(path), strings.LastIndexByte(path, '/')} {
			from := to - len(name)
			if from > nsEnd && path[from-1] == '/' && path[from:to] == name {
				cuts[n] = uriCut{from, to, phName}
				n++
				break
			}
		}
	}
	if q < 0 {
		return cuts, n, true
	}
	if rv := r.RequestedRV; rv != "" {
		if from, to := paramValue(u, q+1, "resourceVersion="); from >= 0 && u[from:to] == rv {
			cuts[n] = uriCut{from, to, phRV}
			n++
		}
	}
	if t := r.TimeoutSeconds; t != 0 {
		var buf [12]byte
		if from, to := paramValue(u, q+1, "timeoutSeconds="); from >= 0 && u[from:to] == string(strconv.AppendInt(buf[:0], int64(t), 10)) {
			cuts[n] = uriCut{from, to, phTimeout}
			n++
		}
	}
	// In URI order: timeoutSeconds= may come before resourceVersion=.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && cuts[j].from < cuts[j-1].from; j-- {
			cuts[j], cuts[j-1] = cuts[j-1], cuts[j]
		}
	}
	return cuts, n, true
}

// paramValue returns the span of the value of the first parameter key (as
// "name=") in the query u[from:], or -1, -1.
func paramValue(u string, from int, key string) (int, int) {
	for i := from; i < len(u); {
		end := strings.IndexByte(u[i:], '&')
		if end < 0 {
			end = len(u)
		} else {
			end += i
		}
		if strings.HasPrefix(u[i:end], key) {
			return i + len(key), end
		}
		i = end + 1
	}
	return -1, -1
}

// appendRequestURI appends request_uri_full and request_uri_tmpl of r in
// RowBinary, without allocating.
func appendRequestURI(b []byte, r *Row) []byte {
	cuts, n, ok := uriTemplate(r)
	if !ok {
		b = rbString(b, r.RequestURI)
		return append(b, 0)
	}
	size := len(r.RequestURI)
	for _, c := range cuts[:n] {
		size += len(c.ph) - (c.to - c.from)
	}
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(size))
	return appendTemplate(b, r.RequestURI, cuts[:n])
}

// splitRequestURI returns request_uri_full and request_uri_tmpl of r.
func splitRequestURI(r *Row) (full, tmpl string) {
	cuts, n, ok := uriTemplate(r)
	if !ok {
		return r.RequestURI, ""
	}
	if n == 0 {
		return "", r.RequestURI
	}
	return "", string(appendTemplate(make([]byte, 0, len(r.RequestURI)+8), r.RequestURI, cuts[:n]))
}

func appendTemplate(b []byte, u string, cuts []uriCut) []byte {
	at := 0
	for _, c := range cuts {
		b = append(b, u[at:c.from]...)
		b = append(b, c.ph...)
		at = c.to
	}
	return append(b, u[at:]...)
}
