package ingest

import (
	"net/url"
	"strconv"
	"strings"
)

// URIParams are the list and watch options of a requestURI, parsed once at
// ingest so that queries filter on columns instead of matching the URI text.
// A field is the zero value when its parameter is absent; a numeric field is
// also zero when its value is not a valid number.
type URIParams struct {
	// Watch is true for a watch: a watch parameter whose value is anything
	// but "0" or "false" (as the apiserver decides it, so "watch=true",
	// "watch=1" and a bare "watch" all count), or a legacy watch path such
	// as /api/v1/watch/namespaces/ns/pods.
	Watch bool
	// ResourceVersion is resourceVersion=, the revision a list or watch
	// starts from. The watch-loop detector compares it across watches.
	ResourceVersion string
	// ResourceVersionMatch is resourceVersionMatch= (Exact, NotOlderThan).
	ResourceVersionMatch string
	// TimeoutSeconds is timeoutSeconds=, the server-side watch timeout.
	TimeoutSeconds int32
	// LabelSelector is labelSelector=, unescaped.
	LabelSelector string
	// FieldSelector is fieldSelector=, unescaped.
	FieldSelector string
	// Limit is limit=, the page size of a list.
	Limit int64
	// Continue is continue=, the token of the next page of a list.
	Continue string
}

// The query parameters ParseRequestURI reads, as bits of a set of those seen.
const (
	seenWatch uint8 = 1 << iota
	seenRV
	seenRVMatch
	seenTimeout
	seenLabel
	seenField
	seenLimit
	seenContinue
)

// ParseRequestURI parses the path and query of a requestURI as the
// apiserver does for list and watch options. It never fails: a parameter
// whose value has a malformed %-escape keeps its raw text, an invalid number
// is zero, and anything unparseable is ignored. When a parameter appears
// more than once the first value wins, as in the apiserver.
//
// Strings in the result are substrings of uri unless they had to be
// unescaped, so parsing a typical URI does not allocate.
func ParseRequestURI(uri string) URIParams {
	var p URIParams
	path, query, _ := strings.Cut(uri, "?")
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query = query[:i]
	} else if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	p.Watch = isLegacyWatchPath(path)

	var seen uint8
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
		key, value, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(key, "%+") {
			k, err := url.QueryUnescape(key)
			if err != nil {
				continue
			}
			key = k
		}
		var bit uint8
		switch key {
		case "watch":
			bit = seenWatch
		case "resourceVersion":
			bit = seenRV
		case "resourceVersionMatch":
			bit = seenRVMatch
		case "timeoutSeconds":
			bit = seenTimeout
		case "labelSelector":
			bit = seenLabel
		case "fieldSelector":
			bit = seenField
		case "limit":
			bit = seenLimit
		case "continue":
			bit = seenContinue
		default:
			continue
		}
		if seen&bit != 0 {
			continue
		}
		seen |= bit
		value = queryUnescape(value)
		switch bit {
		case seenWatch:
			// runtime.Convert_Slice_string_To_bool: only "0" and "false" are false.
			p.Watch = p.Watch || !(value == "0" || strings.EqualFold(value, "false"))
		case seenRV:
			p.ResourceVersion = value
		case seenRVMatch:
			p.ResourceVersionMatch = value
		case seenTimeout:
			if n, err := strconv.ParseInt(value, 10, 32); err == nil {
				p.TimeoutSeconds = int32(n)
			}
		case seenLabel:
			p.LabelSelector = value
		case seenField:
			p.FieldSelector = value
		case seenLimit:
			if n, err := strconv.ParseInt(value, 10, 64); err == nil {
				p.Limit = n
			}
		case seenContinue:
			p.Continue = value
		}
	}
	return p
}

// queryUnescape decodes a form-encoded query value, or returns it as it is
// when it holds a malformed escape: the raw text is still worth keeping.
// It allocates only when there is something to decode.
func queryUnescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// isLegacyWatchPath reports whether path is a watch through the deprecated
// verb-in-path form, /api/{version}/watch/… or /apis/{group}/{version}/watch/…,
// which the apiserver's RequestInfoFactory recognises.
func isLegacyWatchPath(path string) bool {
	path = strings.TrimLeft(path, "/")
	var skip int // path segments between the prefix and "watch"
	switch {
	case strings.HasPrefix(path, "api/"):
		path, skip = path[len("api/"):], 1
	case strings.HasPrefix(path, "apis/"):
		path, skip = path[len("apis/"):], 2
	default:
		return false
	}
	for range skip {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			return false
		}
		path = path[i+1:]
	}
	rest, ok := strings.CutPrefix(path, "watch/")
	// The apiserver wants a resource after the verb.
	return ok && strings.Trim(rest, "/") != ""
}
