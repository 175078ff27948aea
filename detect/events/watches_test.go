package events

import (
	"slices"
	"testing"
	"time"
)

func TestBursts(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	sec := func(ss ...float64) []time.Time {
		var out []time.Time
		for _, s := range ss {
			out = append(out, t0.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		times []time.Time
		ids   []int
		n     int
	}{
		{"none", nil, []int{}, 0},
		{"one", sec(0), []int{0}, 1},
		{"restarts every 15 s", sec(0, 15, 31, 44), []int{0, 1, 2, 3}, 4},
		{"retries a second apart are one restart", sec(0, 1, 2, 3.1, 4, 300, 301), []int{0, 0, 0, 0, 0, 1, 1}, 2},
		{"exactly the spacing is a new restart", sec(0, 5, 10), []int{0, 1, 2}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, n := Bursts(tc.times, 5*time.Second)
			if n != tc.n || !slices.Equal(ids, tc.ids) {
				t.Errorf("got %v (%d), want %v (%d)", ids, n, tc.ids, tc.n)
			}
		})
	}
}
