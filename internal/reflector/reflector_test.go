package reflector

import "testing"

func TestProgram(t *testing.T) {
	for _, tc := range []struct{ ua, user, want string }{
		{"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc/shared-informers", "system:kube-controller-manager", "kube-controller-manager"},
		{"kubectl", "alice", "kubectl"},
		{"/odd", "alice", "/odd"},
		{"", "system:kube-proxy", "system:kube-proxy"},
	} {
		if got := Program(tc.ua, tc.user); got != tc.want {
			t.Errorf("Program(%q, %q) = %q, want %q", tc.ua, tc.user, got, tc.want)
		}
	}
}
