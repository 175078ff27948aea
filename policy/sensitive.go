package policy

import (
	"fmt"
	"slices"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Body is which body of a request an audit event carries.
type Body string

const (
	// RequestBody is recorded from level Request on.
	RequestBody Body = "request"
	// ResponseBody is recorded at level RequestResponse only.
	ResponseBody Body = "response"
)

// Exposure is a request whose recorded body holds secret material: the
// policy writes it into every audit event of the request, and so into
// auditlens's store and everything that reads it.
type Exposure struct {
	// Resource is "secrets", "serviceaccounts/token", and so on.
	Resource string   `json:"resource"`
	APIGroup string   `json:"apiGroup"`
	Verbs    []string `json:"verbs"`
	// Namespaces are those of the probes found exposed (of "default" and
	// "kube-system"; none for cluster-scoped reviews).
	Namespaces []string `json:"namespaces,omitempty"`
	// Clients are those of the probes found exposed ("a user",
	// "kube-controller-manager", …).
	Clients  []string      `json:"clients"`
	Body     Body          `json:"body"`
	Level    auditv1.Level `json:"level"`
	Rule     int           `json:"rule"`
	RuleText string        `json:"ruleText"`
	// Holds is what the body reveals.
	Holds string `json:"holds"`
}

// sensitiveRequest is a request whose body, at some level, holds secrets.
type sensitiveRequest struct {
	group, resource, subresource string
	verb                         string
	body                         Body
	holds                        string
}

// sensitiveRequests are the requests whose bodies hold what audit events
// must not: Secret data, ConfigMap data (which often holds credentials
// too), service-account tokens, the tokens a webhook authenticator is
// asked to review, and the identities and permissions asked about.
var sensitiveRequests = []sensitiveRequest{
	{"", "secrets", "", "create", RequestBody, "the Secret's data"},
	{"", "secrets", "", "update", RequestBody, "the Secret's data"},
	{"", "secrets", "", "patch", RequestBody, "the changed Secret data"},
	{"", "secrets", "", "get", ResponseBody, "the Secret's data"},
	{"", "secrets", "", "list", ResponseBody, "the data of every Secret listed"},
	{"", "configmaps", "", "create", RequestBody, "the ConfigMap's data"},
	{"", "configmaps", "", "update", RequestBody, "the ConfigMap's data"},
	{"", "configmaps", "", "patch", RequestBody, "the changed ConfigMap data"},
	{"", "configmaps", "", "get", ResponseBody, "the ConfigMap's data"},
	{"", "configmaps", "", "list", ResponseBody, "the data of every ConfigMap listed"},
	{"", "serviceaccounts", "token", "create", ResponseBody, "a bound service-account token, valid until it expires"},
	{"authentication.k8s.io", "tokenreviews", "", "create", RequestBody, "the bearer token under review"},
	{"authorization.k8s.io", "subjectaccessreviews", "", "create", RequestBody, "who asks for what: users, groups and the attributes checked"},
}

// sensitiveClients are who sends those requests: people, and the control
// plane's own components, which policies often single out.
var sensitiveClients = []Client{Person, ControllerManager, Kubelet, APIServer}

// Sensitive lists the requests whose secret-holding bodies the policy
// records, one per resource, body and deciding rule (their verbs,
// namespaces and clients merged). An empty list means no Secret data, token or review reaches the
// audit log by its bodies.
func Sensitive(p *Policy) []Exposure {
	var out []Exposure
	for _, sr := range sensitiveRequests {
		namespaces := []string{"default", "kube-system"}
		if sr.group != "" { // the reviews are cluster-scoped
			namespaces = []string{""}
		}
		for _, c := range sensitiveClients {
			for _, ns := range namespaces {
				r := Request{User: c.User, Groups: c.Groups, Verb: sr.verb, APIGroup: sr.group, Resource: sr.resource,
					Subresource: sr.subresource, Namespace: ns}
				if named := sr.verb == "get" || sr.verb == "update" || sr.verb == "patch" || sr.subresource != ""; named {
					r.Name = "web"
				}
				d := p.Evaluate(r)
				if !recordsBody(d, sr.body) {
					continue
				}
				out = addExposure(out, p, sr, c, ns, d)
			}
		}
	}
	return out
}

// addExposure adds what d records of sr's body for c in ns, merged into
// an exposure of the same resource, body and rule.
func addExposure(out []Exposure, p *Policy, sr sensitiveRequest, c Client, ns string, d Decision) []Exposure {
	res := sr.resource
	if sr.subresource != "" {
		res += "/" + sr.subresource
	}
	for i := range out {
		e := &out[i]
		if e.Resource == res && e.APIGroup == sr.group && e.Body == sr.body && e.Rule == d.Rule {
			if !slices.Contains(e.Clients, c.Name) {
				e.Clients = append(e.Clients, c.Name)
			}
			if !slices.Contains(e.Verbs, sr.verb) {
				e.Verbs = append(e.Verbs, sr.verb)
			}
			if ns != "" && !slices.Contains(e.Namespaces, ns) {
				e.Namespaces = append(e.Namespaces, ns)
			}
			return out
		}
	}
	e := Exposure{Resource: res, APIGroup: sr.group, Verbs: []string{sr.verb}, Clients: []string{c.Name},
		Body: sr.body, Level: d.Level, Rule: d.Rule, RuleText: DescribeRule(d.Rule, p.Rules[d.Rule]), Holds: sr.holds}
	if ns != "" {
		e.Namespaces = []string{ns}
	}
	return append(out, e)
}

// recordsBody reports whether the decision writes body into the request's
// ResponseComplete (or, failing that, any) event.
func recordsBody(d Decision, body Body) bool {
	if d.Rule < 0 || d.Level == auditv1.LevelNone {
		return false
	}
	if !d.Emits(auditv1.StageRequestReceived) && !d.Emits(auditv1.StageResponseComplete) && !d.Emits(auditv1.StagePanic) {
		return false
	}
	switch body {
	case RequestBody:
		return levelRank(d.Level) >= levelRank(auditv1.LevelRequest)
	default:
		return d.Level == auditv1.LevelRequestResponse
	}
}

// String says it in one line: "secrets (create, update) by a user: the
// request body holds the Secret's data (level Request by rules[7] ...)".
func (e Exposure) String() string {
	where := ""
	if len(e.Namespaces) > 0 {
		where = " in namespace " + strings.Join(e.Namespaces, ", ")
	}
	return fmt.Sprintf("%s (%s)%s by %s: the %s body holds %s (level %s by %s)",
		resourceName(e.APIGroup, strings.SplitN(e.Resource, "/", 2)[0], subresourceOf(e.Resource)),
		strings.Join(e.Verbs, ", "), where, strings.Join(e.Clients, ", "), e.Body, e.Holds, e.Level, e.RuleText)
}

func subresourceOf(res string) string {
	_, sub, _ := strings.Cut(res, "/")
	return sub
}

// sensitiveFix is the rule that stops bodies of sensitive requests from
// being recorded, to put first in the policy.
const sensitiveFix = `- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps", "serviceaccounts/token"]
  - group: "authentication.k8s.io"
    resources: ["tokenreviews"]
  - group: "authorization.k8s.io"
    resources: ["subjectaccessreviews", "selfsubjectaccessreviews", "localsubjectaccessreviews"]`
