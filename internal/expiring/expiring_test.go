package expiring

import (
	"testing"
	"time"
)

// TestMakeRoom: the expired entries go first; then, while the map is
// full, the soonest to expire; an entry expiring later stays.
func TestMakeRoom(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	m := map[string]time.Time{
		"expired": now.Add(-time.Second),
		"at-now":  now,
		"soon":    now.Add(time.Minute),
		"later":   now.Add(time.Hour),
		"latest":  now.Add(2 * time.Hour),
	}
	MakeRoom(m, 3, now, func(v time.Time) time.Time { return v })
	if len(m) != 2 {
		t.Fatalf("%d entries left, want 2 (room for one more under 3): %v", len(m), m)
	}
	for _, k := range []string{"later", "latest"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	MakeRoom(m, 10, now, func(v time.Time) time.Time { return v })
	if len(m) != 2 {
		t.Errorf("with room to spare, %d entries left, want 2", len(m))
	}
}
