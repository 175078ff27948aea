package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// API versions of the Policy kind.
const (
	V1      = "audit.k8s.io/v1"
	V1beta1 = "audit.k8s.io/v1beta1"
)

// Policy is a parsed audit policy.
type Policy struct {
	// APIVersion is the policy's apiVersion (V1 or V1beta1).
	APIVersion string
	// Rules, in order: the first that matches a request decides.
	Rules []auditv1.PolicyRule
	// OmitStages applies to every rule.
	OmitStages []auditv1.Stage
	// Warnings are what kube-apiserver would load anyway but that is
	// probably not what the author meant: unknown fields (ignored, so the
	// rule matches more than it seems), duplicate keys (the last wins),
	// a deprecated apiVersion.
	Warnings []string
}

// ParseError is a policy that kube-apiserver would refuse to load.
type ParseError struct {
	// Line is the 1-based line of a YAML syntax error, 0 when not known.
	Line int
	// Path is the field at fault ("rules[3].level"), "" for the document.
	Path string
	Msg  string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrInvalid is wrapped by every error of Parse: the input is not a policy
// kube-apiserver would load.
var ErrInvalid = errors.New("invalid audit policy")

func (e *ParseError) Unwrap() error { return ErrInvalid }

var yamlLine = regexp.MustCompile(`(?:yaml: )?line (\d+): `)

// Parse decodes an audit.k8s.io/v1 (or v1beta1) Policy from YAML or JSON
// and validates it as kube-apiserver does. Input is untrusted: every
// error is a *ParseError, never a panic.
//
// Decoding follows the apiserver's: field names are case-sensitive, an
// unknown field or a duplicate key is tolerated (with a warning: the
// apiserver falls back to lenient decoding) and a value of the wrong type
// is an error. Only the first YAML document is read, as by the apiserver.
func Parse(data []byte) (*Policy, error) {
	var warnings []string
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		strictErr := err
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, yamlError(err)
		}
		// Only duplicate keys fail the strict conversion alone.
		warnings = append(warnings, yamlError(strictErr).Error()+" (kube-apiserver keeps the last value)")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, &ParseError{Msg: "decoding: " + err.Error()}
	}
	d := decoder{warnings: warnings}
	p := d.policy(doc)
	if d.err != nil {
		return nil, d.err
	}
	p.Warnings = d.warnings
	if err := validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// yamlError turns an error of sigs.k8s.io/yaml into a ParseError with the
// line it names.
func yamlError(err error) *ParseError {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n")
	msg = strings.TrimSpace(msg)
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
		n, _ := strconv.Atoi(msg[m[2]:m[3]])
		return &ParseError{Line: n, Msg: strings.TrimSpace(msg[:m[0]] + msg[m[1]:])}
	}
	return &ParseError{Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// decoder converts the generic document into a Policy, keeping the first
// error and every warning.
type decoder struct {
	err      *ParseError
	warnings []string
}

func (d *decoder) fail(path, format string, args ...any) {
	if d.err == nil {
		d.err = &ParseError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
}

// object returns v as a mapping, calling fn for each key in order: keys
// fn does not know are warned about.
func (d *decoder) object(path string, v any, fn func(key, path string, v any) bool) {
	if v == nil {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		d.fail(path, "want a mapping, got %s", kindOf(v))
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if !fn(k, p, m[k]) {
			d.warnings = append(d.warnings, fmt.Sprintf("%s: unknown field (kube-apiserver ignores it)", p))
		}
	}
}

func (d *decoder) str(path string, v any) string {
	switch s := v.(type) {
	case nil:
		return ""
	case string:
		return s
	}
	d.fail(path, "want a string, got %s", kindOf(v))
	return ""
}

func (d *decoder) strs(path string, v any) []string {
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		d.fail(path, "want a list of strings, got %s", kindOf(v))
		return nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = d.str(fmt.Sprintf("%s[%d]", path, i), e)
	}
	return out
}

func (d *decoder) list(path string, v any, fn func(path string, v any)) {
	if v == nil {
		return
	}
	l, ok := v.([]any)
	if !ok {
		d.fail(path, "want a list, got %s", kindOf(v))
		return
	}
	for i, e := range l {
		fn(fmt.Sprintf("%s[%d]", path, i), e)
	}
}

func (d *decoder) boolean(path string, v any) {
	if _, ok := v.(bool); !ok && v != nil {
		d.fail(path, "want true or false, got %s", kindOf(v))
	}
}

func (d *decoder) stages(path string, v any) []auditv1.Stage {
	var out []auditv1.Stage
	for _, s := range d.strs(path, v) {
		out = append(out, auditv1.Stage(s))
	}
	return out
}

func (d *decoder) policy(doc any) *Policy {
	p := &Policy{}
	if doc == nil {
		d.fail("", "empty document: want an %s Policy", V1)
		return p
	}
	var kind string
	d.object("", doc, func(k, path string, v any) bool {
		switch k {
		case "apiVersion":
			p.APIVersion = d.str(path, v)
		case "kind":
			kind = d.str(path, v)
		case "metadata":
			d.object(path, v, func(string, string, any) bool { return true })
		case "omitStages":
			p.OmitStages = d.stages(path, v)
		case "omitManagedFields":
			d.boolean(path, v)
		case "rules":
			d.list(path, v, func(path string, v any) { p.Rules = append(p.Rules, d.rule(path, v)) })
		default:
			return false
		}
		return true
	})
	if d.err != nil {
		return p
	}
	switch p.APIVersion {
	case V1:
	case V1beta1:
		d.warnings = append(d.warnings, fmt.Sprintf("apiVersion: %s is refused by kube-apiserver 1.24 and later; it was checked as %s, whose Policy has the same fields", V1beta1, V1))
	case "":
		d.fail("apiVersion", "missing: want %s", V1)
	default:
		d.fail("apiVersion", "%q: want %s", p.APIVersion, V1)
	}
	if kind != "Policy" && d.err == nil {
		d.fail("kind", "%q: want Policy", kind)
	}
	return p
}

func (d *decoder) rule(path string, v any) auditv1.PolicyRule {
	var r auditv1.PolicyRule
	if v == nil {
		d.fail(path, "want a mapping, got null")
		return r
	}
	d.object(path, v, func(k, path string, v any) bool {
		switch k {
		case "level":
			r.Level = auditv1.Level(d.str(path, v))
		case "users":
			r.Users = d.strs(path, v)
		case "userGroups":
			r.UserGroups = d.strs(path, v)
		case "verbs":
			r.Verbs = d.strs(path, v)
		case "namespaces":
			r.Namespaces = d.strs(path, v)
		case "nonResourceURLs":
			r.NonResourceURLs = d.strs(path, v)
		case "omitStages":
			r.OmitStages = d.stages(path, v)
		case "omitManagedFields":
			d.boolean(path, v)
		case "resources":
			d.list(path, v, func(path string, v any) {
				var gr auditv1.GroupResources
				d.object(path, v, func(k, path string, v any) bool {
					switch k {
					case "group":
						gr.Group = d.str(path, v)
					case "resources":
						gr.Resources = d.strs(path, v)
					case "resourceNames":
						gr.ResourceNames = d.strs(path, v)
					default:
						return false
					}
					return true
				})
				r.Resources = append(r.Resources, gr)
			})
		default:
			return false
		}
		return true
	})
	return r
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// validate checks what k8s.io/apiserver/pkg/apis/audit/validation checks,
// and that there is a rule (the apiserver refuses a policy without one).
func validate(p *Policy) error {
	if err := validateStages("omitStages", p.OmitStages); err != nil {
		return err
	}
	if len(p.Rules) == 0 {
		return &ParseError{Path: "rules", Msg: "no rules: kube-apiserver refuses a policy without rules"}
	}
	for i, r := range p.Rules {
		path := fmt.Sprintf("rules[%d]", i)
		switch r.Level {
		case auditv1.LevelNone, auditv1.LevelMetadata, auditv1.LevelRequest, auditv1.LevelRequestResponse:
		case "":
			return &ParseError{Path: path + ".level", Msg: "missing: want None, Metadata, Request or RequestResponse"}
		default:
			return &ParseError{Path: path + ".level", Msg: fmt.Sprintf("%q: want None, Metadata, Request or RequestResponse", r.Level)}
		}
		for j, u := range r.NonResourceURLs {
			if u == "*" {
				continue
			}
			if !strings.HasPrefix(u, "/") {
				return &ParseError{Path: fmt.Sprintf("%s.nonResourceURLs[%d]", path, j), Msg: fmt.Sprintf("%q: a non-resource URL must begin with '/'", u)}
			}
			if strings.Contains(u[:len(u)-1], "*") {
				return &ParseError{Path: fmt.Sprintf("%s.nonResourceURLs[%d]", path, j), Msg: fmt.Sprintf("%q: '*' may only be the last character", u)}
			}
		}
		for j, gr := range r.Resources {
			grPath := fmt.Sprintf("%s.resources[%d]", path, j)
			if gr.Group != "" && gr.Group != "*" {
				if msgs := validation.IsDNS1123Subdomain(gr.Group); len(msgs) > 0 {
					return &ParseError{Path: grPath + ".group", Msg: fmt.Sprintf("%q: %s (name the group without its version)", gr.Group, strings.Join(msgs, "; "))}
				}
			}
			if len(gr.ResourceNames) > 0 && len(gr.Resources) == 0 {
				return &ParseError{Path: grPath + ".resourceNames", Msg: "resourceNames need at least one resource"}
			}
		}
		if err := validateStages(path+".omitStages", r.OmitStages); err != nil {
			return err
		}
		if len(r.NonResourceURLs) > 0 && (len(r.Resources) > 0 || len(r.Namespaces) > 0) {
			return &ParseError{Path: path + ".nonResourceURLs", Msg: "a rule cannot apply to both resources (or namespaces) and non-resource URLs"}
		}
	}
	return nil
}

func validateStages(path string, stages []auditv1.Stage) error {
	for i, s := range stages {
		if !slices.Contains(allStages, s) {
			return &ParseError{Path: fmt.Sprintf("%s[%d]", path, i), Msg: fmt.Sprintf("%q: want RequestReceived, ResponseStarted, ResponseComplete or Panic", s)}
		}
	}
	return nil
}
