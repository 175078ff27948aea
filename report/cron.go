package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed 5-field cron expression: minute, hour, day of
// month, month, day of week. Each field is *, a number, a range a-b, a
// step */n or a-b/n, or a comma-separated list of those; day of week runs
// from 0 (Sunday) to 7 (Sunday again). As in Vixie cron, when both day of
// month and day of week are restricted, a day matching either is a match.
// The shorthands @hourly, @daily (@midnight), @weekly, @monthly and
// @yearly (@annually) are accepted.
type Schedule struct {
	expr                          string
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
}

var cronShorthands = map[string]string{
	"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
	"@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
}

// ParseSchedule parses a cron expression.
func ParseSchedule(expr string) (Schedule, error) {
	s := Schedule{expr: expr}
	e := strings.TrimSpace(expr)
	if v, ok := cronShorthands[e]; ok {
		e = v
	}
	fields := strings.Fields(e)
	if len(fields) != 5 {
		return Schedule{}, fmt.Errorf("cron expression %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, len(fields))
	}
	var err error
	for i, f := range []struct {
		name     string
		min, max int
		dst      *uint64
	}{
		{"minute", 0, 59, &s.minute}, {"hour", 0, 23, &s.hour}, {"day of month", 1, 31, &s.dom},
		{"month", 1, 12, &s.month}, {"day of week", 0, 7, &s.dow},
	} {
		if *f.dst, err = parseCronField(fields[i], f.min, f.max); err != nil {
			return Schedule{}, fmt.Errorf("cron expression %q: %s: %w", expr, f.name, err)
		}
	}
	if s.dow&(1<<7) != 0 {
		s.dow |= 1 // 7 is Sunday too
	}
	s.domStar = strings.HasPrefix(fields[2], "*")
	s.dowStar = strings.HasPrefix(fields[4], "*")
	return s, nil
}

// parseCronField returns the bit set of the values a field allows.
func parseCronField(f string, lo, hi int) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(f, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("step %q: want a positive number", stepText)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			as, bs, _ := strings.Cut(rng, "-")
			var err error
			if a, err = cronNumber(as, lo, hi); err != nil {
				return 0, err
			}
			if b, err = cronNumber(bs, lo, hi); err != nil {
				return 0, err
			}
			if a > b {
				return 0, fmt.Errorf("range %q: start after end", rng)
			}
		default:
			n, err := cronNumber(rng, lo, hi)
			if err != nil {
				return 0, err
			}
			a, b = n, n
			if hasStep {
				b = hi // "5/15" means from 5 every 15
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func cronNumber(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q: want a number from %d to %d", s, lo, hi)
	}
	return n, nil
}

// String returns the expression as written.
func (s Schedule) String() string { return s.expr }

func (s Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<t.Day()) != 0
	dow := s.dow&(1<<int(t.Weekday())) != 0
	switch {
	case s.domStar && s.dowStar:
		return true
	case s.domStar:
		return dow
	case s.dowStar:
		return dom
	}
	return dom || dow
}

// Next returns the first time after t that the schedule names, in t's
// location, by wall clock: a time skipped by a daylight-saving change
// does not occur, and one repeated by it occurs at both instants (use UTC
// to avoid either). It returns
// the zero time when there is none within five years (such as 30 February).
func (s Schedule) Next(t time.Time) time.Time {
	loc := t.Location()
	t = t.Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		if s.month&(1<<int(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, loc)
			continue
		}
		if !s.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
			continue
		}
		if s.hour&(1<<t.Hour()) == 0 {
			// To the next wall-clock hour (right in zones with half-hour
			// offsets and across daylight-saving changes).
			t = t.Add(time.Duration(60-t.Minute()) * time.Minute)
			continue
		}
		if s.minute&(1<<t.Minute()) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}
