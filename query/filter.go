package query

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits on the number of events one query selects.
const (
	// DefaultLimit is the number of events a Filter selects when its
	// Limit is 0.
	DefaultLimit = 1000
	// MaxLimit is the largest Limit a Filter may ask for. Narrow the
	// time range to see more: a page past MaxLimit is a sign the question
	// needs an aggregation rather than a listing.
	MaxLimit = 100_000
)

// ErrBadFilter is wrapped by every error about a filter that cannot be
// used: a parameter that does not parse, a value out of range. Callers map
// it to HTTP 400.
var ErrBadFilter = errors.New("invalid filter")

// Order is the order events are returned in.
type Order int

const (
	// Asc returns the oldest events first. It is the zero value.
	Asc Order = iota
	// Desc returns the newest events first.
	Desc
)

// String returns "asc" or "desc".
func (o Order) String() string {
	switch o {
	case Asc:
		return "asc"
	case Desc:
		return "desc"
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// Filter selects audit events. A zero Filter selects the oldest
// DefaultLimit events.
//
// Each slice is a set of allowed values for one column: an event matches
// when its value is one of them (OR within a field), and it must match
// every field that is set (AND across fields). A nil or empty slice places
// no constraint. Values match exactly, with one exception: a User or
// UserAgent value that ends in "*" matches every value that begins with the
// text before the "*" (so "system:serviceaccount:kube-system:*" or
// "kubectl/*"). There is no escape for a literal trailing "*".
//
// A Namespace value "" matches cluster-scoped requests, Code 0 matches
// events without a response status (stage RequestReceived).
type Filter struct {
	// Since and Until bound the event time (stageTimestamp, column ts):
	// Since <= ts < Until. A zero time leaves that end open.
	Since, Until time.Time

	Cluster   []string // sender of the events (column cluster)
	APIServer []string // which apiserver of the cluster sent them (column apiserver); "" matches events whose sender did not say
	Verb      []string // get, list, watch, create, update, patch, delete, deletecollection, …
	Resource  []string // objectRef.resource, e.g. pods
	Namespace []string // objectRef.namespace
	Name      []string // objectRef.name
	User      []string // user.username; "prefix*" allowed
	UserAgent []string // userAgent; "prefix*" allowed
	Stage     []string // one of Stages
	Level     []string // one of Levels
	Code      []int32  // responseStatus.code

	// Limit is the largest number of events to select: 0 means
	// DefaultLimit; it may not exceed MaxLimit.
	Limit int
	// All selects every matching event, streamed, whatever Limit says: an
	// export (auditlens query --all). ParseFilter never sets it, so the
	// HTTP API keeps its MaxLimit.
	All bool
	// Order sorts by event time, then audit ID and stage. Asc by default.
	Order Order
}

// Stages are the values of an audit event's stage.
var Stages = []string{"RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"}

// Levels are the values of an audit event's level.
var Levels = []string{"None", "Metadata", "Request", "RequestResponse"}

// limit returns the effective number of events to select.
func (f Filter) limit() int {
	switch {
	case f.Limit <= 0:
		return DefaultLimit
	case f.Limit > MaxLimit:
		return MaxLimit
	}
	return f.Limit
}

// Validate reports whether f can be used as it is. The error wraps
// ErrBadFilter and names the field to fix.
func (f Filter) Validate() error {
	if f.Limit < 0 || f.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d is out of range: use 1 to %d, or 0 for the default of %d",
			ErrBadFilter, f.Limit, MaxLimit, DefaultLimit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("%w: since (%s) must be before until (%s)", ErrBadFilter,
			f.Since.UTC().Format(time.RFC3339Nano), f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Order != Asc && f.Order != Desc {
		return fmt.Errorf("%w: order %d is neither Asc nor Desc", ErrBadFilter, int(f.Order))
	}
	for _, s := range f.Stage {
		if c := canonical(s, Stages); c == "" || c != s {
			return fmt.Errorf("%w: stage %q is not one of %s", ErrBadFilter, s, strings.Join(Stages, ", "))
		}
	}
	for _, s := range f.Level {
		if c := canonical(s, Levels); c == "" || c != s {
			return fmt.Errorf("%w: level %q is not one of %s", ErrBadFilter, s, strings.Join(Levels, ", "))
		}
	}
	for _, c := range f.Code {
		if c < 0 || c > 999 {
			return fmt.Errorf("%w: code %d is not an HTTP status code", ErrBadFilter, c)
		}
	}
	return nil
}

// canonical returns the member of set that equals s ignoring case, or ""
// when there is none.
func canonical(s string, set []string) string {
	for _, m := range set {
		if strings.EqualFold(s, m) {
			return m
		}
	}
	return ""
}

// ParseFilter builds a Filter from the query parameters of an HTTP request.
// now is the reference for relative times.
//
// Parameters (all optional; unknown names are ignored so that the caller
// can mix in its own, such as jq):
//
//	since, until   RFC 3339 time (2024-05-01T12:00:00Z, fractions and
//	               offsets allowed), or a duration before now: 15m, 24h,
//	               1h30m, 7d (d is 24h). since is inclusive, until exclusive.
//	cluster, apiserver, verb, resource, namespace, name, stage, level
//	               allowed values, repeated (verb=get&verb=list) or
//	               comma-separated (verb=get,list). stage and level match
//	               their known values ignoring case.
//	user, user_agent
//	               allowed values, repeated only: user agents and user
//	               names may contain commas. A value ending in * is a
//	               prefix (user_agent=kubectl/*).
//	code           HTTP status codes, repeated or comma-separated.
//	limit          number of events, 1 to MaxLimit (default DefaultLimit).
//	order          asc (default) or desc.
//
// Empty values (verb= or verb=get,,list) are ignored, as an empty form
// field would be. Every error wraps ErrBadFilter and names the parameter.
func ParseFilter(v url.Values, now time.Time) (Filter, error) {
	var f Filter
	var err error
	if f.Since, err = parseTimeParam(v, "since", now); err != nil {
		return Filter{}, err
	}
	if f.Until, err = parseTimeParam(v, "until", now); err != nil {
		return Filter{}, err
	}
	f.Cluster = listParam(v, "cluster", true)
	f.APIServer = listParam(v, "apiserver", true)
	f.Verb = listParam(v, "verb", true)
	f.Resource = listParam(v, "resource", true)
	f.Namespace = listParam(v, "namespace", true)
	f.Name = listParam(v, "name", true)
	f.User = listParam(v, "user", false)
	f.UserAgent = listParam(v, "user_agent", false)
	if f.Stage, err = enumParam(v, "stage", Stages); err != nil {
		return Filter{}, err
	}
	if f.Level, err = enumParam(v, "level", Levels); err != nil {
		return Filter{}, err
	}
	for _, s := range listParam(v, "code", true) {
		c, err := strconv.ParseInt(s, 10, 32)
		if err != nil || c < 0 || c > 999 {
			return Filter{}, fmt.Errorf("%w: code %q is not an HTTP status code: use a number such as 200 or 404 (0 for none)",
				ErrBadFilter, s)
		}
		f.Code = append(f.Code, int32(c))
	}
	if s, err := singleParam(v, "limit"); err != nil {
		return Filter{}, err
	} else if s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return Filter{}, fmt.Errorf("%w: limit %q is not a number from 1 to %d", ErrBadFilter, s, MaxLimit)
		}
		f.Limit = n
	}
	if s, err := singleParam(v, "order"); err != nil {
		return Filter{}, err
	} else {
		switch strings.ToLower(s) {
		case "", "asc":
			f.Order = Asc
		case "desc":
			f.Order = Desc
		default:
			return Filter{}, fmt.Errorf("%w: order %q is neither asc nor desc", ErrBadFilter, s)
		}
	}
	if err := f.Validate(); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// listParam returns the non-empty values of parameter name, each
// comma-separated value split into its items when split is set.
func listParam(v url.Values, name string, split bool) []string {
	var out []string
	for _, s := range v[name] {
		if !split {
			if s != "" {
				out = append(out, s)
			}
			continue
		}
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// enumParam is listParam for a closed set of values, returned in their
// canonical spelling.
func enumParam(v url.Values, name string, set []string) ([]string, error) {
	items := listParam(v, name, true)
	for i, s := range items {
		c := canonical(s, set)
		if c == "" {
			return nil, fmt.Errorf("%w: %s %q is not one of %s", ErrBadFilter, name, s, strings.Join(set, ", "))
		}
		items[i] = c
	}
	return items, nil
}

// singleParam returns the value of a parameter that may be given at most
// once; "" when it is absent.
func singleParam(v url.Values, name string) (string, error) {
	vs := v[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return strings.TrimSpace(vs[0]), nil
	}
	return "", fmt.Errorf("%w: %s is given %d times; give it once", ErrBadFilter, name, len(vs))
}

// parseTimeParam parses since or until: an RFC 3339 time or a duration
// before now.
func parseTimeParam(v url.Values, name string, now time.Time) (time.Time, error) {
	s, err := singleParam(v, name)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, ok := parseAgo(s); ok {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s %q is neither an RFC 3339 time (2024-05-01T12:00:00Z) nor a duration before now (15m, 24h, 7d)",
		ErrBadFilter, name, s)
}

// maxAgo bounds relative times so that now minus the duration stays far
// inside the range of time.Time and of ClickHouse's DateTime64.
const maxAgo = 100 * 365 * 24 * time.Hour

// parseAgo parses a non-negative duration: Go syntax (90s, 15m, 1h30m) or
// a whole number of days (7d). A leading "-" is allowed and ignored, since
// "-15m" reads naturally as "15 minutes ago".
func parseAgo(s string) (time.Duration, bool) {
	s = strings.TrimPrefix(s, "-")
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 32)
		if err != nil || time.Duration(n) > maxAgo/(24*time.Hour) {
			return 0, false
		}
		return time.Duration(n) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > maxAgo {
		return 0, false
	}
	return d, true
}
