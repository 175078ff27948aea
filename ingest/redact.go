package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/store"
)

// Redaction at ingest: parts of events that must never be stored are cut
// out of each event as it is decoded, before the webhook spools it (so
// they never reach the disk) and before an import writes it. A redacted
// event keeps everything else byte for byte, and says what was cut in the
// annotation RedactedAnnotation (also in the row's annotations column).

// RedactedAnnotation lists, comma-separated, the JSON paths cut out of an
// event.
const RedactedAnnotation = "auditlens.io/redacted"

// RedactRule cuts Paths (dotted JSON paths from the event's top level,
// such as "requestObject" or "responseObject.status.token") out of the
// events of one resource.
type RedactRule struct {
	APIGroup    string // "" is the core group
	Resource    string
	Subresource string
	Paths       []string
}

func (r RedactRule) String() string {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	if r.APIGroup != "" {
		res = r.APIGroup + "/" + res
	}
	return res + "=" + strings.Join(r.Paths, ",")
}

// DefaultRedactions drop the bodies of Secrets and of token requests, and
// the token a TokenReview carries: what no detector reads and no audit
// store should keep.
var DefaultRedactions = []RedactRule{
	{Resource: "secrets", Paths: []string{"requestObject", "responseObject"}},
	{Resource: "serviceaccounts", Subresource: "token", Paths: []string{"requestObject", "responseObject"}},
	{APIGroup: "authentication.k8s.io", Resource: "tokenreviews", Paths: []string{"requestObject.spec.token", "responseObject.spec.token"}},
}

// ParseRedactRule reads "[GROUP/]RESOURCE[/SUBRESOURCE]=PATH[,PATH...]":
// "secrets=requestObject,responseObject",
// "authentication.k8s.io/tokenreviews=requestObject.spec.token",
// "serviceaccounts/token=responseObject". A first part with a dot is a
// group.
func ParseRedactRule(s string) (RedactRule, error) {
	res, paths, ok := strings.Cut(s, "=")
	if !ok || res == "" || paths == "" {
		return RedactRule{}, fmt.Errorf("redaction %q: want [GROUP/]RESOURCE[/SUBRESOURCE]=PATH[,PATH...]", s)
	}
	var r RedactRule
	parts := strings.Split(res, "/")
	if strings.Contains(parts[0], ".") {
		r.APIGroup, parts = parts[0], parts[1:]
	}
	switch len(parts) {
	case 1:
		r.Resource = parts[0]
	case 2:
		r.Resource, r.Subresource = parts[0], parts[1]
	default:
		return RedactRule{}, fmt.Errorf("redaction %q: want [GROUP/]RESOURCE[/SUBRESOURCE]", s)
	}
	if r.Resource == "" {
		return RedactRule{}, fmt.Errorf("redaction %q: no resource", s)
	}
	for p := range strings.SplitSeq(paths, ",") {
		p = strings.TrimSpace(p)
		if p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			return RedactRule{}, fmt.Errorf("redaction %q: path %q is not a dotted JSON path", s, p)
		}
		r.Paths = append(r.Paths, p)
	}
	return r, nil
}

// Redactor applies redaction rules to decoded rows. The zero value and nil
// redact nothing.
type Redactor struct {
	rules []RedactRule
}

// NewRedactor returns a redactor of rules; nil when there are none.
func NewRedactor(rules []RedactRule) *Redactor {
	if len(rules) == 0 {
		return nil
	}
	return &Redactor{rules: slices.Clone(rules)}
}

// Apply redacts the rows in place and returns how many it changed. A row
// whose resource no rule names costs a few string comparisons; one that
// matches is re-encoded without the paths.
func (r *Redactor) Apply(rows []store.Row) int {
	if r == nil {
		return 0
	}
	n := 0
	for i := range rows {
		row := &rows[i]
		var paths []string
		for _, rule := range r.rules {
			if rule.Resource == row.Resource && rule.Subresource == row.Subresource && rule.APIGroup == row.APIGroup {
				paths = append(paths, rule.Paths...)
			}
		}
		if len(paths) == 0 {
			continue
		}
		raw, cut, err := redactJSON(row.Raw, paths)
		if err != nil || len(cut) == 0 {
			continue // nothing there to cut (a Metadata-level event)
		}
		row.Raw = raw
		if row.Annotations == nil {
			row.Annotations = map[string]string{}
		} else {
			row.Annotations = maps.Clone(row.Annotations) // may be shared with other rows
		}
		row.Annotations[RedactedAnnotation] = strings.Join(cut, ",")
		n++
	}
	return n
}

// redactJSON removes the paths that exist from the event object and adds
// the annotation; cut lists the paths removed (none: raw is returned as
// is). Every other member keeps its bytes.
func redactJSON(raw []byte, paths []string) ([]byte, []string, error) {
	// Cheap test first: none of the paths' first keys in the text.
	present := false
	for _, p := range paths {
		first, _, _ := strings.Cut(p, ".")
		if bytes.Contains(raw, []byte(`"`+first+`"`)) {
			present = true
			break
		}
	}
	if !present {
		return raw, nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, nil, err
	}
	var cut []string
	for _, p := range paths {
		ok, err := cutPath(obj, strings.Split(p, "."))
		if err != nil {
			return nil, nil, err
		}
		if ok {
			cut = append(cut, p)
		}
	}
	if len(cut) == 0 {
		return raw, nil, nil
	}
	var ann map[string]string
	if a, ok := obj["annotations"]; ok {
		if err := json.Unmarshal(a, &ann); err != nil {
			return nil, nil, err
		}
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[RedactedAnnotation] = strings.Join(cut, ",")
	a, err := json.Marshal(ann)
	if err != nil {
		return nil, nil, err
	}
	obj["annotations"] = a
	out, err := json.Marshal(obj)
	return out, cut, err
}

// cutPath deletes the member at path from obj, re-encoding the objects on
// the way; false when it is not there.
func cutPath(obj map[string]json.RawMessage, path []string) (bool, error) {
	v, ok := obj[path[0]]
	if !ok {
		return false, nil
	}
	if len(path) == 1 {
		delete(obj, path[0])
		return true, nil
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(v, &inner); err != nil || inner == nil {
		return false, nil // not an object: nothing at the path
	}
	ok, err := cutPath(inner, path[1:])
	if !ok || err != nil {
		return ok, err
	}
	b, err := json.Marshal(inner)
	if err != nil {
		return false, err
	}
	obj[path[0]] = b
	return true, nil
}
