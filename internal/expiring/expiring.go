// Package expiring bounds maps of entries that expire: sign-in sessions,
// OIDC sign-ins under way, the sign-in limit's addresses.
package expiring

import "time"

// MakeRoom readies m, which may hold at most max entries, for one more:
// it drops the entries that have expired by now, then the soonest to
// expire until there is room.
func MakeRoom[K comparable, V any](m map[K]V, max int, now time.Time, expires func(V) time.Time) {
	for k, v := range m {
		if !now.Before(expires(v)) {
			delete(m, k)
		}
	}
	for len(m) >= max {
		var soonest K
		var at time.Time
		first := true
		for k, v := range m {
			if e := expires(v); first || e.Before(at) {
				soonest, at, first = k, e, false
			}
		}
		delete(m, soonest)
	}
}
