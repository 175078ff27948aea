package auth

import (
	"slices"
	"testing"
)

func TestPrincipalScope(t *testing.T) {
	alpha := Principal{Clusters: []string{"alpha"}}
	two := Principal{Clusters: []string{"alpha", "gamma"}}
	for _, tc := range []struct {
		name      string
		p         Principal
		requested []string
		want      []string
	}{
		{"every cluster keeps the request", EveryCluster, []string{"beta"}, []string{"beta"}},
		{"every cluster, none requested", EveryCluster, nil, nil},
		{"none requested means the principal's", two, nil, []string{"alpha", "gamma"}},
		{"narrowed to the allowed", two, []string{"beta", "gamma"}, []string{"gamma"}},
		{"nothing allowed selects no cluster", alpha, []string{"beta"}, []string{NoCluster}},
		{"no principal", Principal{}, []string{"alpha"}, []string{NoCluster}},
	} {
		if got := tc.p.Scope(tc.requested); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Scope(%q) = %q, want %q", tc.name, tc.requested, got, tc.want)
		}
	}
}

func TestPrincipalScopeOne(t *testing.T) {
	alpha := Principal{Clusters: []string{"alpha"}}
	two := Principal{Clusters: []string{"alpha", "gamma"}}
	for _, tc := range []struct {
		p         Principal
		requested string
		want      string
		err       bool
	}{
		{EveryCluster, "", "", false},
		{EveryCluster, "beta", "beta", false},
		{alpha, "", "alpha", false},
		{alpha, "beta", NoCluster, false},
		{two, "", "", true},
		{two, "gamma", "gamma", false},
	} {
		got, err := tc.p.ScopeOne(tc.requested)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%+v.ScopeOne(%q) = %q, %v; want %q (error %v)", tc.p, tc.requested, got, err, tc.want, tc.err)
		}
	}
}

func TestPrincipalWithin(t *testing.T) {
	two := Principal{Clusters: []string{"alpha", "gamma"}}
	for _, tc := range []struct {
		p        Principal
		clusters []string
		want     bool
	}{
		{EveryCluster, nil, true},
		{two, nil, false}, // a report of every cluster is not two's to see whole
		{two, []string{"alpha"}, true},
		{two, []string{"alpha", "gamma"}, true},
		{two, []string{"alpha", "beta"}, false},
	} {
		if got := tc.p.Within(tc.clusters); got != tc.want {
			t.Errorf("%+v.Within(%q) = %v, want %v", tc.p, tc.clusters, got, tc.want)
		}
	}
}

func TestGroupsPrincipal(t *testing.T) {
	mapping := map[string][]string{"sre": {"prod", "staging"}, "dev": {"staging", "dev"}, "admins": {}}
	for _, tc := range []struct {
		groups []string
		want   Principal
	}{
		{nil, Principal{}},
		{[]string{"nobody"}, Principal{}},
		{[]string{" sre", "dev "}, Principal{Clusters: []string{"prod", "staging", "dev"}}},
		{[]string{"sre", "admins"}, EveryCluster},
	} {
		got := GroupsPrincipal(mapping, tc.groups)
		if got.All != tc.want.All || !slices.Equal(got.Clusters, tc.want.Clusters) {
			t.Errorf("GroupsPrincipal(%q) = %+v, want %+v", tc.groups, got, tc.want)
		}
		if got.None() != (!tc.want.All && len(tc.want.Clusters) == 0) {
			t.Errorf("GroupsPrincipal(%q).None() = %v", tc.groups, got.None())
		}
	}
}
