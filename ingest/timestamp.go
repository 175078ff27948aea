package ingest

import (
	"errors"
	"fmt"
	"time"
)

// ErrBadTime is wrapped by the errors of ParseTime.
var ErrBadTime = errors.New("invalid RFC 3339 timestamp")

// ParseTime parses an RFC 3339 timestamp such as the apiserver writes
// ("2026-03-01T12:00:00.123456Z") and returns it in UTC, truncated to
// microseconds, the precision of the store.
//
// It accepts what other tools write too: 0 to 9 fractional digits (more are
// read and truncated), a 'Z' or ±hh:mm offset, and the lowercase 't', 'z'
// and the space separator that RFC 3339 allows. Fields out of range (month
// 13, February 30, hour 24, second 60) are errors, not normalised into
// another instant. Errors wrap ErrBadTime.
//
// It takes a string or a byte slice so that callers convert neither.
func ParseTime[S ~string | ~[]byte](s S) (time.Time, error) {
	t, why := parseTime(s)
	if why != "" {
		// Convert no more than the message shows: s may be long garbage.
		return time.Time{}, fmt.Errorf("%w %s: %s", ErrBadTime, quoteShort(string(s[:min(len(s), maxQuoted+1)])), why)
	}
	return t, nil
}

// parseTime is ParseTime without the error allocation: why is empty on
// success and says what is wrong otherwise.
func parseTime[S ~string | ~[]byte](s S) (t time.Time, why string) {
	// 2006-01-02T15:04:05Z is the shortest form.
	if len(s) < len("2006-01-02T15:04:05Z") {
		return t, "too short"
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	second, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' ||
		(s[10] != 'T' && s[10] != 't' && s[10] != ' ') {
		return t, "not in the form 2006-01-02T15:04:05"
	}
	switch {
	case month < 1 || month > 12:
		return t, "month out of range"
	case day < 1 || day > daysIn(time.Month(month), year):
		return t, "day out of range"
	case hour > 23:
		return t, "hour out of range"
	case minute > 59:
		return t, "minute out of range"
	case second > 59:
		return t, "second out of range"
	}

	i := 19
	nsec := 0
	if s[i] == '.' || s[i] == ',' {
		i++
		start := i
		for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
			if i-start < 9 {
				nsec = nsec*10 + int(s[i]-'0')
			}
		}
		n := i - start
		if n == 0 {
			return t, "no digits after the decimal point"
		}
		for ; n < 9; n++ {
			nsec *= 10
		}
		if i == len(s) {
			return t, "missing time zone offset"
		}
	}
	nsec -= nsec % int(time.Microsecond)

	var offset int // seconds east of UTC
	switch s[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(s)-i != len("+07:00") || s[i+3] != ':' {
			return t, "time zone offset not in the form ±hh:mm"
		}
		oh, ok1 := digits(s[i+1 : i+3])
		om, ok2 := digits(s[i+4 : i+6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return t, "time zone offset out of range"
		}
		offset = (oh*60 + om) * 60
		if s[i] == '-' {
			offset = -offset
		}
		i += len("+07:00")
	default:
		return t, "missing time zone offset"
	}
	if i != len(s) {
		return t, "extra text after the time zone"
	}
	t = time.Date(year, time.Month(month), day, hour, minute, second, nsec, time.UTC)
	if offset != 0 {
		t = t.Add(-time.Duration(offset) * time.Second)
	}
	return t, ""
}

// digits returns the decimal number of s, which must be digits only.
func digits[S ~string | ~[]byte](s S) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysIn returns the number of days of month m in year y.
func daysIn(m time.Month, y int) int {
	if m == time.February {
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	}
	return 30 + int((m+m/8)%2)
}

// quoteShort quotes s for an error message, cut to a length that keeps the
// message readable when the input is garbage.
func quoteShort(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q…", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

// maxQuoted is how many bytes of bad input an error message quotes.
const maxQuoted = 64
