package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/auditlens/auditlens/store"
)

// ClusterAttribute is the resource attribute that names the cluster of a
// resource's log records, unless the request's token, client certificate
// or URL path already did (then it may only repeat that cluster).
const ClusterAttribute = "k8s.cluster.name"

// APIServerAttributes name the apiserver of a resource's records unless the
// request did: the first whose value is a valid name wins. An apiserver
// running as a static pod is "kube-apiserver-<node>" in k8s.pod.name; a
// collector's resourcedetection processor sets host.name.
var APIServerAttributes = []string{"k8s.pod.name", "host.name"}

// otlpPaths describes the paths the OTLP receiver serves, for errors.
const otlpPaths = "/v1/logs, /otlp/{cluster}/v1/logs or /otlp/{cluster}/{apiserver}/v1/logs"

// OTLPLogs receives OpenTelemetry log records whose bodies are audit
// events, as an OpenTelemetry Collector's otlphttp exporter sends them
// (OTLP/HTTP: POST /v1/logs, protobuf or JSON, optionally gzipped). A
// record's body is the event's JSON line, a string, as the filelog receiver
// reads the apiserver's --audit-log-path, or the event as a map (after a
// json_parser). Everything downstream is the webhook's: the same spool,
// acknowledged only once fsync'd, the same deduplication on (cluster,
// auditID, stage), so an event that arrives both ways is stored once.
//
// A record that is not an audit event is rejected on its own, counted in
// the answer's partial_success; the others are kept.
type OTLPLogs struct {
	sp  Appender
	cfg WebhookConfig
}

// NewOTLPLogs returns an OTLP/HTTP logs handler that spools into sp. It
// takes the webhook's configuration: the same tokens (a token names the
// cluster, and its apiserver when it does), the same body limit and spool
// timeout. DefaultCluster is not used: a record whose cluster nothing
// names is rejected, never filed under a default.
func NewOTLPLogs(sp Appender, cfg WebhookConfig) *OTLPLogs {
	cfg.setDefaults()
	return &OTLPLogs{sp: sp, cfg: cfg}
}

// otlpEncoding is the encoding of a request, and so of its answer.
type otlpEncoding int

const (
	otlpJSON otlpEncoding = iota
	otlpProto
)

func (e otlpEncoding) contentType() string {
	if e == otlpProto {
		return "application/x-protobuf"
	}
	return "application/json"
}

// otlpResult is what a request came to: the records accepted and rejected
// and, when some were rejected, why.
type otlpResult struct {
	accepted, rejected int
	message            string
}

// retryAfter is the Retry-After of a 503: the spool could not take the
// batch (a full disk, a shutdown). OTLP exporters wait this long before
// they send again.
const retryAfter = "10"

// ServeHTTP implements http.Handler. The one place that writes responses:
// 200 with an ExportLogsServiceResponse, else a google.rpc.Status, both in
// the request's encoding (JSON when it had none we know).
func (h *OTLPLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	enc, res, err := h.serve(r)
	code := http.StatusOK
	var body []byte
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			code = he.code
		} else {
			code = http.StatusInternalServerError
		}
		// 503: the spool refused, and its health logs that once.
		if code >= 500 && code != http.StatusServiceUnavailable {
			h.cfg.Logger.Error("otlp logs", "err", err, "remote", r.RemoteAddr)
		}
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter)
		}
		body = encodeStatus(enc, code, err.Error())
	} else {
		body = encodeExportResponse(enc, res.rejected, res.message)
	}
	h.cfg.Metrics.OTLPRequests.WithLabelValues(strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", enc.contentType())
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func (h *OTLPLogs) serve(r *http.Request) (otlpEncoding, otlpResult, error) {
	var res otlpResult
	if r.Method != http.MethodPost {
		return otlpJSON, res, errorf(http.StatusMethodNotAllowed, "the OTLP logs receiver accepts POST, not %s", r.Method)
	}
	// A page's post is refused as such whatever its content type.
	enc, encErr := requestEncoding(r)
	if err := fromBrowser(r); err != nil {
		return enc, res, err
	}
	if encErr != nil {
		return enc, res, encErr
	}
	path, err := otlpPathSource(r.URL.Path)
	if err != nil {
		return enc, res, err
	}
	sender, err := identify(r, h.cfg.Tokens, path)
	if err != nil {
		return enc, res, err
	}
	body, err := readBody(r, h.cfg.MaxBodyBytes, "lower the exporter's batch size or raise --max-body-bytes")
	if err != nil {
		return enc, res, err
	}
	logs, err := unmarshalLogs(enc, body)
	if err != nil {
		return enc, res, err
	}
	groups, res, err := h.decode(sender, logs)
	if err != nil {
		return enc, res, err
	}
	if res.accepted == 0 && res.rejected > 0 {
		return enc, res, errorf(http.StatusBadRequest, "no log record was an audit event: %s", res.message)
	}
	if len(groups) == 0 {
		return enc, res, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.AppendTimeout)
	defer cancel()
	start := time.Now()
	// One spool record per sender. When a later one fails the exporter
	// sends the whole request again; the writer drops what was stored.
	for _, g := range groups {
		if n := h.cfg.Redactor.Apply(g.rows); n > 0 {
			h.cfg.Metrics.Redacted.Add(float64(n))
		}
		if err := h.sp.AppendRows(ctx, g.src, g.rows); err != nil {
			return enc, res, errorf(http.StatusServiceUnavailable, "log records not accepted, retry later: %v", err)
		}
	}
	h.cfg.Metrics.SpoolSeconds.Observe(time.Since(start).Seconds())
	for _, g := range groups {
		h.cfg.Metrics.Received.WithLabelValues(g.src.Cluster).Add(float64(len(g.rows)))
	}
	return enc, res, nil
}

// requestEncoding tells the encoding of a request by its Content-Type.
func requestEncoding(r *http.Request) (otlpEncoding, error) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil && ct != "" {
		return otlpJSON, errorf(http.StatusUnsupportedMediaType, "Content-Type %.64q: %v (send application/x-protobuf or application/json)", ct, err)
	}
	switch mt {
	case "application/x-protobuf":
		return otlpProto, nil
	case "application/json":
		return otlpJSON, nil
	}
	return otlpJSON, errorf(http.StatusUnsupportedMediaType, "unsupported Content-Type %.64q (send application/x-protobuf or application/json)", ct)
}

// otlpPathSource reads the cluster and apiserver a receiver path names.
func otlpPathSource(p string) (Source, error) {
	rest, ok := strings.CutSuffix(strings.TrimSuffix(p, "/"), "/v1/logs")
	if !ok {
		return Source{}, errorf(http.StatusNotFound, "path %q: want %s", p, otlpPaths)
	}
	if rest == "" {
		return Source{}, nil
	}
	sub, ok := strings.CutPrefix(rest, "/otlp")
	if !ok || sub == "" || sub[0] != '/' {
		return Source{}, errorf(http.StatusNotFound, "path %q: want %s", p, otlpPaths)
	}
	return pathSource(sub, otlpPaths, p)
}

// unmarshalLogs decodes an ExportLogsServiceRequest. It is read as
// LogsData, which has the same one field (resource_logs = 1, JSON
// "resourceLogs"): the two messages are the same bytes on the wire.
func unmarshalLogs(enc otlpEncoding, body []byte) (logs plog.Logs, err error) {
	defer func() {
		// The decoder must never take the process down on hostile input.
		if p := recover(); p != nil {
			err = errorf(http.StatusBadRequest, "decoding ExportLogsServiceRequest: decoder panicked: %v", p)
		}
	}()
	if enc == otlpProto {
		var u plog.ProtoUnmarshaler
		logs, err = u.UnmarshalLogs(body)
	} else {
		var u plog.JSONUnmarshaler
		logs, err = u.UnmarshalLogs(body)
	}
	if err != nil {
		return plog.Logs{}, errorf(http.StatusBadRequest, "decoding ExportLogsServiceRequest (%s): %v", enc.contentType(), err)
	}
	return logs, nil
}

// otlpGroup is the rows of one sender: one spool record.
type otlpGroup struct {
	src  Source
	rows []store.Row
}

// maxReasonsShown caps the reasons a partial_success message lists.
const maxReasonsShown = 10

// rejectTally collects rejected records and their reasons.
type rejectTally struct {
	h       *OTLPLogs
	n       int
	reasons []string
}

func (t *rejectTally) add(reason, cluster, why string) {
	t.n++
	t.h.cfg.Metrics.OTLPRejected.WithLabelValues(reason).Inc()
	if cluster != "" {
		t.h.cfg.Metrics.Rejected.WithLabelValues(cluster).Inc()
	}
	if len(t.reasons) < maxReasonsShown && (len(t.reasons) == 0 || t.reasons[len(t.reasons)-1] != why) {
		t.reasons = append(t.reasons, why)
	}
}

func (t *rejectTally) message() string {
	if t.n == 0 {
		return ""
	}
	s := fmt.Sprintf("%d log records are not audit events: ", t.n)
	if t.n == 1 {
		s = "1 log record is not an audit event: "
	}
	s += strings.Join(t.reasons, "; ")
	if t.n > len(t.reasons) {
		s += "; …"
	}
	return s
}

// The reasons rejected records are counted under
// (auditlens_otlp_log_records_rejected_total).
const (
	rejectNoCluster = "no_cluster"
	rejectBodyType  = "body_type"
	rejectNotAudit  = "not_audit"
	rejectMalformed = "malformed_event"
)

// decode turns the records of logs into rows grouped by sender. sender is
// who the request says it is; its cluster, when set, is every resource's,
// and a resource naming another cluster is refused (403), as the webhook
// refuses a path naming another cluster than the token's.
func (h *OTLPLogs) decode(sender Source, logs plog.Logs) ([]otlpGroup, otlpResult, error) {
	var res otlpResult
	tally := rejectTally{h: h}
	var groups []otlpGroup
	index := map[Source]int{}
	var batch Batch
	ev := new(document)
	rls := logs.ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		src, unnamed, err := resourceSource(sender, rl.Resource().Attributes())
		if err != nil {
			return nil, res, err
		}
		sls := rl.ScopeLogs()
		for j := 0; j < sls.Len(); j++ {
			recs := sls.At(j).LogRecords()
			if unnamed != "" {
				for range recs.Len() {
					tally.add(rejectNoCluster, "", fmt.Sprintf("resource %d: %s", i, unnamed))
				}
				continue
			}
			batch.Rows = slices.Grow(batch.Rows[:0], recs.Len())
			for k := 0; k < recs.Len(); k++ {
				nRows, nRejects := len(batch.Rows), len(batch.Rejects)
				reason, why := decodeRecord(src.Cluster, recs.At(k).Body(), &batch, ev)
				if reason == "" && len(batch.Rejects) > nRejects {
					reason, why = rejectMalformed, batch.Rejects[nRejects].Reason
				}
				if reason != "" {
					// A record is stored whole or not at all.
					batch.Rows, batch.Rejects = batch.Rows[:nRows], batch.Rejects[:nRejects]
					tally.add(reason, src.Cluster, fmt.Sprintf("resource %d scope %d record %d: %s", i, j, k, why))
					continue
				}
				res.accepted++
			}
			if len(batch.Rows) == 0 {
				continue
			}
			src.tag(batch.Rows)
			g, ok := index[src]
			if !ok {
				g = len(groups)
				index[src] = g
				groups = append(groups, otlpGroup{src: src})
			}
			groups[g].rows = append(groups[g].rows, batch.Rows...)
		}
	}
	res.rejected = tally.n
	res.message = tally.message()
	return groups, res, nil
}

// resourceSource decides the sender of a resource's records. It returns a
// reason to reject them all when no cluster is named, and an error (403)
// when the resource names another cluster than the request.
func resourceSource(sender Source, attrs pcommon.Map) (Source, string, error) {
	src := sender
	if v, ok := attrs.Get(ClusterAttribute); ok {
		name := v.AsString()
		switch {
		case sender.Cluster != "" && name != sender.Cluster:
			return Source{}, "", errorf(http.StatusForbidden, "this request sends for cluster %q (its token, certificate or path says so), but a resource's %s is %.64q", sender.Cluster, ClusterAttribute, name)
		case sender.Cluster == "" && !ValidName(name):
			return Source{}, fmt.Sprintf("resource attribute %s %.64q must be %s", ClusterAttribute, name, NameRule), nil
		}
		src.Cluster = name
	}
	if src.Cluster == "" {
		return Source{}, fmt.Sprintf("no cluster: set the resource attribute %s, or send with a --webhook-token of the cluster or to /otlp/{cluster}/v1/logs", ClusterAttribute), nil
	}
	if src.APIServer == "" {
		for _, key := range APIServerAttributes {
			if v, ok := attrs.Get(key); ok && ValidName(v.AsString()) {
				src.APIServer = v.AsString()
				break
			}
		}
	}
	return src, "", nil
}

// decodeRecord decodes the audit event a record's body holds into b. It
// returns a reason and a message when the record is not an audit event;
// a malformed event is a Reject in b, as in a webhook batch.
//
// ev is scratch space for the decoder, reused across records.
func decodeRecord(cluster string, body pcommon.Value, b *Batch, ev *document) (reason, why string) {
	var text string
	switch body.Type() {
	case pcommon.ValueTypeStr:
		text = body.Str()
	case pcommon.ValueTypeMap:
		text = body.AsString()
	default:
		return rejectBodyType, fmt.Sprintf("body is a %s; want a string (the event's JSON line) or a map (the event)", body.Type())
	}
	// A string is immutable: its bytes can be the row's Raw as they are.
	data := unsafe.Slice(unsafe.StringData(text), len(text))
	if err := decodeOwnedEvent(cluster, data, b, ev); err != nil {
		return rejectNotAudit, err.Error()
	}
	return "", ""
}

// encodeExportResponse renders an ExportLogsServiceResponse:
//
//	message ExportLogsServiceResponse { ExportLogsPartialSuccess partial_success = 1; }
//	message ExportLogsPartialSuccess { int64 rejected_log_records = 1; string error_message = 2; }
//
// with partial_success left out when nothing was rejected.
func encodeExportResponse(enc otlpEncoding, rejected int, message string) []byte {
	if enc == otlpJSON {
		type partial struct {
			RejectedLogRecords int64  `json:"rejectedLogRecords,string,omitempty"`
			ErrorMessage       string `json:"errorMessage,omitempty"`
		}
		var resp struct {
			PartialSuccess *partial `json:"partialSuccess,omitempty"`
		}
		if rejected > 0 || message != "" {
			resp.PartialSuccess = &partial{RejectedLogRecords: int64(rejected), ErrorMessage: message}
		}
		b, _ := json.Marshal(resp)
		return b
	}
	if rejected == 0 && message == "" {
		return nil
	}
	var ps []byte
	if rejected > 0 {
		ps = protowire.AppendTag(ps, 1, protowire.VarintType)
		ps = protowire.AppendVarint(ps, uint64(rejected))
	}
	if message != "" {
		ps = protowire.AppendTag(ps, 2, protowire.BytesType)
		ps = protowire.AppendString(ps, message)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, ps)
}

// encodeStatus renders the google.rpc.Status of a failed request,
//
//	message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
//
// its code the gRPC code that goes with the HTTP status.
func encodeStatus(enc otlpEncoding, httpCode int, message string) []byte {
	code := grpcCode(httpCode)
	if enc == otlpJSON {
		b, _ := json.Marshal(struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		}{code, message})
		return b
	}
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, message)
}

// grpcCode maps the HTTP statuses the receiver answers to gRPC codes.
func grpcCode(httpCode int) int32 {
	switch httpCode {
	case http.StatusBadRequest:
		return 3 // INVALID_ARGUMENT
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		return 12 // UNIMPLEMENTED
	case http.StatusRequestEntityTooLarge:
		return 8 // RESOURCE_EXHAUSTED
	case http.StatusServiceUnavailable:
		return 14 // UNAVAILABLE
	}
	return 13 // INTERNAL
}
