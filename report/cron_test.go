package report

import (
	"testing"
	"time"
)

func TestScheduleNext(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		expr string
		from time.Time
		want []string // successive runs, RFC3339 in from's location
	}{
		{"0 6 * * *", utc("2026-03-02T05:59:59Z"), []string{"2026-03-02T06:00:00Z", "2026-03-03T06:00:00Z"}},
		{"0 6 * * *", utc("2026-03-02T06:00:00Z"), []string{"2026-03-03T06:00:00Z"}}, // strictly after
		{"*/15 * * * *", utc("2026-03-02T10:07:00Z"), []string{"2026-03-02T10:15:00Z", "2026-03-02T10:30:00Z"}},
		{"5/20 9-10 * * *", utc("2026-03-02T00:00:00Z"), []string{"2026-03-02T09:05:00Z", "2026-03-02T09:25:00Z", "2026-03-02T09:45:00Z", "2026-03-02T10:05:00Z"}},
		{"0 8 * * 1-5", utc("2026-03-06T09:00:00Z"), []string{"2026-03-09T08:00:00Z"}},                                                // Friday after 8 → Monday
		{"0 0 * * 7", utc("2026-03-02T00:00:00Z"), []string{"2026-03-08T00:00:00Z"}},                                                  // 7 is Sunday
		{"0 0 13 * 5", utc("2026-03-01T00:00:00Z"), []string{"2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z", "2026-03-20T00:00:00Z"}}, // either day field
		{"30 1 1,15 2,3 *", utc("2026-01-20T00:00:00Z"), []string{"2026-02-01T01:30:00Z", "2026-02-15T01:30:00Z", "2026-03-01T01:30:00Z"}},
		{"@daily", utc("2026-12-31T23:00:00Z"), []string{"2027-01-01T00:00:00Z"}},
		{"0 0 29 2 *", utc("2026-03-01T00:00:00Z"), []string{"2028-02-29T00:00:00Z"}},
		// 02:30 does not exist in Berlin on 2026-03-29.
		{"30 2 * * *", time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), []string{"2026-03-30T02:30:00+02:00"}},
		{"0 7 * * *", time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), []string{"2026-03-29T07:00:00+02:00", "2026-03-30T07:00:00+02:00"}},
		{"0 * * * *", time.Date(2026, 3, 2, 10, 40, 0, 0, kolkata), []string{"2026-03-02T11:00:00+05:30"}},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			s, err := ParseSchedule(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			at := tc.from
			for _, w := range tc.want {
				at = s.Next(at)
				if got := at.Format(time.RFC3339); got != w {
					t.Fatalf("Next = %s, want %s", got, w)
				}
			}
		})
	}
	if s, _ := ParseSchedule("0 0 30 2 *"); !s.Next(utc("2026-01-01T00:00:00Z")).IsZero() {
		t.Error("30 February occurred")
	}
}

func TestParseScheduleErrors(t *testing.T) {
	for _, expr := range []string{"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "1,,2 * * * *", "@often"} {
		if _, err := ParseSchedule(expr); err == nil {
			t.Errorf("ParseSchedule(%q) succeeded", expr)
		}
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"0 6 * * *", "*/15 9-17 * * 1-5", "@weekly", "5/20 1,2 1-31/2 * 7"} {
		f.Add(s)
	}
	from := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := ParseSchedule(expr)
		if err != nil {
			return
		}
		if n := s.Next(from); !n.IsZero() && !n.After(from) {
			t.Fatalf("%q: Next(%s) = %s", expr, from, n)
		}
	})
}
