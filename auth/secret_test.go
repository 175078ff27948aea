package auth

import "testing"

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"s3cret", "s3cret", true},
		{"s3cret", "s3cre", false},
		{"s3cret", "s3creT", false},
		{"", "", true},
		{"", "x", false},
	} {
		if got := EqualSecret(tc.a, tc.b); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	toks := []string{"alpha", "beta", "beta"}
	for _, tc := range []struct {
		s    string
		want int
	}{{"alpha", 0}, {"beta", 1}, {"gamma", -1}, {"", -1}} {
		if got := MatchSecret(tc.s, toks); got != tc.want {
			t.Errorf("Match(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
	if got := MatchSecret("x", nil); got != -1 {
		t.Errorf("Match over no secrets = %d, want -1", got)
	}
}
