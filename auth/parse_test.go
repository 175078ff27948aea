package auth

import (
	"strings"
	"testing"
)

func TestParseAPIToken(t *testing.T) {
	valid := func(s string) bool { return s != "" && !strings.ContainsAny(s, " /") }
	for _, tc := range []struct {
		in   string
		want APIToken
		bad  bool
	}{
		{in: "tok", want: APIToken{Token: "tok"}},
		{in: "tok=prod", want: APIToken{Token: "tok", Clusters: []string{"prod"}}},
		{in: "tok=prod, staging,prod", want: APIToken{Token: "tok", Clusters: []string{"prod", "staging"}}},
		{in: "=prod", bad: true},
		{in: "tok=", bad: true},
		{in: "tok=a/b", bad: true},
	} {
		got, err := ParseAPIToken(tc.in, valid)
		if (err != nil) != tc.bad || (!tc.bad && (got.Token != tc.want.Token || strings.Join(got.Clusters, ",") != strings.Join(tc.want.Clusters, ","))) {
			t.Errorf("ParseAPIToken(%q) = %+v, %v; want %+v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseProxyGroup(t *testing.T) {
	valid := func(s string) bool { return s != "" && !strings.Contains(s, " ") }
	for _, tc := range []struct {
		in       string
		group    string
		clusters string
		bad      bool
	}{
		{in: "sre=prod,staging", group: "sre", clusters: "prod,staging"},
		{in: "admins=*", group: "admins", clusters: ""},
		{in: "sre=", bad: true},
		{in: "=prod", bad: true},
		{in: "sre", bad: true},
		{in: "sre=a b", bad: true},
	} {
		g, cl, err := ParseProxyGroup(tc.in, valid)
		if (err != nil) != tc.bad || (!tc.bad && (g != tc.group || strings.Join(cl, ",") != tc.clusters || cl == nil)) {
			t.Errorf("ParseProxyGroup(%q) = %q %q %v", tc.in, g, cl, err)
		}
	}
}
