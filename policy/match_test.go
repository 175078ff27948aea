package policy

import (
	"slices"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("parsing:\n%s\n%v", src, err)
	}
	return p
}

var (
	alice      = Request{User: "alice", Groups: []string{"devs", "system:authenticated"}}
	podGet     = with(alice, Request{Verb: "get", Resource: "pods", Namespace: "default", Name: "web"})
	podLog     = with(alice, Request{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web"})
	podsList   = with(alice, Request{Verb: "list", Resource: "pods", Namespace: "default"})
	svcWatch   = with(alice, Request{Verb: "watch", Resource: "services"}) // all namespaces
	roleUpdate = with(alice, Request{Verb: "update", APIGroup: "rbac.authorization.k8s.io", Resource: "clusterroles", Subresource: "status", Name: "edit"})
	healthz    = with(alice, Request{Verb: "get", Path: "/healthz/etcd"})
	apis       = with(alice, Request{Verb: "get", Path: "/apis"})
)

func with(u, r Request) Request {
	r.User, r.Groups = u.User, u.Groups
	return r
}

// TestRuleMatching holds the matching to kube-apiserver's semantics
// (k8s.io/apiserver/pkg/audit/policy/checker.go): each case is one rule
// (before a catch-all at level Request) and whether it matches.
func TestRuleMatching(t *testing.T) {
	cases := []struct {
		name  string
		rule  string
		req   Request
		match bool
	}{
		{"empty rule matches a resource request", `{}`, podGet, true},
		{"empty rule matches a non-resource request", `{}`, healthz, true},
		{"user", `{users: [alice]}`, podGet, true},
		{"other user", `{users: [bob]}`, podGet, false},
		{"any of the groups", `{userGroups: [admins, devs]}`, podGet, true},
		{"no shared group", `{userGroups: [admins]}`, podGet, false},
		{"group and user both required", `{users: [bob], userGroups: [devs]}`, podGet, false},
		{"verb", `{verbs: [get, list]}`, podGet, true},
		{"other verb", `{verbs: [watch]}`, podGet, false},
		{"resource", `{resources: [{group: "", resources: [pods]}]}`, podGet, true},
		{"resource does not match its subresources", `{resources: [{group: "", resources: [pods]}]}`, podLog, false},
		{"resource/subresource", `{resources: [{group: "", resources: [pods/log]}]}`, podLog, true},
		{"resource/subresource does not match the resource", `{resources: [{group: "", resources: [pods/log]}]}`, podGet, false},
		{"* matches resources", `{resources: [{group: "", resources: ["*"]}]}`, podGet, true},
		{"* matches subresources", `{resources: [{group: "", resources: ["*"]}]}`, podLog, true},
		{"*/subresource", `{resources: [{group: "", resources: ["*/log"]}]}`, podLog, true},
		{"*/subresource does not match the resource", `{resources: [{group: "", resources: ["*/log"]}]}`, podGet, false},
		{"resource/* matches the resource itself", `{resources: [{group: "", resources: ["pods/*"]}]}`, podGet, true},
		{"resource/* matches subresources", `{resources: [{group: "", resources: ["pods/*"]}]}`, podLog, true},
		{"group without resources: the whole group", `{resources: [{group: ""}]}`, svcWatch, true},
		{"other group", `{resources: [{group: apps}]}`, podGet, false},
		{"core group does not match a named group", `{resources: [{group: ""}]}`, roleUpdate, false},
		{"group *", `{resources: [{group: "*", resources: ["*/status"]}]}`, roleUpdate, true},
		{"group resources are ORed", `{resources: [{group: apps}, {group: "", resources: [pods]}]}`, podGet, true},
		{"resourceNames", `{resources: [{group: "", resources: [pods], resourceNames: [web]}]}`, podGet, true},
		{"other resourceName", `{resources: [{group: "", resources: [pods], resourceNames: [db]}]}`, podGet, false},
		{"resourceNames never match a list", `{resources: [{group: "", resources: [pods], resourceNames: [web]}]}`, podsList, false},
		{"namespace", `{namespaces: [default]}`, podGet, true},
		{"other namespace", `{namespaces: [kube-system]}`, podGet, false},
		{`a watch of all namespaces is in namespace ""`, `{namespaces: [""]}`, svcWatch, true},
		{"a watch of all namespaces is in no named namespace", `{namespaces: [default], resources: [{group: "", resources: [services]}]}`, svcWatch, false},
		{"namespaces apply to resource requests only", `{namespaces: [""]}`, healthz, false},
		{"resources apply to resource requests only", `{resources: [{group: ""}]}`, healthz, false},
		{"nonResourceURLs prefix", `{nonResourceURLs: ["/healthz*"]}`, healthz, true},
		{"nonResourceURLs exact", `{nonResourceURLs: ["/healthz"]}`, healthz, false},
		{"nonResourceURLs *", `{nonResourceURLs: ["*"]}`, healthz, true},
		{"/api* matches /apis", `{nonResourceURLs: ["/api*"]}`, apis, true},
		// The docs example's rule: /api* does not reach resource requests
		// (whose path starts with /api/v1 too).
		{"nonResourceURLs never match resource requests", `{userGroups: [system:authenticated], nonResourceURLs: ["/api*"]}`, svcWatch, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rule := "{level: None}"
			if c.rule != "{}" {
				rule = "{level: None, " + c.rule[1:]
			}
			p := mustParse(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- "+rule+"\n- level: Request\n")
			d := p.Evaluate(c.req)
			if got := d.Rule == 0; got != c.match {
				t.Errorf("rule %s on %+v: matched %v, want %v (decision %+v)", c.rule, c.req, got, c.match, d)
			}
		})
	}
}

func TestFirstMatchWinsAndDefault(t *testing.T) {
	p := mustParse(t, `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [watch]
  omitStages: [ResponseStarted]
- level: RequestResponse
  resources: [{group: ""}]
`)
	d := p.Evaluate(svcWatch)
	if d.Rule != 0 || d.Level != auditv1.LevelMetadata {
		t.Errorf("watch: got %+v, want rule 0 at Metadata (the first match wins)", d)
	}
	if want := []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted}; !slices.Equal(d.OmitStages, want) {
		t.Errorf("watch: omitStages %v, want the union %v", d.OmitStages, want)
	}
	if d.Emits(auditv1.StageResponseStarted) || !d.Emits(auditv1.StageResponseComplete) {
		t.Errorf("watch: Emits wrong for %+v", d)
	}
	d = p.Evaluate(podGet)
	if d.Rule != 1 || d.Level != auditv1.LevelRequestResponse || !slices.Equal(d.OmitStages, []auditv1.Stage{auditv1.StageRequestReceived}) {
		t.Errorf("get: got %+v, want rule 1 at RequestResponse omitting the policy's stages", d)
	}
	d = p.Evaluate(healthz)
	if d.Rule != -1 || d.Level != auditv1.LevelNone || d.Emits(auditv1.StageResponseComplete) {
		t.Errorf("non-resource request no rule matches: got %+v, want the default level None", d)
	}
}
