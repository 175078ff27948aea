package ingest

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"
)

// GKE writes the Kubernetes audit log to Cloud Logging as LogEntry objects
// of the k8s.io service (resource type k8s_cluster) whose protoPayload is a
// Cloud Audit Logs AuditLog; the apiserver's Event itself is not kept.
// gke translates such an entry back into an audit.k8s.io/v1 Event, field by
// field, and lets the normalizer make the row of it:
//
//	auditID                 operation.id, else insertId (one entry per request, the same
//	                        in every export of it: dedup holds across re-imports)
//	stage                   ResponseComplete (one entry per request)
//	stageTimestamp          timestamp
//	verb                    the last part of methodName (io.k8s.core.v1.pods.create)
//	objectRef               resourceName: <group>/<version>[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]],
//	                        group "core" is the core group ("")
//	objectRef.resourceVersion, .uid
//	                        request.metadata (what the apiserver itself records for a write)
//	requestURI              rebuilt from resourceName: /api/v1/... or /apis/<group>/<version>/...
//	                        (a create's without the new object's name), with watch=true for a
//	                        watch and the list options request holds, if any
//	user.username           authenticationInfo.principalEmail
//	sourceIPs               [requestMetadata.callerIp]
//	userAgent               requestMetadata.callerSuppliedUserAgent
//	responseStatus.code     status.code, a google.rpc code, mapped to HTTP (gkeHTTPCode)
//	requestObject, responseObject
//	                        request, response; level RequestResponse, Request or Metadata by which are present
//	annotations             labels (authorization.k8s.io/decision, .../reason)
//	cluster                 resource.labels.cluster_name (see LineSource)
//
// What the entry does not hold and the row therefore lacks:
//
//   - The query parameters of requestURI. Entries carry no URI; a list's or
//     watch's options are recovered only when request holds them as
//     ListOptions. Without them a watch's resourceVersion, a watch-list's
//     sendInitialEvents and resourceVersionMatch, selectors, limit and the
//     continue token of a list's next page are unknown (empty columns).
//   - requestReceivedTimestamp and every stage but one: when a request
//     began is unknown, so received_at is left at the epoch, which the
//     detectors read as "start unknown"; a watch's lifetime cannot be told.
//   - user.groups, impersonatedUser, user.extra, sourceIPs beyond the
//     caller, and annotations other than the entry's labels.
//   - The exact HTTP status: google.rpc codes are coarser (201 is inferred
//     for a successful create; 410 Gone and 422 have no code of their own
//     and come out as the nearest one).
//
// What that means for each detector (policy check's words; TestGKEDetectors
// holds the table to the detectors over scenarios translated to entries):
//
//	watch-loop           blinded: static watches are told by the resourceVersion in their requestURI
//	watch-rv-regression  blinded: the same; watches without one are left out, so no false alarm either
//	heartbeat-loss       ok: Lease updates and node status patches (who, what, when, code) are all in the entry
//	rv-rollback          weakened: the head comes from writes' request or response metadata only when GKE
//	                     logged the bodies; the clients watching from the future are never seen
//	relist-loop          blinded: a watch's start is unknown, so its length is (the detector skips it)
//	relist-herd          weakened: lists by many clients are seen when Data Access logs are on; watch-lists
//	                     are not told from watches
//
// The Admin Activity log holds writes; reads (get, list, watch) are in the
// Data Access log only when it is enabled for the Kubernetes Engine API.
func (d *envDecoder) gke(line []byte) error {
	var e gkeEntry
	if err := unmarshal(line, &e); err != nil {
		reason := "invalid JSON: " + err.Error()
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			reason = typeErrorReason(te)
		}
		d.b.Rejects = append(d.b.Rejects, Reject{Index: 0, AuditID: strings.Clone(e.InsertID), Reason: "Cloud Logging entry: " + reason})
		return nil
	}
	pp := &e.ProtoPayload
	if pp.ServiceName != "k8s.io" || !strings.HasSuffix(pp.Type, "google.cloud.audit.AuditLog") {
		// GKE's own API (container.googleapis.com), other services' logs.
		d.b.Skipped++
		return nil
	}
	cluster, reason := d.src.clusterFor(e.Resource.Labels.ClusterName)
	auditID := firstSetValue(e.Operation.ID, e.InsertID)
	var ev gkeEvent
	if reason == "" {
		ev, reason = translateGKE(&e, auditID)
	}
	if reason != "" {
		d.b.Rejects = append(d.b.Rejects, Reject{Index: 0, AuditID: strings.Clone(auditID), Reason: "Cloud Logging entry: " + reason})
		return nil
	}
	raw, err := json.Marshal(&ev)
	if err != nil {
		d.b.Rejects = append(d.b.Rejects, Reject{Index: 0, AuditID: strings.Clone(auditID), Reason: "Cloud Logging entry: translating: " + err.Error()})
		return nil
	}
	rows, rejects := len(d.b.Rows), len(d.b.Rejects)
	decodeItem(cluster, 0, raw, &d.ev, d.b)
	for i := rejects; i < len(d.b.Rejects); i++ {
		d.b.Rejects[i].Reason = "Cloud Logging entry: " + d.b.Rejects[i].Reason
	}
	for i := rows; i < len(d.b.Rows); i++ {
		d.b.Rows[i].ReceivedAt = unknownStart
	}
	d.tag(rows, "")
	return nil
}

// unknownStart is the received_at of a row whose request's start is
// unknown: the epoch, which the detectors test for.
var unknownStart = time.Unix(0, 0).UTC()

// gkeEntry is the part of a Cloud Logging LogEntry that is read.
type gkeEntry struct {
	InsertID  string            `json:"insertId"`
	Timestamp string            `json:"timestamp"`
	Labels    map[string]string `json:"labels"`
	Operation struct {
		ID string `json:"id"`
	} `json:"operation"`
	Resource struct {
		Labels struct {
			ClusterName string `json:"cluster_name"`
		} `json:"labels"`
	} `json:"resource"`
	ProtoPayload struct {
		Type               string `json:"@type"`
		ServiceName        string `json:"serviceName"`
		MethodName         string `json:"methodName"`
		ResourceName       string `json:"resourceName"`
		AuthenticationInfo struct {
			PrincipalEmail string `json:"principalEmail"`
		} `json:"authenticationInfo"`
		RequestMetadata struct {
			CallerIP                string `json:"callerIp"`
			CallerSuppliedUserAgent string `json:"callerSuppliedUserAgent"`
		} `json:"requestMetadata"`
		Status struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
		Request  json.RawMessage `json:"request"`
		Response json.RawMessage `json:"response"`
	} `json:"protoPayload"`
}

// gkeEvent is the audit.k8s.io/v1 Event made of an entry.
type gkeEvent struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Level      string `json:"level"`
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	SourceIPs      []string      `json:"sourceIPs,omitempty"`
	UserAgent      string        `json:"userAgent,omitempty"`
	ObjectRef      *gkeObjectRef `json:"objectRef,omitempty"`
	ResponseStatus struct {
		Code    int32  `json:"code"`
		Message string `json:"message,omitempty"`
	} `json:"responseStatus"`
	RequestObject  json.RawMessage   `json:"requestObject,omitempty"`
	ResponseObject json.RawMessage   `json:"responseObject,omitempty"`
	StageTimestamp string            `json:"stageTimestamp"`
	Annotations    map[string]string `json:"annotations,omitempty"`
}

type gkeObjectRef struct {
	Resource        string `json:"resource,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	APIGroup        string `json:"apiGroup,omitempty"`
	APIVersion      string `json:"apiVersion,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Subresource     string `json:"subresource,omitempty"`
}

// gkeRequest is what is read of an entry's request: the object's metadata
// for a write, the options of a list or watch.
type gkeRequest struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		UID             string `json:"uid"`
	} `json:"metadata"`
	ResourceVersion      string `json:"resourceVersion"`
	ResourceVersionMatch string `json:"resourceVersionMatch"`
	LabelSelector        string `json:"labelSelector"`
	FieldSelector        string `json:"fieldSelector"`
	Continue             string `json:"continue"`
	Limit                any    `json:"limit"`
	TimeoutSeconds       any    `json:"timeoutSeconds"`
	SendInitialEvents    *bool  `json:"sendInitialEvents"`
	AllowWatchBookmarks  *bool  `json:"allowWatchBookmarks"`
}

// translateGKE builds the event of an entry, or says why it cannot.
func translateGKE(e *gkeEntry, auditID string) (gkeEvent, string) {
	pp := &e.ProtoPayload
	var ev gkeEvent
	if auditID == "" {
		return ev, "missing operation.id and insertId, one of which is the audit ID"
	}
	i := strings.LastIndexByte(pp.MethodName, '.')
	if i < 0 || i == len(pp.MethodName)-1 {
		return ev, fmt.Sprintf("methodName %s is not <api>.<resource>.<verb>", quoteShort(pp.MethodName))
	}
	ev.Kind, ev.APIVersion, ev.Stage = "Event", auditV1, "ResponseComplete"
	ev.AuditID = auditID
	ev.Verb = pp.MethodName[i+1:]
	ev.User.Username = pp.AuthenticationInfo.PrincipalEmail
	if pp.RequestMetadata.CallerIP != "" {
		ev.SourceIPs = []string{pp.RequestMetadata.CallerIP}
	}
	ev.UserAgent = pp.RequestMetadata.CallerSuppliedUserAgent
	ev.StageTimestamp = e.Timestamp
	ev.Annotations = e.Labels
	ev.ResponseStatus.Code = gkeHTTPCode(pp.Status.Code, ev.Verb)
	ev.ResponseStatus.Message = pp.Status.Message

	var req gkeRequest
	if isJSONObject(pp.Request) {
		ev.RequestObject = pp.Request
		if err := unmarshal(pp.Request, &req); err != nil {
			req = gkeRequest{} // options of unexpected types are not read
		}
	}
	if isJSONObject(pp.Response) {
		ev.ResponseObject = pp.Response
	}
	switch {
	case ev.ResponseObject != nil:
		ev.Level = "RequestResponse"
	case ev.RequestObject != nil:
		ev.Level = "Request"
	default:
		ev.Level = "Metadata"
	}

	ref, path := gkeObject(pp.ResourceName)
	if ref != nil {
		ref.ResourceVersion, ref.UID = req.Metadata.ResourceVersion, req.Metadata.UID
		ev.ObjectRef = ref
		if ev.Verb == "create" && ref.Subresource == "" && ref.Name != "" {
			// A create is a POST to the collection; the name is the new
			// object's. Creates of subresources (pods/eviction,
			// serviceaccounts/token) are POSTs to the object.
			path = strings.TrimSuffix(path, "/"+ref.Name)
		}
	}
	ev.RequestURI = path
	if q := gkeQuery(ev.Verb, &req); q != "" {
		ev.RequestURI += "?" + q
	}
	return ev, ""
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw json.RawMessage) bool {
	return len(raw) > 0 && raw[0] == '{'
}

// gkeObject parses a resourceName into an object reference and the path of
// the request's URI, as the apiserver's request-info parser reads paths:
// "namespaces/<ns>/<resource>..." is namespaced unless the part after the
// namespace's name is one of its own subresources (status, finalize).
func gkeObject(resourceName string) (*gkeObjectRef, string) {
	parts := strings.Split(strings.Trim(resourceName, "/"), "/")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" {
		return nil, "/" + strings.TrimPrefix(resourceName, "/")
	}
	ref := &gkeObjectRef{APIGroup: parts[0], APIVersion: parts[1]}
	prefix := "/apis/" + parts[0] + "/" + parts[1]
	if parts[0] == "core" {
		ref.APIGroup, prefix = "", "/api/"+parts[1]
	}
	rest := parts[2:]
	if rest[0] == "namespaces" && len(rest) > 1 {
		ref.Namespace = rest[1]
		if len(rest) > 2 && rest[2] != "status" && rest[2] != "finalize" {
			rest = rest[2:]
		}
	}
	ref.Resource = rest[0]
	if len(rest) > 1 {
		ref.Name = rest[1]
	}
	if len(rest) > 2 {
		ref.Subresource = strings.Join(rest[2:], "/")
	}
	if ref.Resource == "namespaces" {
		// A namespace is cluster-scoped: its name is not a namespace.
		ref.Namespace = ""
		if len(rest) > 1 {
			ref.Namespace = ref.Name
		}
	}
	return ref, prefix + "/" + strings.Join(parts[2:], "/")
}

// gkeQuery rebuilds the query of a list's or watch's URI from what the
// entry says: the verb and the options request holds, if any.
func gkeQuery(verb string, req *gkeRequest) string {
	if verb != "list" && verb != "watch" {
		return ""
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("resourceVersion", req.ResourceVersion)
	set("resourceVersionMatch", req.ResourceVersionMatch)
	set("labelSelector", req.LabelSelector)
	set("fieldSelector", req.FieldSelector)
	set("continue", req.Continue)
	set("limit", jsonInteger(req.Limit))
	set("timeoutSeconds", jsonInteger(req.TimeoutSeconds))
	if req.SendInitialEvents != nil {
		set("sendInitialEvents", strconv.FormatBool(*req.SendInitialEvents))
	}
	if req.AllowWatchBookmarks != nil {
		set("allowWatchBookmarks", strconv.FormatBool(*req.AllowWatchBookmarks))
	}
	if verb == "watch" {
		set("watch", "true")
	}
	return q.Encode()
}

// jsonInteger formats an integer that JSON wrote as a number or, as proto3
// JSON writes int64, a string; "" for anything else.
func jsonInteger(v any) string {
	switch v := v.(type) {
	case float64:
		if v == float64(int64(v)) && v > 0 {
			return strconv.FormatInt(int64(v), 10)
		}
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return v
		}
	}
	return ""
}

// gkeHTTPCode maps a google.rpc code to the HTTP status the apiserver
// answered, as Google's own mapping does; a successful create was a 201.
func gkeHTTPCode(code int32, verb string) int32 {
	switch code {
	case 0: // OK
		if verb == "create" {
			return 201
		}
		return 200
	case 1: // CANCELLED
		return 499
	case 3, 9, 11: // INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
		return 400
	case 4: // DEADLINE_EXCEEDED
		return 504
	case 5: // NOT_FOUND
		return 404
	case 6, 10: // ALREADY_EXISTS, ABORTED (a conflict)
		return 409
	case 7: // PERMISSION_DENIED
		return 403
	case 8: // RESOURCE_EXHAUSTED
		return 429
	case 12: // UNIMPLEMENTED
		return 501
	case 14: // UNAVAILABLE
		return 503
	case 16: // UNAUTHENTICATED
		return 401
	}
	return 500 // UNKNOWN, INTERNAL, DATA_LOSS and codes not defined
}
