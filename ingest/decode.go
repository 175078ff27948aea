package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-json"

	"github.com/auditlens/auditlens/store"
)

// ErrNotAudit is wrapped by the errors of DecodeBody and DecodeLine when the
// input as a whole is not Kubernetes audit JSON: not JSON, not an object, or
// an object of another kind or apiVersion. The message after it tells the
// sender what was expected.
var ErrNotAudit = errors.New("not Kubernetes audit JSON")

// ErrMalformedEvent is wrapped by the errors of DecodeEvent.
var ErrMalformedEvent = errors.New("malformed audit event")

// Batch is what one webhook body or log line decoded to: the rows of the
// good events and the rejects of the malformed ones.
//
// To save an allocation per field, the strings of a Row point into its Raw
// bytes (unless they held JSON escapes), except AuditID, Stage, Level and
// Verb, which are copies or constants so that a store.Key kept in a dedup
// set keeps nothing else alive. So Raw must never be modified, and a string
// kept from a Row keeps the Row's whole Raw alive: strings.Clone it before
// keeping it for long, in a detector's state for instance.
type Batch struct {
	Rows    []store.Row
	Rejects []Reject
	// Skipped counts the records of cloud envelopes that carry no audit
	// event (DecodeImportLine); the apiserver's own formats have none.
	Skipped int
}

// Reject is one malformed event of an otherwise good input.
type Reject struct {
	// Index is the position of the item in its EventList, 0 for an Event.
	Index int `json:"index"`
	// AuditID is the event's auditID when it could be read, else "".
	AuditID string `json:"auditID,omitempty"`
	// Reason says what is wrong, for the sender and for the logs.
	Reason string `json:"reason"`
}

// The apiVersions of audit events the decoder accepts. v1beta1 is what
// clusters 1.8 to 1.12 sent by default; it was removed in 1.24. v1alpha1
// is what 1.7 sent (and 1.8 to 1.11 on request); it was removed in 1.12.
//
// The old versions differ from v1 in what the decoder reads:
//
//   - v1alpha1 and 1.8's v1beta1 carry one time, "timestamp", when the
//     request reached the apiserver, at second precision (metav1.Time),
//     and no stageTimestamp or requestReceivedTimestamp (added in 1.9).
//     Every stage of a request then has the same time.
//   - v1alpha1 has no userAgent (added to v1beta1 in 1.12, kubernetes
//     PR #64812; never to v1alpha1): the column stays empty.
//   - v1alpha1's objectRef has no apiGroup: its apiVersion is the
//     group/version ("apps/v1beta1"; "v1" for the core group), split into
//     api_group and api_version.
//   - v1alpha1 and v1beta1 events may carry metadata.creationTimestamp,
//     the last resort for the time.
const (
	auditV1       = "audit.k8s.io/v1"
	auditV1beta1  = "audit.k8s.io/v1beta1"
	auditV1alpha1 = "audit.k8s.io/v1alpha1"
)

// knownAPIVersion reports whether v is an audit apiVersion the decoder
// reads; "" counts, as webhook list items carry none.
func knownAPIVersion(v string) bool {
	return v == "" || v == auditV1 || v == auditV1beta1 || v == auditV1alpha1
}

// expected is the part of every ErrNotAudit message that says what was wanted.
const expected = "expected an audit.k8s.io/v1, v1beta1 or v1alpha1 EventList or Event"

// DecodeBody decodes a webhook request body from the given cluster: an
// audit.k8s.io/v1, v1beta1 or v1alpha1 EventList, as the apiserver's
// webhook backend sends, or a single Event. Items of a list without kind and apiVersion are
// events, as the apiserver writes them.
//
// It returns an error wrapping ErrNotAudit only when the body as a whole is
// not audit JSON; a malformed event inside a good list becomes a Reject and
// the others are kept.
func DecodeBody(cluster string, body []byte) (Batch, error) {
	var b Batch
	err := decodeDoc(cluster, body, &b, nil, false, false)
	return b, err
}

// DecodeLine decodes one line of an audit log file and appends the result
// to b. A line is an Event, as the apiserver's log backend writes it (with
// kind and apiVersion), or an EventList, as captured from a webhook. A blank
// line adds nothing.
//
// It returns an error wrapping ErrNotAudit only when the line as a whole is
// not audit JSON, and then appends nothing; a malformed event becomes a
// Reject in b.
func DecodeLine(cluster string, line []byte, b *Batch) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	return decodeLine(cluster, line, b)
}

// DecodeEvent decodes one event, such as the Raw bytes of a Row that were
// spooled, into a Row. The Row's Raw is a copy of raw. It returns an error
// wrapping ErrMalformedEvent with the reason DecodeBody would have given in
// a Reject.
func DecodeEvent(cluster string, raw []byte) (store.Row, error) {
	var b Batch
	b.Rows = make([]store.Row, 0, 1)
	decodeItem(cluster, 0, bytes.Clone(bytes.TrimSpace(raw)), new(event), &b)
	if len(b.Rejects) > 0 {
		return store.Row{}, fmt.Errorf("%w: %s", ErrMalformedEvent, b.Rejects[0].Reason)
	}
	return b.Rows[0], nil
}

// envelope is what decodeDoc's careful path reads of a document to tell
// an EventList from an Event from anything else. Its strings refer to the
// input and are not kept.
type envelope struct {
	Kind       string             `json:"kind"`
	APIVersion string             `json:"apiVersion"`
	AuditID    string             `json:"auditID"`
	Stage      string             `json:"stage"`
	Items      *[]json.RawMessage `json:"items"`
}

// decodeLine decodes a line of a log into b: a document small enough to
// copy, which it reads once when it is an Event (see decodeDoc).
func decodeLine(cluster string, data []byte, b *Batch) error {
	return decodeDoc(cluster, data, b, nil, false, true)
}

// decodeOwnedEvent is decodeLine for callers that decode many small
// documents they hand over: data is never written, by anyone, while the
// rows live (the bytes of an immutable string, say), so an Event's row
// keeps data itself as Raw instead of a copy. doc is scratch space reused
// across calls.
func decodeOwnedEvent(cluster string, data []byte, b *Batch, doc *document) error {
	return decodeDoc(cluster, data, b, doc, true, true)
}

// document is what decodeDoc reads of a document in one pass: an Event's
// fields, and the items of an EventList.
type document struct {
	event
	Items *[]json.RawMessage `json:"items"`
}

// decodeDoc decodes a document into b, with doc as scratch space (a new
// one when nil). owned says whether an Event's row may keep data as Raw.
//
// With once (a line, not a webhook body), the document is owned (copied
// when it is not) and read in one pass as an Event or an EventList; an
// Event is then done, its row's strings pointing into the copy. Anything
// that pass cannot read, or reads as neither, is read again the careful
// way: the envelope first, then each event, so that errors say what is
// wrong where.
func decodeDoc(cluster string, data []byte, b *Batch, doc *document, owned, once bool) error {
	if doc == nil {
		doc = new(document)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return fmt.Errorf("%w: %s, got an empty document", ErrNotAudit, expected)
	}
	if data[0] != '{' {
		if !json.Valid(data) {
			return fmt.Errorf("%w: %s, got text that is not JSON", ErrNotAudit, expected)
		}
		return fmt.Errorf("%w: %s, got a JSON %s", ErrNotAudit, expected, jsonKindOf(data))
	}

	if once {
		if !owned {
			data, owned = bytes.Clone(data), true
		}
		*doc = document{}
		if unmarshal(data, doc) == nil {
			looksLikeEvent := doc.AuditID != "" || doc.Stage != ""
			switch isList, isEvent := classify(doc.Kind, doc.APIVersion, doc.Items != nil, looksLikeEvent); {
			case isList:
				decodeItems(cluster, doc.Items, &doc.event, b)
				return nil
			case isEvent:
				decodeEvent(cluster, 0, data[:len(data):len(data)], &doc.event, b)
				return nil
			}
		}
	}
	ev := &doc.event

	var env envelope
	looksLikeEvent := false
	if err := unmarshal(data, &env); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return fmt.Errorf("%w: %s, got invalid JSON: %v", ErrNotAudit, expected, err)
		}
		switch te.Field {
		case "auditID", "stage":
			// An event with a bad field: decodeItem rejects it with a reason.
			looksLikeEvent = true
		default:
			return fmt.Errorf("%w: %s, got an object whose %s", ErrNotAudit, expected, typeErrorReason(te))
		}
	}
	looksLikeEvent = looksLikeEvent || env.AuditID != "" || env.Stage != ""

	isList, isEvent := classify(env.Kind, env.APIVersion, env.Items != nil, looksLikeEvent)
	switch {
	case isList:
		decodeItems(cluster, env.Items, ev, b)
		return nil
	case isEvent:
		if !owned {
			data = bytes.Clone(data)
		}
		decodeItem(cluster, 0, data[:len(data):len(data)], ev, b)
		return nil
	case env.Kind == "" && env.APIVersion == "":
		return fmt.Errorf("%w: %s, got an object with none of kind, apiVersion, items or auditID", ErrNotAudit, expected)
	default:
		return fmt.Errorf("%w: %s, got kind %.64q apiVersion %.64q", ErrNotAudit, expected, env.Kind, env.APIVersion)
	}
}

// classify tells an EventList (isList) from an Event (isEvent) by what a
// document says of itself: its kind and apiVersion, whether it has items,
// and whether it looks like an event (an auditID or a stage). Webhook list
// items carry no kind or apiVersion.
func classify(kind, apiVersion string, hasItems, looksLikeEvent bool) (isList, isEvent bool) {
	switch {
	case !knownAPIVersion(apiVersion):
	case kind == "EventList":
		isList = true
	case kind == "Event":
		isEvent = true
	case kind == "":
		isList = hasItems
		isEvent = !isList && looksLikeEvent
	}
	return isList, isEvent
}

// decodeItems decodes the items of an EventList into b, with ev as scratch
// space.
func decodeItems(cluster string, items *[]json.RawMessage, ev *event, b *Batch) {
	if items == nil {
		return
	}
	if cap(b.Rows)-len(b.Rows) < len(*items) {
		b.Rows = append(make([]store.Row, 0, len(b.Rows)+len(*items)), b.Rows...)
	}
	for i, item := range *items {
		// item is a copy of the input made by json.RawMessage: it becomes
		// Row.Raw, without spare capacity that an append could write to.
		decodeItem(cluster, i, item[:len(item):len(item)], ev, b)
	}
}

// userInfo is the part of authentication/v1 UserInfo that is stored.
type userInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// objectRef is audit ObjectReference.
type objectRef struct {
	Resource        string `json:"resource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	APIGroup        string `json:"apiGroup"`
	APIVersion      string `json:"apiVersion"`
	ResourceVersion string `json:"resourceVersion"`
	Subresource     string `json:"subresource"`
}

// eventCore is an audit Event as far as a Row needs it, with the v1beta1
// and v1alpha1 fields, but without responseObject. The decoder skips everything else
// (requestObject, user.extra, responseStatus but its code) without
// allocating.
type eventCore struct {
	Kind             string    `json:"kind"`
	APIVersion       string    `json:"apiVersion"`
	Level            string    `json:"level"`
	AuditID          string    `json:"auditID"`
	Stage            string    `json:"stage"`
	RequestURI       string    `json:"requestURI"`
	Verb             string    `json:"verb"`
	User             userInfo  `json:"user"`
	ImpersonatedUser userInfo  `json:"impersonatedUser"`
	SourceIPs        []string  `json:"sourceIPs"`
	UserAgent        string    `json:"userAgent"`
	ObjectRef        objectRef `json:"objectRef"`
	ResponseStatus   struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp string            `json:"requestReceivedTimestamp"`
	StageTimestamp           string            `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations"`

	// v1beta1 and v1alpha1 only: second-precision times used when the
	// microsecond ones are absent.
	Timestamp string `json:"timestamp"`
	Metadata  struct {
		CreationTimestamp string `json:"creationTimestamp"`
	} `json:"metadata"`
}

// event adds the one field of responseObject that is stored. The object is
// skipped, not decoded, apart from metadata.resourceVersion.
type event struct {
	eventCore
	ResponseObject struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"responseObject"`
}

// decodeItem decodes one event into a Row of b, or a Reject. raw must be
// owned by the row: the row keeps it as Raw and its strings refer to it. ev
// is scratch space, reused across items.
func decodeItem(cluster string, index int, raw []byte, ev *event, b *Batch) {
	if len(raw) == 0 || raw[0] != '{' {
		b.Rejects = append(b.Rejects, Reject{Index: index, Reason: "event is a JSON " + jsonKindOf(raw) + ", not an object"})
		return
	}
	*ev = event{}
	if err := unmarshal(raw, ev); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && strings.HasPrefix(te.Field, "responseObject") {
			// Not ours to judge: the object is whatever the API returned. Keep
			// the event without response_rv, unless it has errors of its own.
			*ev = event{}
			err = unmarshal(raw, &ev.eventCore)
		}
		if err != nil {
			reason := "invalid JSON: " + err.Error()
			if errors.As(err, &te) {
				reason = typeErrorReason(te)
			}
			b.Rejects = append(b.Rejects, Reject{Index: index, AuditID: strings.Clone(ev.AuditID), Reason: reason})
			return
		}
	}
	decodeEvent(cluster, index, raw, ev, b)
}

// decodeEvent flattens ev, decoded from raw, into a Row of b, or a Reject.
func decodeEvent(cluster string, index int, raw []byte, ev *event, b *Batch) {
	row, reason := normalize(cluster, ev, raw)
	if reason != "" {
		b.Rejects = append(b.Rejects, Reject{Index: index, AuditID: strings.Clone(ev.AuditID), Reason: reason})
		return
	}
	b.Rows = append(b.Rows, row)
}

// normalize flattens a decoded event into a Row, or says why it cannot.
func normalize(cluster string, ev *event, raw []byte) (store.Row, string) {
	if ev.Kind != "" && ev.Kind != "Event" {
		return store.Row{}, fmt.Sprintf("kind is %.64q, want Event", ev.Kind)
	}
	if !knownAPIVersion(ev.APIVersion) {
		return store.Row{}, fmt.Sprintf("apiVersion is %.64q, want %s, %s or %s", ev.APIVersion, auditV1, auditV1beta1, auditV1alpha1)
	}
	if ev.AuditID == "" {
		return store.Row{}, "missing auditID"
	}
	stage := internStage(ev.Stage)
	if stage == "" {
		if ev.Stage == "" {
			return store.Row{}, "missing stage"
		}
		return store.Row{}, fmt.Sprintf("unknown stage %.64q", ev.Stage)
	}

	name, value := firstSet(
		"stageTimestamp", ev.StageTimestamp,
		"timestamp", ev.Timestamp,
		"metadata.creationTimestamp", ev.Metadata.CreationTimestamp)
	if value == "" {
		return store.Row{}, "missing stageTimestamp"
	}
	ts, why := parseTime(value)
	if why != "" {
		return store.Row{}, fmt.Sprintf("%s %s: %s", name, quoteShort(value), why)
	}
	received := ts
	name, value = firstSet(
		"requestReceivedTimestamp", ev.RequestReceivedTimestamp,
		"timestamp", ev.Timestamp,
		"metadata.creationTimestamp", ev.Metadata.CreationTimestamp)
	if value != "" {
		if received, why = parseTime(value); why != "" {
			return store.Row{}, fmt.Sprintf("%s %s: %s", name, quoteShort(value), why)
		}
	}

	var sourceIP string
	if len(ev.SourceIPs) > 0 {
		sourceIP = ev.SourceIPs[0]
	}
	annotations := ev.Annotations
	if len(annotations) == 0 {
		annotations = nil
	}
	verb := internVerb(ev.Verb)
	uri := ParseRequestURI(ev.RequestURI)
	group, version := ev.ObjectRef.APIGroup, ev.ObjectRef.APIVersion
	if g, v, ok := strings.Cut(version, "/"); ok && group == "" {
		// v1alpha1's group/version, whatever the document says it is:
		// webhook list items carry no apiVersion, and a v1 or v1beta1
		// objectRef.apiVersion never holds a '/'.
		group, version = g, v
	}
	return store.Row{
		Cluster:          cluster,
		AuditID:          strings.Clone(ev.AuditID),
		Stage:            stage,
		Level:            internLevel(ev.Level),
		Verb:             verb,
		RequestURI:       ev.RequestURI,
		Time:             ts,
		ReceivedAt:       received,
		User:             ev.User.Username,
		Groups:           ev.User.Groups,
		ImpersonatedUser: ev.ImpersonatedUser.Username,
		UserAgent:        ev.UserAgent,
		SourceIP:         sourceIP,
		Resource:         ev.ObjectRef.Resource,
		Subresource:      ev.ObjectRef.Subresource,
		APIGroup:         group,
		APIVersion:       version,
		Namespace:        ev.ObjectRef.Namespace,
		Name:             ev.ObjectRef.Name,
		ObjectRV:         ev.ObjectRef.ResourceVersion,
		ObjectUID:        ev.ObjectRef.UID,
		Code:             ev.ResponseStatus.Code,
		ResponseRV:       ev.ResponseObject.Metadata.ResourceVersion,
		Watch:            verb == "watch" || uri.Watch,
		RequestedRV:      uri.ResourceVersion,
		RVMatch:          uri.ResourceVersionMatch,
		TimeoutSeconds:   uri.TimeoutSeconds,
		LabelSelector:    uri.LabelSelector,
		FieldSelector:    uri.FieldSelector,
		Limit:            uri.Limit,
		Continue:         uri.Continue,
		Annotations:      annotations,
		Raw:              raw,
	}, ""
}

// firstSet returns the first of the name, value pairs whose value is not
// empty, or "", "" when all are.
func firstSet(pairs ...string) (name, value string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			return pairs[i], pairs[i+1]
		}
	}
	return "", ""
}

// internStage returns the constant for a known stage, "" for any other.
func internStage(s string) string {
	switch s {
	case "RequestReceived":
		return "RequestReceived"
	case "ResponseStarted":
		return "ResponseStarted"
	case "ResponseComplete":
		return "ResponseComplete"
	case "Panic":
		return "Panic"
	}
	return ""
}

// internLevel returns the constant for a known level, or a copy of s.
func internLevel(s string) string {
	switch s {
	case "Metadata":
		return "Metadata"
	case "RequestResponse":
		return "RequestResponse"
	case "Request":
		return "Request"
	case "None":
		return "None"
	}
	return strings.Clone(s)
}

// internVerb returns the constant for a known verb, or a copy of s.
func internVerb(s string) string {
	switch s {
	case "get":
		return "get"
	case "list":
		return "list"
	case "watch":
		return "watch"
	case "create":
		return "create"
	case "update":
		return "update"
	case "patch":
		return "patch"
	case "delete":
		return "delete"
	case "deletecollection":
		return "deletecollection"
	case "proxy":
		return "proxy"
	case "post":
		return "post"
	case "put":
		return "put"
	case "head":
		return "head"
	case "options":
		return "options"
	}
	return strings.Clone(s)
}

// unmarshal decodes data into v with go-json, its strings referring to data
// rather than copied. A panic inside the decoder, which must never take the
// process down on hostile input, becomes an error.
func unmarshal(data []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("JSON decoder panicked: %v", p)
		}
	}()
	return json.UnmarshalWithOption(data, v, json.DecodeNoCopyString())
}

// typeErrorReason describes a field of the wrong JSON type.
func typeErrorReason(te *json.UnmarshalTypeError) string {
	field := te.Field
	if field == "" {
		field = "(root)"
	}
	got, _, _ := strings.Cut(te.Value, " ")
	return fmt.Sprintf("field %.64q is a JSON %s, want %s", field, got, jsonKindOfType(te.Type))
}

// jsonKindOfType names the JSON type a Go type decodes from.
func jsonKindOfType(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// jsonKindOf names the JSON type of a value by its first byte.
func jsonKindOf(v []byte) string {
	if len(v) == 0 {
		return "empty value"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
