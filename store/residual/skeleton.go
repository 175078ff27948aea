package residual

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/auditlens/auditlens/store"
)

// The skeleton of a row: the event JSON its typed columns alone produce,
// written as kube-apiserver writes an audit.k8s.io/v1 Event with its log
// backend (encoding/json of k8s.io/apiserver/pkg/apis/audit/v1.Event, kind
// and apiVersion set): the struct's field order, its omitempty rules, map
// keys sorted, strings escaped as encoding/json escapes them (<, > and &
// as \u003c, \u003e, \u0026). The fields the columns cannot fill
// (user.uid and extra, responseStatus but its code, the request and
// response objects, sourceIPs beyond the first, …) are absent.
//
// A field whose value in the skeleton could differ between the row that
// was written and the row read back from the store is marked untrusted,
// and Split never drops an original field for it: today the two
// timestamps of times the store does not hold exactly (see trustedTime).

// field is one member of the skeleton: its value is buf[start:end]; kids,
// when not nil, are the members of that value, an object that Split and
// Rebuild compare and patch member by member.
type field struct {
	key        string
	start, end int
	kids       []field
	untrusted  bool
}

// skeleton is the skeleton of one row, its fields pointing into buf.
type skeleton struct {
	buf  []byte
	top  []field
	kids [32]field // backing store of the nested objects' fields
	nk   int
}

// Skeleton returns the JSON the typed columns of r produce (see the package
// documentation).
func Skeleton(r *store.Row) []byte {
	var s skeleton
	s.build(r, nil)
	return s.buf
}

// The keys and field order of the objects the skeleton writes; Rebuild
// puts keys that a residual adds at their place in this order, and unknown
// keys after the known ones.
var (
	topOrder = []string{"kind", "apiVersion", "level", "auditID", "stage", "requestURI", "verb",
		"user", "impersonatedUser", "authenticationMetadata", "sourceIPs", "userAgent", "objectRef",
		"responseStatus", "requestObject", "responseObject", "requestReceivedTimestamp",
		"stageTimestamp", "annotations"}
	userOrder      = []string{"username", "uid", "groups", "extra"}
	objectRefOrder = []string{"resource", "namespace", "name", "uid", "apiGroup", "apiVersion",
		"resourceVersion", "subresource"}
	statusOrder = []string{"kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"}
)

// orderOf returns the key order of the object at key of the top level (""
// for the top level itself); nil means sorted keys (annotations).
func orderOf(key string) []string {
	switch key {
	case "":
		return topOrder
	case "user", "impersonatedUser":
		return userOrder
	case "objectRef":
		return objectRefOrder
	case "responseStatus":
		return statusOrder
	}
	return nil
}

// build writes the skeleton of r into s, reusing buf.
func (s *skeleton) build(r *store.Row, buf []byte) {
	s.buf = append(buf[:0], '{')
	s.top = s.top[:0]
	s.nk = 0
	top := &s.top
	s.str(top, "kind", "Event")
	s.str(top, "apiVersion", "audit.k8s.io/v1")
	s.str(top, "level", r.Level)
	s.str(top, "auditID", r.AuditID)
	s.str(top, "stage", r.Stage)
	s.str(top, "requestURI", r.RequestURI)
	s.str(top, "verb", r.Verb)

	kids := s.open(top, "user")
	s.strOmit(kids, "username", r.User)
	if len(r.Groups) > 0 {
		s.begin(kids, "groups")
		s.buf = append(s.buf, '[')
		for i, g := range r.Groups {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			s.buf = appendString(s.buf, g)
		}
		s.buf = append(s.buf, ']')
		s.end(kids)
	}
	s.close(top, kids)

	if r.ImpersonatedUser != "" {
		kids := s.open(top, "impersonatedUser")
		s.strOmit(kids, "username", r.ImpersonatedUser)
		s.close(top, kids)
	}
	if r.SourceIP != "" {
		s.begin(top, "sourceIPs")
		s.buf = append(s.buf, '[')
		s.buf = appendString(s.buf, r.SourceIP)
		s.buf = append(s.buf, ']')
		s.end(top)
	}
	s.strOmit(top, "userAgent", r.UserAgent)
	if r.Resource != "" || r.Namespace != "" || r.Name != "" || r.ObjectUID != "" ||
		r.APIGroup != "" || r.APIVersion != "" || r.ObjectRV != "" || r.Subresource != "" {
		kids := s.open(top, "objectRef")
		s.strOmit(kids, "resource", r.Resource)
		s.strOmit(kids, "namespace", r.Namespace)
		s.strOmit(kids, "name", r.Name)
		s.strOmit(kids, "uid", r.ObjectUID)
		s.strOmit(kids, "apiGroup", r.APIGroup)
		s.strOmit(kids, "apiVersion", r.APIVersion)
		s.strOmit(kids, "resourceVersion", r.ObjectRV)
		s.strOmit(kids, "subresource", r.Subresource)
		s.close(top, kids)
	}
	if r.Code != 0 {
		// metav1.Status: its ListMeta is a struct, which omitempty never
		// omits, so "metadata":{} is always there.
		kids := s.open(top, "responseStatus")
		s.begin(kids, "metadata")
		s.buf = append(s.buf, "{}"...)
		s.end(kids)
		s.begin(kids, "code")
		s.buf = strconv.AppendInt(s.buf, int64(r.Code), 10)
		s.end(kids)
		s.close(top, kids)
	}
	s.time(top, "requestReceivedTimestamp", r.ReceivedAt)
	s.time(top, "stageTimestamp", r.Time)
	if len(r.Annotations) > 0 {
		kids := s.open(top, "annotations")
		var arr [8]string
		keys := arr[:0]
		for k := range r.Annotations {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s.str(kids, k, r.Annotations[k])
		}
		s.close(top, kids)
	}
	s.buf = append(s.buf, '}')
}

// begin writes the separator and key of a member of the object whose
// fields are *fs, and starts the field; end finishes it.
func (s *skeleton) begin(fs *[]field, key string) {
	if len(*fs) > 0 {
		s.buf = append(s.buf, ',')
	}
	s.buf = append(s.buf, '"')
	s.buf = append(s.buf, key...) // keys the skeleton writes need no escapes but annotations'
	s.buf = append(s.buf, '"', ':')
	*fs = append(*fs, field{key: key, start: len(s.buf)})
}

func (s *skeleton) end(fs *[]field) { (*fs)[len(*fs)-1].end = len(s.buf) }

func (s *skeleton) str(fs *[]field, key, v string) {
	if !plainKey(key) {
		s.escapedKey(fs, key)
	} else {
		s.begin(fs, key)
	}
	s.buf = appendString(s.buf, v)
	s.end(fs)
}

// escapedKey is begin for a key (an annotation's) that needs escaping:
// the field is written but never matches an original key, which Split
// only compares when plain.
func (s *skeleton) escapedKey(fs *[]field, key string) {
	if len(*fs) > 0 {
		s.buf = append(s.buf, ',')
	}
	s.buf = appendString(s.buf, key)
	s.buf = append(s.buf, ':')
	*fs = append(*fs, field{key: key, start: len(s.buf), untrusted: true})
}

func (s *skeleton) strOmit(fs *[]field, key, v string) {
	if v != "" {
		s.str(fs, key, v)
	}
}

// open starts an object member of the top level whose members are kept as
// kids; close finishes it.
func (s *skeleton) open(top *[]field, key string) *[]field {
	s.begin(top, key)
	s.buf = append(s.buf, '{')
	f := &(*top)[len(*top)-1]
	f.kids = s.kids[s.nk:s.nk:len(s.kids)]
	return &f.kids
}

func (s *skeleton) close(top *[]field, kids *[]field) {
	s.buf = append(s.buf, '}')
	s.end(top)
	n := len(*kids)
	if n > len(s.kids)-s.nk {
		// More members than the backing array holds (many annotations):
		// append moved them to their own array.
		return
	}
	s.nk += n
}

// time writes a metav1.MicroTime as the store holds it: microseconds, UTC.
func (s *skeleton) time(fs *[]field, key string, t time.Time) {
	s.begin(fs, key)
	us := t.UnixMicro()
	s.buf = appendMicroTime(s.buf, us)
	s.end(fs)
	if !trustedTime(us) {
		(*fs)[len(*fs)-1].untrusted = true
	}
}

// appendMicroTime appends us microseconds since the epoch as
// metav1.MicroTime writes them, "2006-01-02T15:04:05.000000Z" (UTC), quoted.
func appendMicroTime(b []byte, us int64) []byte {
	t := time.UnixMicro(us).UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1000, 6)
	return append(b, 'Z', '"')
}

// appendDigits appends v, 0 ≤ v < 10^n, as n decimal digits.
func appendDigits(b []byte, v, n int) []byte {
	var d [9]byte
	for i := n - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:n]...)
}

// trustedTime reports whether a time of us microseconds since the epoch
// reads back from a DateTime64(6) column as the same text: from 1970 (the
// engines format times before it in ways not worth relying on) to 2261
// (the driver converts through nanoseconds). Real events are far inside.
func trustedTime(us int64) bool {
	return us >= 0 && us < maxTrustedMicros
}

var maxTrustedMicros = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// plainKey reports whether key is written between quotes as it is.
func plainKey(key string) bool {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// strEscape marks the bytes appendString looks at: those it escapes and
// the first bytes of non-ASCII characters.
var strEscape = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	t['"'], t['\\'], t['<'], t['>'], t['&'] = true, true, true, true, true
	return t
}()

// appendString appends s quoted as encoding/json writes it with HTML
// escaping on (as the apiserver's serializer does): \" \\ \b \f \n \r \t,
// other control bytes, <, > and & as \u00XX, U+2028 and U+2029 escaped,
// invalid UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		for i < len(s) && !strEscape[s[i]] {
			i++
		}
		if i >= len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
