package policy

import (
	"slices"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Request is what the apiserver knows of a request when it evaluates the
// audit policy: the authenticated user and the request's attributes, as
// in k8s.io/apiserver's authorizer.Attributes.
type Request struct {
	User   string
	Groups []string
	// Verb is the API verb of a resource request (get, list, watch,
	// create, update, patch, delete, deletecollection) or the lower-case
	// HTTP method of a non-resource request.
	Verb string
	// APIGroup ("" is the core group), Resource, Subresource, Namespace
	// ("" for cluster-scoped resources and for lists and watches across
	// all namespaces) and Name ("" for lists, watches and creates) of a
	// resource request.
	APIGroup, Resource, Subresource, Namespace, Name string
	// Path is the URL path of a non-resource request (/healthz, /api);
	// it is empty for resource requests.
	Path string
}

// IsResourceRequest reports whether r is a request for an API resource
// rather than a non-resource URL.
func (r Request) IsResourceRequest() bool { return r.Path == "" }

// Decision is the audit configuration the policy gives a request.
type Decision struct {
	// Rule is the index of the first rule that matched, -1 when none did
	// (the request is then not audited: the default level is None).
	Rule  int           `json:"rule"`
	Level auditv1.Level `json:"level"`
	// OmitStages is the union of the policy's and the rule's omitStages.
	OmitStages []auditv1.Stage `json:"omitStages,omitempty"`
}

// Emits reports whether the apiserver writes an event for the request at
// stage: its level is not None and the stage is not omitted.
func (d Decision) Emits(stage auditv1.Stage) bool {
	return d.Level != auditv1.LevelNone && d.Level != "" && !slices.Contains(d.OmitStages, stage)
}

// Evaluate returns the audit configuration of r: the first rule that
// matches it wins, as in kube-apiserver.
func (p *Policy) Evaluate(r Request) Decision {
	for i := range p.Rules {
		if ruleMatches(&p.Rules[i], r) {
			return Decision{Rule: i, Level: p.Rules[i].Level, OmitStages: unionStages(p.OmitStages, p.Rules[i].OmitStages)}
		}
	}
	return Decision{Rule: -1, Level: auditv1.LevelNone, OmitStages: unionStages(p.OmitStages)}
}

// The matching below follows k8s.io/apiserver/pkg/audit/policy/checker.go
// (ruleMatches, ruleMatchesResource, ruleMatchesNonResource, pathMatches).

func ruleMatches(rule *auditv1.PolicyRule, r Request) bool {
	if len(rule.Users) > 0 && !slices.Contains(rule.Users, r.User) {
		return false
	}
	if len(rule.UserGroups) > 0 && !slices.ContainsFunc(r.Groups, func(g string) bool { return slices.Contains(rule.UserGroups, g) }) {
		return false
	}
	if len(rule.Verbs) > 0 && !slices.Contains(rule.Verbs, r.Verb) {
		return false
	}
	// A rule naming namespaces or resources applies to resource requests
	// only, whatever nonResourceURLs it also names (validation refuses
	// both together).
	if len(rule.Namespaces) > 0 || len(rule.Resources) > 0 {
		return ruleMatchesResource(rule, r)
	}
	if len(rule.NonResourceURLs) > 0 {
		return !r.IsResourceRequest() && slices.ContainsFunc(rule.NonResourceURLs, func(spec string) bool { return pathMatches(r.Path, spec) })
	}
	return true
}

// pathMatches matches a non-resource URL: "*" matches every path, a spec
// ending in "*" matches the paths it prefixes, anything else matches
// itself.
func pathMatches(path, spec string) bool {
	switch {
	case spec == "*", spec == path:
		return true
	case strings.HasSuffix(spec, "*"):
		return strings.HasPrefix(path, strings.TrimRight(spec, "*"))
	}
	return false
}

func ruleMatchesResource(rule *auditv1.PolicyRule, r Request) bool {
	if !r.IsResourceRequest() {
		return false
	}
	// Cluster-scoped resources, and lists and watches across namespaces,
	// have the namespace "".
	if len(rule.Namespaces) > 0 && !slices.Contains(rule.Namespaces, r.Namespace) {
		return false
	}
	if len(rule.Resources) == 0 {
		return true
	}
	combined := r.Resource
	if r.Subresource != "" {
		combined = r.Resource + "/" + r.Subresource
	}
	for _, gr := range rule.Resources {
		if gr.Group != r.APIGroup && gr.Group != "*" {
			continue
		}
		if len(gr.Resources) == 0 {
			return true
		}
		if len(gr.ResourceNames) > 0 && !slices.Contains(gr.ResourceNames, r.Name) {
			continue
		}
		for _, res := range gr.Resources {
			switch {
			case res == combined, res == "*":
				return true
			case r.Subresource != "" && strings.HasPrefix(res, "*/") && r.Subresource == res[2:]:
				return true
			// "pods/*" matches pods and every subresource of pods.
			case strings.HasSuffix(res, "/*") && r.Resource == strings.TrimSuffix(res, "/*"):
				return true
			}
		}
	}
	return false
}

// unionStages returns the stages in any of the lists, once each, in the
// order of the stages of a request.
func unionStages(lists ...[]auditv1.Stage) []auditv1.Stage {
	var out []auditv1.Stage
	for _, s := range allStages {
		for _, l := range lists {
			if slices.Contains(l, s) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// allStages are the stages of a request, in order.
var allStages = []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted, auditv1.StageResponseComplete, auditv1.StagePanic}

// levelRank orders levels: None < Metadata < Request < RequestResponse.
func levelRank(l auditv1.Level) int {
	switch l {
	case auditv1.LevelMetadata:
		return 1
	case auditv1.LevelRequest:
		return 2
	case auditv1.LevelRequestResponse:
		return 3
	}
	return 0
}
