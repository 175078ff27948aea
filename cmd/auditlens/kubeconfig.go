package main

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
)

// webhookKubeconfigSpec is what a kube-apiserver needs to send its audit
// webhook to auditlens. Each credential is either a path (written as
// certificate-authority, client-certificate, client-key) or the file's
// contents (written base64-encoded as the *-data field); data wins when
// both are set.
type webhookKubeconfigSpec struct {
	Server string // https://host:port/audit/<cluster>

	CA, ClientCert, ClientKey             string // paths
	CAData, ClientCertData, ClientKeyData []byte // PEM contents, embedded
	Token                                 string
}

// renderWebhookKubeconfig renders the kubeconfig for kube-apiserver's
// --audit-webhook-config-file: one cluster, one user, one context, all
// named as serve prints them.
func renderWebhookKubeconfig(s webhookKubeconfigSpec) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\nclusters:\n- name: auditlens\n  cluster:\n")
	field(&b, "server", s.Server, nil)
	field(&b, "certificate-authority", s.CA, s.CAData)
	b.WriteString("users:\n- name: kube-apiserver\n  user:")
	var user strings.Builder
	field(&user, "client-certificate", s.ClientCert, s.ClientCertData)
	field(&user, "client-key", s.ClientKey, s.ClientKeyData)
	field(&user, "token", s.Token, nil)
	if user.Len() == 0 {
		b.WriteString(" {}\n")
	} else {
		b.WriteString("\n")
		b.WriteString(user.String())
	}
	b.WriteString(`contexts:
- name: auditlens
  context:
    cluster: auditlens
    user: kube-apiserver
current-context: auditlens
`)
	return b.String()
}

// field writes "    key: value" (or "    key-data: base64" when data is
// set), nothing when both are empty.
func field(b *strings.Builder, key, value string, data []byte) {
	switch {
	case len(data) > 0:
		b.WriteString("    " + key + "-data: " + yamlString(base64.StdEncoding.EncodeToString(data)) + "\n")
	case value != "":
		b.WriteString("    " + key + ": " + yamlString(value) + "\n")
	}
}

// plainYAML matches strings that YAML reads back as the same string when
// written unquoted in block context (brackets only after the first
// character, as in an IPv6 URL): no indicator characters, no ": " or " #", no trailing
// ':', and not a word YAML 1.1 would take for a boolean or null (both
// checked in yamlString).
var plainYAML = regexp.MustCompile(`^[A-Za-z/][A-Za-z0-9._/:@%+=~\[\]-]*$`)

var yamlWords = map[string]bool{"y": true, "n": true, "yes": true, "no": true, "on": true, "off": true,
	"true": true, "false": true, "null": true}

// yamlString writes s as a YAML scalar: plain when that is unambiguous,
// else double-quoted (a JSON string is a valid YAML double-quoted scalar).
func yamlString(s string) string {
	if plainYAML.MatchString(s) && !strings.HasSuffix(s, ":") && !yamlWords[strings.ToLower(s)] {
		return s
	}
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}
