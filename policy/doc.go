// Package policy checks a kube-apiserver audit policy against what the
// detectors read.
//
// [Parse] decodes an audit.k8s.io/v1 Policy (v1beta1 is accepted with a
// warning) and validates it as kube-apiserver does. [Policy.Evaluate]
// gives a request's level and omitted stages with the apiserver's
// semantics (k8s.io/apiserver/pkg/audit/policy/checker.go): the first
// matching rule wins; users, userGroups and verbs must match when set;
// resources match by group ("*" for any), resource, "resource/subresource",
// "*", "*/subresource", "resource/*" and resourceNames; namespaces match
// the request's namespace ("" for cluster-scoped resources and for lists
// and watches across namespaces); nonResourceURLs match non-resource
// requests only, "*" and a trailing "*" as wildcards; a rule's omitStages
// add to the policy's. No matching rule means level None.
//
// The matching is re-implemented rather than imported:
// k8s.io/apiserver/pkg/audit/policy pulls in the apiserver's audit
// package with its metrics (k8s.io/component-base and two more modules)
// for about a hundred lines.
//
// Each detector declares, beside its queries in package detect, the probe
// requests it must see ([NewProbe]: who issues them, the stages it can use
// and the least level), grouped into a [Need] that blinds the detector or
// only weakens it when unmet. [Check] evaluates a policy against them and
// proposes a fix for each unmet need; [Render] prints the [Report]. This
// package does not import detect: the caller passes the [DetectorNeeds].
package policy
