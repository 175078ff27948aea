package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Verdict is how well a policy lets a detector see.
type Verdict string

const (
	// OK: the detector sees everything it reads.
	OK Verdict = "ok"
	// Weakened: a need that Weakens is not met.
	Weakened Verdict = "weakened"
	// Blinded: a need that Blinds is not met.
	Blinded Verdict = "blinded"
)

// Report is the result of Check.
type Report struct {
	APIVersion string           `json:"apiVersion"`
	Rules      int              `json:"rules"`
	Warnings   []string         `json:"warnings,omitempty"`
	Blinded    bool             `json:"blinded"`
	Detectors  []DetectorResult `json:"detectors"`
	// Sensitive lists the requests whose recorded bodies hold Secret
	// data, tokens or reviews (none: an empty list).
	Sensitive []Exposure `json:"sensitive"`
	// SensitiveFix, when Sensitive is not empty, is a rule to put first
	// in the policy that stops recording those bodies.
	SensitiveFix string `json:"sensitiveFix,omitempty"`
}

// DetectorResult is one detector's verdict and the needs behind it.
type DetectorResult struct {
	Detector string       `json:"detector"`
	Verdict  Verdict      `json:"verdict"`
	Needs    []NeedResult `json:"needs"`
}

// NeedResult is whether the policy meets one need.
type NeedResult struct {
	Need
	Met    bool          `json:"met"`
	Probes []ProbeResult `json:"probes"`
	// Fix, when the need is not met, is a change to the policy that
	// meets it.
	Fix string `json:"fix,omitempty"`
}

// ProbeResult is what the policy records of one probe request.
type ProbeResult struct {
	Probe string `json:"probe"`
	User  string `json:"user"`
	// Seen: the policy records the request at MinLevel or above, at one
	// of the stages the detector can use.
	Seen     bool          `json:"seen"`
	MinLevel auditv1.Level `json:"minLevel"`
	// Rule is the index of the rule that decides (-1: none matches, the
	// default level None), RuleText a short description of it.
	Rule     int             `json:"rule"`
	RuleText string          `json:"ruleText"`
	Level    auditv1.Level   `json:"level"`
	Stages   []auditv1.Stage `json:"stages"` // the usable stages the policy emits
	Reason   string          `json:"reason,omitempty"`

	probe    Probe
	decision Decision
}

// Check evaluates every detector's probes against the policy.
func Check(p *Policy, needs []DetectorNeeds) Report {
	rep := Report{APIVersion: p.APIVersion, Rules: len(p.Rules), Warnings: p.Warnings}
	for _, dn := range needs {
		dr := DetectorResult{Detector: dn.Detector, Verdict: OK}
		for _, n := range dn.Needs {
			nr := NeedResult{Need: n}
			seen := 0
			for _, pr := range n.Probes {
				r := evalProbe(p, pr)
				if r.Seen {
					seen++
				}
				nr.Probes = append(nr.Probes, r)
			}
			nr.Met = seen == len(n.Probes) || (n.Any && seen > 0)
			if !nr.Met {
				nr.Fix = fix(p, nr)
				switch {
				case n.Effect == Blinds:
					dr.Verdict = Blinded
				case dr.Verdict == OK:
					dr.Verdict = Weakened
				}
			}
			dr.Needs = append(dr.Needs, nr)
		}
		rep.Blinded = rep.Blinded || dr.Verdict == Blinded
		rep.Detectors = append(rep.Detectors, dr)
	}
	rep.Sensitive = Sensitive(p)
	if rep.Sensitive == nil {
		rep.Sensitive = []Exposure{}
	} else {
		rep.SensitiveFix = sensitiveFix
	}
	return rep
}

func evalProbe(p *Policy, pr Probe) ProbeResult {
	d := p.Evaluate(pr.Request)
	r := ProbeResult{Probe: pr.String(), User: pr.Client.User, MinLevel: pr.MinLevel, Rule: d.Rule, Level: d.Level,
		Stages: []auditv1.Stage{}, probe: pr, decision: d}
	if d.Rule >= 0 {
		r.RuleText = DescribeRule(d.Rule, p.Rules[d.Rule])
	}
	for _, s := range pr.Stages {
		if d.Emits(s) {
			r.Stages = append(r.Stages, s)
		}
	}
	switch {
	case d.Rule < 0:
		r.Reason = "no rule matches it, and the default level is None"
	case d.Level == auditv1.LevelNone:
		r.Reason = "level None by " + r.RuleText
	case levelRank(d.Level) < levelRank(pr.MinLevel):
		r.Reason = fmt.Sprintf("level %s by %s; the detector reads the response object, recorded only at %s", d.Level, r.RuleText, pr.MinLevel)
	case len(r.Stages) == 0:
		r.Reason = fmt.Sprintf("%s omitted (%s), and the detector can use no other stage", stageList(pr.Stages), omittedBy(p, d.Rule, pr.Stages))
	default:
		r.Seen = true
	}
	return r
}

// omittedBy says which omitStages drop the stages.
func omittedBy(p *Policy, rule int, stages []auditv1.Stage) string {
	var byPolicy, byRule bool
	for _, s := range stages {
		if slices.Contains(p.OmitStages, s) {
			byPolicy = true
		} else if rule >= 0 && slices.Contains(p.Rules[rule].OmitStages, s) {
			byRule = true
		}
	}
	switch {
	case byPolicy && byRule:
		return fmt.Sprintf("by the policy's omitStages and rules[%d].omitStages", rule)
	case byPolicy:
		return "by the policy's omitStages, which apply to every rule"
	}
	return fmt.Sprintf("by rules[%d].omitStages", rule)
}

// fix proposes a change that meets an unmet need: rules to insert before
// the rules that hide its probes (for a need met by any probe, the first
// one), and stages to stop omitting policy-wide.
func fix(p *Policy, nr NeedResult) string {
	var hidden []ProbeResult
	for _, r := range nr.Probes {
		if !r.Seen {
			hidden = append(hidden, r)
			if nr.Any {
				break
			}
		}
	}
	type group struct {
		selector  string // "users" or "userGroups"
		who       string
		level     auditv1.Level
		before    int
		verbs     []string
		resources map[string][]string // API group → resources
		groups    []string            // API groups in order
		probes    []string
	}
	var groups []*group
	var policyStages []auditv1.Stage
	for _, r := range hidden {
		pr := r.probe
		// Stages that only the policy-wide omitStages drop cannot be
		// restored by a rule.
		if !slices.ContainsFunc(pr.Stages, func(s auditv1.Stage) bool { return !slices.Contains(p.OmitStages, s) }) {
			for _, s := range pr.Stages {
				if !slices.Contains(policyStages, s) {
					policyStages = append(policyStages, s)
				}
			}
			if levelRank(r.Level) >= levelRank(pr.MinLevel) {
				continue // the level is fine: only the stages are missing
			}
		}
		sel, who := "users", pr.Client.User
		if pr.Client.ByGroup != "" {
			sel, who = "userGroups", pr.Client.ByGroup
		}
		level := pr.MinLevel
		if levelRank(r.Level) > levelRank(level) {
			level = r.Level // keep what the policy records today
		}
		before := r.Rule
		if before < 0 {
			before = len(p.Rules)
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.selector == sel && g.who == who && g.level == level })
		if i < 0 {
			groups = append(groups, &group{selector: sel, who: who, level: level, before: before, resources: map[string][]string{}})
			i = len(groups) - 1
		}
		g := groups[i]
		g.before = min(g.before, before)
		if !slices.Contains(g.verbs, pr.Request.Verb) {
			g.verbs = append(g.verbs, pr.Request.Verb)
		}
		res := pr.Request.Resource
		if pr.Request.Subresource != "" {
			res += "/" + pr.Request.Subresource
		}
		if _, ok := g.resources[pr.Request.APIGroup]; !ok {
			g.groups = append(g.groups, pr.Request.APIGroup)
		}
		if !slices.Contains(g.resources[pr.Request.APIGroup], res) {
			g.resources[pr.Request.APIGroup] = append(g.resources[pr.Request.APIGroup], res)
		}
		g.probes = append(g.probes, r.Probe)
	}
	var b strings.Builder
	if len(policyStages) > 0 {
		fmt.Fprintf(&b, "Remove %s from the policy's omitStages: the policy-level list applies to every rule, and no rule can "+
			"restore a stage it omits. Put omitStages on the rules whose requests need not record it instead.\n", stageList(policyStages))
	}
	for _, g := range groups {
		if nr.Any {
			fmt.Fprintf(&b, "For example, record %s: ", strings.Join(g.probes, ", "))
		}
		if g.before < len(p.Rules) {
			fmt.Fprintf(&b, "insert before rules[%d]:\n", g.before)
		} else {
			b.WriteString("add at the end of rules:\n")
		}
		fmt.Fprintf(&b, "- level: %s\n  %s: [%s]\n  verbs: [%s]\n  resources:\n", g.level, g.selector, quoteList([]string{g.who}), quoteList(g.verbs))
		for _, apiGroup := range g.groups {
			fmt.Fprintf(&b, "  - group: %s\n    resources: [%s]\n", strconv.Quote(apiGroup), quoteList(g.resources[apiGroup]))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func stageList(stages []auditv1.Stage) string {
	s := make([]string, len(stages))
	for i, st := range stages {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// DescribeRule describes a rule in one line: "rules[3] (level None; users
// system:kube-proxy; verbs watch; resources endpoints, services)".
func DescribeRule(i int, r auditv1.PolicyRule) string {
	parts := []string{"level " + string(r.Level)}
	add := func(name string, vals []string) {
		if len(vals) > 0 {
			parts = append(parts, name+" "+strings.Join(vals, ", "))
		}
	}
	add("users", r.Users)
	add("userGroups", r.UserGroups)
	add("verbs", r.Verbs)
	var ns []string
	for _, n := range r.Namespaces {
		if n == "" {
			n = `"" (cluster-scoped)`
		}
		ns = append(ns, n)
	}
	add("namespaces", ns)
	var res []string
	for _, gr := range r.Resources {
		switch {
		case len(gr.Resources) == 0 && gr.Group == "*":
			res = append(res, "all groups")
		case len(gr.Resources) == 0 && gr.Group == "":
			res = append(res, "all of the core group")
		case len(gr.Resources) == 0:
			res = append(res, "all of "+gr.Group)
		default:
			for _, name := range gr.Resources {
				s := resourceName(gr.Group, name, "")
				if len(gr.ResourceNames) > 0 {
					s += " named " + strings.Join(gr.ResourceNames, ", ")
				}
				res = append(res, s)
			}
		}
	}
	if len(res) > 6 {
		res = append(res[:5], fmt.Sprintf("and %d more", len(res)-5))
	}
	add("resources", res)
	add("nonResourceURLs", r.NonResourceURLs)
	if len(r.OmitStages) > 0 {
		parts = append(parts, "omitStages "+stageList(r.OmitStages))
	}
	return fmt.Sprintf("rules[%d] (%s)", i, strings.Join(parts, "; "))
}

// resourceName writes a resource as kubectl does: "endpointslices.discovery.k8s.io".
func resourceName(group, resource, subresource string) string {
	s := resource
	switch group {
	case "":
	case "*":
		s += " (any group)"
	default:
		s += "." + group
	}
	if subresource != "" {
		s += "/" + subresource
	}
	return s
}
