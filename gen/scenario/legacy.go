package scenario

import (
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Format is an audit format a kube-apiserver writes. The simulation builds
// events with the audit.k8s.io/v1 types; WriteLog rewrites them into the
// older shapes.
type Format string

// The formats.
const (
	// V1 is audit.k8s.io/v1 (Kubernetes 1.13 and later).
	V1 Format = ""
	// V1beta1K8s18 is audit.k8s.io/v1beta1 as Kubernetes 1.8 wrote it:
	// one second-precision "timestamp" (when the request arrived) on
	// every stage, no stageTimestamp or requestReceivedTimestamp (1.9),
	// no userAgent (1.12, kubernetes PR #64812), no annotations (1.9),
	// metadata.creationTimestamp set to the timestamp.
	V1beta1K8s18 Format = "audit.k8s.io/v1beta1"
	// V1alpha1K8s17 is audit.k8s.io/v1alpha1 as Kubernetes 1.7 wrote
	// it: as V1beta1K8s18, and objectRef has no apiGroup: its apiVersion
	// is "group/version" ("v1" for the core group); metadata's
	// creationTimestamp is null.
	V1alpha1K8s17 Format = "audit.k8s.io/v1alpha1"
)

// noUserAgent reports whether the format has no userAgent.
func (f Format) noUserAgent() bool { return f != V1 }

// legacyEvent is an audit Event of Kubernetes 1.7 (v1alpha1) or 1.8
// (v1beta1), field by field as their Go types encode it.
type legacyEvent struct {
	Kind             string            `json:"kind"`
	APIVersion       string            `json:"apiVersion"`
	Metadata         legacyMeta        `json:"metadata"`
	Level            auditv1.Level     `json:"level"`
	Timestamp        metav1.Time       `json:"timestamp"`
	AuditID          types.UID         `json:"auditID"`
	Stage            auditv1.Stage     `json:"stage"`
	RequestURI       string            `json:"requestURI"`
	Verb             string            `json:"verb"`
	User             authnv1.UserInfo  `json:"user"`
	ImpersonatedUser *authnv1.UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs        []string          `json:"sourceIPs,omitempty"`
	ObjectRef        *legacyObjectRef  `json:"objectRef,omitempty"`
	ResponseStatus   *metav1.Status    `json:"responseStatus,omitempty"`
	RequestObject    *runtime.Unknown  `json:"requestObject,omitempty"`
	ResponseObject   *runtime.Unknown  `json:"responseObject,omitempty"`
}

type legacyMeta struct {
	CreationTimestamp metav1.Time `json:"creationTimestamp"`
}

type legacyObjectRef struct {
	Resource        string    `json:"resource,omitempty"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name,omitempty"`
	UID             types.UID `json:"uid,omitempty"`
	APIGroup        string    `json:"apiGroup,omitempty"`
	APIVersion      string    `json:"apiVersion,omitempty"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Subresource     string    `json:"subresource,omitempty"`
}

// legacy rewrites a v1 event into the format's shape.
func (f Format) legacy(ev *auditv1.Event) *legacyEvent {
	at := metav1.NewTime(ev.RequestReceivedTimestamp.Time.UTC().Truncate(time.Second))
	out := &legacyEvent{Kind: "Event", APIVersion: string(f), Level: ev.Level, Timestamp: at, AuditID: ev.AuditID,
		Stage: ev.Stage, RequestURI: ev.RequestURI, Verb: ev.Verb, User: ev.User, ImpersonatedUser: ev.ImpersonatedUser,
		SourceIPs: ev.SourceIPs, ResponseStatus: ev.ResponseStatus, RequestObject: ev.RequestObject, ResponseObject: ev.ResponseObject}
	if f == V1beta1K8s18 {
		out.Metadata.CreationTimestamp = at
	}
	if r := ev.ObjectRef; r != nil {
		o := &legacyObjectRef{Resource: r.Resource, Namespace: r.Namespace, Name: r.Name, UID: r.UID, APIGroup: r.APIGroup,
			APIVersion: r.APIVersion, ResourceVersion: r.ResourceVersion, Subresource: r.Subresource}
		if f == V1alpha1K8s17 {
			o.APIGroup = ""
			if r.APIGroup != "" && !strings.Contains(r.APIVersion, "/") {
				o.APIVersion = r.APIGroup + "/" + r.APIVersion
			}
		}
		out.ObjectRef = o
	}
	return out
}
