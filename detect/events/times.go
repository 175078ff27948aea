package events

import "time"

// MinTime is the earlier of a and b; a zero a is unset, so b.
func MinTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// MaxTime is the later of a and b.
func MaxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
