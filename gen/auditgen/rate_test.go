package auditgen

import (
	"testing"
	"time"
)

// TestSetRate: the events come about as often as asked, and without
// SetRate at about DefaultRate.
func TestSetRate(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 200_000
	for _, rate := range []float64{0, 1000, 15000, 60000} {
		g := New(1, start)
		want := float64(DefaultRate)
		if rate > 0 {
			g.SetRate(rate)
			want = rate
		}
		var last time.Time
		for range n {
			last = g.Next().StageTimestamp.Time
		}
		got := n / last.Sub(start).Seconds()
		if got < want*0.95 || got > want*1.05 {
			t.Errorf("rate %v: %.0f events/s, want %.0f ± 5%%", rate, got, want)
		}
	}
}
