package store

import "time"

// Row is one audit event flattened into the typed columns of the
// audit_events table, plus the raw event bytes. Ingest builds rows; the
// engines write them. The writer stores an event as its residual (package
// store/residual) and an empty Raw; rows stored before that keep Raw and
// no residual. Field comments name the column.
type Row struct {
	Cluster          string            // cluster: the sender, from the URL path, token or certificate
	APIServer        string            // apiserver: which kube-apiserver of the cluster sent it; "" when not said
	AuditID          string            // audit_id
	Stage            string            // stage: RequestReceived, ResponseStarted, ResponseComplete, Panic
	Level            string            // level: Metadata, Request, RequestResponse
	Verb             string            // verb
	RequestURI       string            // request_uri
	Time             time.Time         // ts: stageTimestamp (UTC, microseconds)
	ReceivedAt       time.Time         // received_at: requestReceivedTimestamp
	User             string            // user: user.username
	Groups           []string          // user_groups
	ImpersonatedUser string            // impersonated_user
	UserAgent        string            // user_agent
	SourceIP         string            // source_ip: first of sourceIPs
	Resource         string            // resource: objectRef.resource
	Subresource      string            // subresource
	APIGroup         string            // api_group
	APIVersion       string            // api_version
	Namespace        string            // namespace
	Name             string            // name
	ObjectRV         string            // object_rv: objectRef.resourceVersion
	ObjectUID        string            // object_uid
	Code             int32             // code: responseStatus.code, 0 when absent
	ResponseRV       string            // response_rv: responseObject.metadata.resourceVersion
	Watch            bool              // watch: verb watch or watch=true in the URI
	RequestedRV      string            // req_rv: resourceVersion= in the URI
	RVMatch          string            // req_rv_match: resourceVersionMatch= in the URI
	TimeoutSeconds   int32             // timeout_seconds: timeoutSeconds= in the URI
	LabelSelector    string            // label_selector
	FieldSelector    string            // field_selector
	Limit            int64             // req_limit
	Continue         string            // req_continue
	Annotations      map[string]string // annotations
	Raw              []byte            // raw: the event JSON as received; empty when Residual holds it
	Residual         []byte            // residual: what the columns above cannot restore of Raw (package store/residual)
}

// Key identifies an event across retries and re-imports: the apiserver
// sends the same (auditID, stage) again when a webhook batch is retried.
// APIServer is not part of it: one request is audited by the one apiserver
// that served it, and an event re-imported from a file without the
// apiserver's name is still the same event.
type Key struct {
	Cluster string
	AuditID string
	Stage   string
}

// Key returns the row's identity.
func (r *Row) Key() Key { return Key{Cluster: r.Cluster, AuditID: r.AuditID, Stage: r.Stage} }
