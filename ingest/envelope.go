package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/goccy/go-json"
)

// Kinds of import lines: what wrapped the audit events of a line, the keys
// of ImportStats.Kinds. Import detects the kind of each line on its own
// (DecodeImportLine), so one file may mix them.
const (
	// KindAudit is the apiserver's own format: an Event per line as its
	// log backend writes, or an EventList captured from its webhook.
	KindAudit = "audit"
	// KindAKS is an Azure diagnostic record of category kube-audit or
	// kube-audit-admin, one per line as diagnostic settings write them to
	// a storage account, or an Event Hub batch {"records":[...]} of them.
	KindAKS = "aks"
	// KindEKSCloudWatch is a CloudWatch Logs subscription payload
	// {"messageType":"DATA_MESSAGE","logGroup":...,"logEvents":[...]}, as
	// Firehose delivers it (gzipped, several concatenated in one file and
	// on one line) or a Lambda receives it ({"awslogs":{"data":...}}).
	KindEKSCloudWatch = "eks-cloudwatch"
	// KindEKSExport is a line of a CloudWatch Logs export to S3:
	// "<RFC 3339 timestamp> <event JSON>".
	KindEKSExport = "eks-export"
	// KindEKSMessage is one CloudWatch log event as a JSON object with the
	// event in "message", as `aws logs filter-log-events` returns them.
	KindEKSMessage = "eks-message"
	// KindGKE is a Cloud Logging entry of the k8s.io service: a Cloud
	// Audit Logs AuditLog translated field by field into an audit event
	// (envelope_gke.go).
	KindGKE = "gke"
)

// ErrNoCluster is wrapped by the errors of DecodeImportLine when a line
// holds audit events but neither its envelope nor the LineSource names
// their cluster.
var ErrNoCluster = errors.New("no cluster name: nothing in the line names its cluster; pass --cluster NAME")

// noClusterReason is the Reason of a Reject for an envelope record that
// names no cluster when the LineSource has none either.
const noClusterReason = "the record names no cluster; pass --cluster NAME"

// LineSource says which cluster, and which apiserver of it, the events of
// an imported line belong to.
//
// The rule: Cluster, when Fixed, tags every event (import --cluster).
// Otherwise an envelope that names a cluster names its events' cluster:
// the AKS resourceId's managed cluster (lowercased: Azure writes resource
// IDs in capitals and resource names are case-insensitive), the EKS
// logGroup /aws/eks/<cluster>/cluster, GKE's resource.labels.cluster_name.
// Cluster is the fallback for lines whose envelope names none (plain audit
// lines, export lines); with no fallback they are rejected with
// ErrNoCluster. A cluster name taken from an envelope must be a valid name
// (ValidName), or the record is rejected saying so: names are not
// rewritten, because a rewritten name could merge two clusters.
//
// APIServer, when set, tags every event. Otherwise the envelope's
// apiserver is kept when it is a valid name: the AKS properties.pod (the
// kube-apiserver pod) and the EKS logStream (kube-apiserver-audit-<id>,
// one per apiserver instance). An invalid one is dropped, as the
// apiserver is optional.
type LineSource struct {
	Cluster   string
	Fixed     bool
	APIServer string
}

// clusterFor returns the cluster of events whose envelope names
// envelopeCluster ("" for none), or "" and the reason to reject them.
func (s LineSource) clusterFor(envelopeCluster string) (cluster, reason string) {
	switch {
	case s.Fixed && s.Cluster == "", !s.Fixed && envelopeCluster == "" && s.Cluster == "":
		return "", noClusterReason
	case s.Fixed || envelopeCluster == "":
		return s.Cluster, ""
	case !ValidName(envelopeCluster):
		return "", fmt.Sprintf("the envelope names cluster %s, which is not a valid cluster name (%s); pass --cluster NAME",
			quoteShort(envelopeCluster), NameRule)
	}
	return envelopeCluster, ""
}

// apiserverFor returns the apiserver of events whose envelope names
// envelopeAPIServer.
func (s LineSource) apiserverFor(envelopeAPIServer string) string {
	if s.APIServer != "" {
		return s.APIServer
	}
	if ValidName(envelopeAPIServer) {
		return envelopeAPIServer
	}
	return ""
}

// DecodeImportLine decodes one line of an imported file into b and says
// what kind of line it was (KindAudit, KindAKS, ...): a plain audit line,
// as DecodeLine reads it, or one of the cloud providers' envelopes, each
// unwrapped to the audit events it carries. A blank line adds nothing and
// has kind "".
//
// The kind is told by cheap checks: a line that starts as the apiserver
// writes an event ({"kind":"Event) goes straight to the audit decoder, so
// plain logs cost what they cost before; a line that starts with a digit
// is tried as an export line; any other object is decoded once to see
// which envelope's keys it has.
//
// Records of an envelope that carry no audit event (another AKS category,
// another EKS log stream, a CloudWatch CONTROL_MESSAGE, a Cloud Logging
// entry of another service) are counted in b.Skipped. A malformed record
// or event is a Reject in b, the rest of the line is kept. An error means
// that nothing was appended: it wraps ErrNotAudit when the line is audit
// JSON in none of the formats, ErrNoCluster when it is but nothing names
// its cluster.
func DecodeImportLine(src LineSource, line []byte, b *Batch) (kind string, err error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return "", nil
	}
	if bytes.HasPrefix(line, []byte(`{"kind":"Event`)) {
		// The fast path: what the apiserver writes, decoded as before.
		return KindAudit, decodeAudit(src, line, b)
	}
	d := &envDecoder{src: src, b: b, rows: len(b.Rows), rejects: len(b.Rejects), skipped: b.Skipped}
	switch {
	case line[0] == '{':
		return d.object(line, 0)
	case line[0] >= '0' && line[0] <= '9':
		if k, ok, err := d.exportLine(line); ok {
			return k, err
		}
	}
	return KindAudit, decodeAudit(src, line, b)
}

// decodeAudit decodes a line in the apiserver's own format.
func decodeAudit(src LineSource, line []byte, b *Batch) error {
	cluster, _ := src.clusterFor("")
	if cluster == "" {
		// Only audit JSON is missing a cluster; anything else is told so.
		var probe Batch
		if err := decodeLine("-", line, &probe); err != nil {
			return err
		}
		return ErrNoCluster
	}
	rows := len(b.Rows)
	if err := decodeLine(cluster, line, b); err != nil {
		return err
	}
	if src.APIServer != "" {
		for i := rows; i < len(b.Rows); i++ {
			b.Rows[i].APIServer = src.APIServer
		}
	}
	return nil
}

// envDecoder decodes one import line into b.
type envDecoder struct {
	src LineSource
	b   *Batch
	ev  event // scratch for decodeItem
	// What b held before the line, to undo it when the line fails.
	rows, rejects, skipped int
}

// fail undoes what the line appended and returns err.
func (d *envDecoder) fail(err error) error {
	d.b.Rows, d.b.Rejects, d.b.Skipped = d.b.Rows[:d.rows], d.b.Rejects[:d.rejects], d.skipped
	return err
}

// audit decodes a line in the apiserver's own format.
func (d *envDecoder) audit(line []byte) error { return decodeAudit(d.src, line, d.b) }

// tag sets the apiserver of the rows appended from index from on.
func (d *envDecoder) tag(from int, envelopeAPIServer string) {
	apiserver := d.src.apiserverFor(envelopeAPIServer)
	if apiserver == "" {
		return
	}
	for i := from; i < len(d.b.Rows); i++ {
		d.b.Rows[i].APIServer = apiserver
	}
}

// present records that a key was there without decoding its value.
type present bool

func (p *present) UnmarshalJSON([]byte) error { *p = true; return nil }

// cloudProbe is what object reads of a line to tell the envelopes apart:
// the keys that only one of them has. Its strings refer to the line.
type cloudProbe struct {
	// Azure diagnostic record, Event Hub batch.
	Category   string             `json:"category"`
	ResourceID string             `json:"resourceId"`
	Properties *aksProperties     `json:"properties"`
	Records    *[]json.RawMessage `json:"records"`
	// CloudWatch Logs subscription payload, Lambda event, log event.
	MessageType string        `json:"messageType"`
	LogGroup    string        `json:"logGroup"`
	LogStream   string        `json:"logStream"`
	LogEvents   *[]cwLogEvent `json:"logEvents"`
	AWSLogs     *struct {
		Data string `json:"data"`
	} `json:"awslogs"`
	Message       *string `json:"message"`
	LogGroupName  string  `json:"logGroupName"`
	LogStreamName string  `json:"logStreamName"`
	// Cloud Logging entry.
	ProtoPayload present `json:"protoPayload"`
}

// cwLogEvent is the part of a CloudWatch log event that is read.
type cwLogEvent struct {
	Message string `json:"message"`
}

// rawLogEvents is cloudProbe's logEvents for the rare payload whose log
// events do not all decode as cwLogEvent: each is then read on its own.
type rawLogEvents struct {
	LogEvents []json.RawMessage `json:"logEvents"`
}

// aksProperties is the part of an AKS diagnostic record's properties that
// is read: the event JSON as a string and the apiserver pod that wrote it.
type aksProperties struct {
	Log string `json:"log"`
	Pod string `json:"pod"`
}

// maxNested bounds how deep envelopes may nest (a Lambda event holding a
// subscription payload, concatenated payloads), against hostile input.
const maxNested = 2

// object decodes a JSON object line: an envelope, or audit JSON.
func (d *envDecoder) object(line []byte, depth int) (string, error) {
	var p cloudProbe
	err := unmarshal(line, &p)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && strings.HasPrefix(te.Field, "logEvents") {
		// A malformed log event: decode the others one by one.
		p = cloudProbe{}
		var raw rawLogEvents
		if unmarshal(line, &raw) == nil {
			err = d.rawCloudWatch(line, raw.LogEvents)
			if err == nil {
				return KindEKSCloudWatch, nil
			}
		}
	}
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) && depth < maxNested {
			// Firehose concatenates gzipped subscription payloads into one
			// object: unzipped, they are JSON documents with nothing
			// between them.
			if docs := splitConcatenated(line); len(docs) > 1 {
				kind := ""
				for i, doc := range docs {
					k, err := d.object(doc, depth+1)
					if err != nil {
						return "", d.fail(fmt.Errorf("document %d of %d concatenated on the line: %w", i+1, len(docs), err))
					}
					kind = k
				}
				return kind, nil
			}
		}
		// Not an envelope: the audit decoder says what is wrong.
		return KindAudit, d.audit(line)
	}
	switch {
	case bool(p.ProtoPayload):
		return KindGKE, d.gke(line)
	case p.Records != nil:
		d.aksBatch(*p.Records)
		return KindAKS, nil
	case p.Properties != nil && p.Category != "":
		d.aksRecord(0, "", &p)
		return KindAKS, nil
	case p.MessageType != "" || p.LogEvents != nil:
		d.cloudWatch(&p)
		return KindEKSCloudWatch, nil
	case p.AWSLogs != nil && depth < maxNested:
		payload, err := lambdaPayload(p.AWSLogs.Data)
		if err != nil {
			return "", d.fail(fmt.Errorf("%w: awslogs.data: %v", ErrNotAudit, err))
		}
		return d.object(payload, depth+1)
	case p.Message != nil:
		if !isAuditStream(firstSetValue(p.LogStreamName, p.LogStream)) {
			d.b.Skipped++
			return KindEKSMessage, nil
		}
		d.wrapped(0, "message", *p.Message, eksCluster(firstSetValue(p.LogGroupName, p.LogGroup)),
			firstSetValue(p.LogStreamName, p.LogStream))
		return KindEKSMessage, nil
	}
	return KindAudit, d.audit(line)
}

// firstSetValue returns the first of its arguments that is not empty.
func firstSetValue(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// wrapped decodes one audit event carried as text inside an envelope
// record: index is its position in the line, where names the field for
// reject reasons. The event's bytes are a copy of text: the row keeps them
// as Raw.
func (d *envDecoder) wrapped(index int, where string, text string, envelopeCluster, envelopeAPIServer string) {
	payload := []byte(strings.TrimSpace(text))
	payload = payload[:len(payload):len(payload)]
	cluster, reason := d.src.clusterFor(envelopeCluster)
	switch {
	case reason != "":
	case len(payload) == 0:
		reason = where + " is empty"
	case payload[0] != '{':
		reason = where + " holds no audit event: not a JSON object"
	}
	if reason != "" {
		d.b.Rejects = append(d.b.Rejects, Reject{Index: index, Reason: reason})
		return
	}
	rows, rejects := len(d.b.Rows), len(d.b.Rejects)
	decodeItem(cluster, index, payload, &d.ev, d.b)
	for i := rejects; i < len(d.b.Rejects); i++ {
		d.b.Rejects[i].Reason = where + ": " + d.b.Rejects[i].Reason
	}
	d.tag(rows, envelopeAPIServer)
}

// aksBatch decodes an Event Hub batch: each record on its own.
func (d *envDecoder) aksBatch(records []json.RawMessage) {
	for i, raw := range records {
		var p cloudProbe
		where := fmt.Sprintf("records[%d]", i)
		if err := unmarshal(raw, &p); err != nil {
			reason := "invalid JSON: " + err.Error()
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				reason = typeErrorReason(te)
			}
			d.b.Rejects = append(d.b.Rejects, Reject{Index: i, Reason: where + ": " + reason})
			continue
		}
		d.aksRecord(i, where+".", &p)
	}
}

// aksRecord decodes one AKS diagnostic record.
func (d *envDecoder) aksRecord(index int, where string, p *cloudProbe) {
	if p.Category != "kube-audit" && p.Category != "kube-audit-admin" || p.Properties == nil {
		// kube-apiserver, guard, cluster-autoscaler... share the Event Hub.
		d.b.Skipped++
		return
	}
	d.wrapped(index, where+"properties.log", p.Properties.Log, aksCluster(p.ResourceID), p.Properties.Pod)
}

// aksCluster returns the managed cluster's name from an Azure resource ID,
// /SUBSCRIPTIONS/<id>/RESOURCEGROUPS/<rg>/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/<name>,
// lowercased; "" when the ID names none.
func aksCluster(resourceID string) string {
	const marker = "/managedclusters/"
	i := strings.LastIndex(strings.ToLower(resourceID), marker)
	if i < 0 {
		return ""
	}
	name, _, _ := strings.Cut(resourceID[i+len(marker):], "/")
	return strings.ToLower(name)
}

// cloudWatch decodes a CloudWatch Logs subscription payload.
func (d *envDecoder) cloudWatch(p *cloudProbe) {
	if p.MessageType == "CONTROL_MESSAGE" || !isAuditStream(p.LogStream) {
		// CloudWatch checks that the destination is reachable with a
		// control message; other streams of the log group are the
		// apiserver's, authenticator's... logs.
		d.b.Skipped++
		return
	}
	if p.LogEvents == nil {
		return
	}
	cluster := eksCluster(p.LogGroup)
	for i, le := range *p.LogEvents {
		d.wrapped(i, fmt.Sprintf("logEvents[%d].message", i), le.Message, cluster, p.LogStream)
	}
}

// rawCloudWatch decodes a subscription payload whose log events did not
// all decode: the payload's other fields again, then each event on its own.
func (d *envDecoder) rawCloudWatch(line []byte, events []json.RawMessage) error {
	var p cloudProbe
	var head struct {
		MessageType string `json:"messageType"`
		LogGroup    string `json:"logGroup"`
		LogStream   string `json:"logStream"`
	}
	if err := unmarshal(line, &head); err != nil {
		return err
	}
	p.MessageType, p.LogGroup, p.LogStream = head.MessageType, head.LogGroup, head.LogStream
	if p.MessageType == "CONTROL_MESSAGE" || !isAuditStream(p.LogStream) {
		d.b.Skipped++
		return nil
	}
	cluster := eksCluster(p.LogGroup)
	for i, raw := range events {
		var le cwLogEvent
		if err := unmarshal(raw, &le); err != nil {
			reason := "invalid JSON: " + err.Error()
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				reason = typeErrorReason(te)
			}
			d.b.Rejects = append(d.b.Rejects, Reject{Index: i, Reason: fmt.Sprintf("logEvents[%d]: %s", i, reason)})
			continue
		}
		d.wrapped(i, fmt.Sprintf("logEvents[%d].message", i), le.Message, cluster, p.LogStream)
	}
	return nil
}

// isAuditStream reports whether an EKS log stream holds the audit log
// (kube-apiserver-audit-<id>); a record that names no stream may be one.
func isAuditStream(stream string) bool {
	return stream == "" || strings.HasPrefix(stream, "kube-apiserver-audit")
}

// eksCluster returns the cluster's name from an EKS control-plane log
// group, /aws/eks/<cluster>/cluster; "" for another log group.
func eksCluster(logGroup string) string {
	rest, ok := strings.CutPrefix(logGroup, "/aws/eks/")
	if !ok {
		return ""
	}
	name, tail, _ := strings.Cut(rest, "/")
	if tail != "cluster" {
		return ""
	}
	return name
}

// maxLambdaPayload bounds an unzipped Lambda payload: CloudWatch sends at
// most 1 MB of log events per invocation, zipped.
const maxLambdaPayload = 64 << 20

// lambdaPayload unwraps the base64 of a gzipped subscription payload, as a
// Lambda subscribed to a log group receives it.
func lambdaPayload(data string) ([]byte, error) {
	zipped, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("not base64: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %v", err)
	}
	payload, err := io.ReadAll(io.LimitReader(zr, maxLambdaPayload+1))
	if err != nil {
		return nil, fmt.Errorf("unzipping: %v", err)
	}
	if len(payload) > maxLambdaPayload {
		return nil, fmt.Errorf("unzipped payload over %d bytes", maxLambdaPayload)
	}
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 || payload[0] != '{' {
		return nil, errors.New("unzipped payload is not a JSON object")
	}
	return payload, nil
}

// exportLine decodes "<timestamp> <event JSON>", a line of a CloudWatch
// Logs export. ok is false when the line is not one.
func (d *envDecoder) exportLine(line []byte) (kind string, ok bool, err error) {
	i := bytes.IndexByte(line, ' ')
	if i < 0 || i > 40 {
		return "", false, nil
	}
	rest := bytes.TrimSpace(line[i+1:])
	if len(rest) == 0 || rest[0] != '{' {
		return "", false, nil
	}
	if _, err := time.Parse(time.RFC3339Nano, string(line[:i])); err != nil {
		return "", false, nil
	}
	// The timestamp is CloudWatch's ingestion of the event, which carries
	// its own times.
	return KindEKSExport, true, d.audit(rest)
}

// splitConcatenated splits data into the JSON objects written one after
// the other in it, with only white space between them; it returns nil when
// data is anything else. It only finds where each object ends (strings,
// escapes, nesting); the decoder checks each one.
func splitConcatenated(data []byte) [][]byte {
	var docs [][]byte
	for len(data) > 0 {
		if data[0] != '{' {
			return nil
		}
		end := objectEnd(data)
		if end < 0 {
			return nil
		}
		docs = append(docs, data[:end])
		data = bytes.TrimLeft(data[end:], " \t\r\n")
	}
	return docs
}

// objectEnd returns the length of the JSON object data starts with, or -1
// when it does not end.
func objectEnd(data []byte) int {
	depth, inString, escaped := 0, false, false
	for i, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
