package ingest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	tests := []struct {
		in   string
		want string // RFC 3339 in UTC; empty when in is an error
		err  string
	}{
		// fractional digits
		{in: "2026-03-01T12:34:56Z", want: "2026-03-01T12:34:56Z"},
		{in: "2026-03-01T12:34:56.1Z", want: "2026-03-01T12:34:56.1Z"},
		{in: "2026-03-01T12:34:56.123Z", want: "2026-03-01T12:34:56.123Z"},
		{in: "2026-03-01T12:34:56.123456Z", want: "2026-03-01T12:34:56.123456Z"},
		{in: "2026-03-01T12:34:56.123456789Z", want: "2026-03-01T12:34:56.123456Z"},
		{in: "2026-03-01T12:34:56.000999999Z", want: "2026-03-01T12:34:56.000999Z"},
		{in: "2026-03-01T12:34:56.1234567891234Z", want: "2026-03-01T12:34:56.123456Z"},
		{in: "2026-03-01T12:34:56,5Z", want: "2026-03-01T12:34:56.5Z"},
		// offsets
		{in: "2026-03-01T14:34:56+02:00", want: "2026-03-01T12:34:56Z"},
		{in: "2026-03-01T07:04:56.250-05:30", want: "2026-03-01T12:34:56.25Z"},
		{in: "2026-03-01T00:30:00+01:00", want: "2026-02-28T23:30:00Z"},
		{in: "2026-12-31T23:30:00-01:00", want: "2027-01-01T00:30:00Z"},
		{in: "2026-03-01T12:34:56+00:00", want: "2026-03-01T12:34:56Z"},
		{in: "2026-03-01T12:34:56-00:00", want: "2026-03-01T12:34:56Z"},
		// RFC 3339 section 5.6 variants
		{in: "2026-03-01t12:34:56z", want: "2026-03-01T12:34:56Z"},
		{in: "2026-03-01 12:34:56Z", want: "2026-03-01T12:34:56Z"},
		// calendar
		{in: "2024-02-29T00:00:00Z", want: "2024-02-29T00:00:00Z"},
		{in: "2000-02-29T00:00:00Z", want: "2000-02-29T00:00:00Z"},
		{in: "1900-02-29T00:00:00Z", err: "day out of range"},
		{in: "2026-02-29T00:00:00Z", err: "day out of range"},
		{in: "2026-04-31T00:00:00Z", err: "day out of range"},
		{in: "2026-00-01T00:00:00Z", err: "month out of range"},
		{in: "2026-13-01T00:00:00Z", err: "month out of range"},
		{in: "2026-03-00T00:00:00Z", err: "day out of range"},
		{in: "2026-03-01T24:00:00Z", err: "hour out of range"},
		{in: "2026-03-01T12:60:00Z", err: "minute out of range"},
		{in: "2026-03-01T12:00:60Z", err: "second out of range"},
		// garbage
		{in: "", err: "too short"},
		{in: "2026-03-01", err: "too short"},
		{in: "yesterday at noon, UTC", err: "not in the form"},
		{in: "2026/03/01T12:34:56Z", err: "not in the form"},
		{in: "2026-03-01X12:34:56Z", err: "not in the form"},
		{in: "2026-03-01T12:34:5xZ", err: "not in the form"},
		{in: "+026-03-01T12:34:56Z", err: "not in the form"},
		{in: "2026-03-01T12:34:56", err: "too short"},
		{in: "2026-03-01T12:34:56.Z", err: "no digits after the decimal point"},
		{in: "2026-03-01T12:34:56.123", err: "missing time zone offset"},
		{in: "2026-03-01T12:34:56.123 ", err: "missing time zone offset"},
		{in: "2026-03-01T12:34:56UTC", err: "missing time zone offset"},
		{in: "2026-03-01T12:34:56+0200", err: "not in the form ±hh:mm"},
		{in: "2026-03-01T12:34:56+02", err: "not in the form ±hh:mm"},
		{in: "2026-03-01T12:34:56+24:00", err: "offset out of range"},
		{in: "2026-03-01T12:34:56+02:60", err: "offset out of range"},
		{in: "2026-03-01T12:34:56+0a:00", err: "offset out of range"},
		{in: "2026-03-01T12:34:56ZZ", err: "extra text"},
		{in: "2026-03-01T12:34:56Z\n", err: "extra text"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			for _, got := range []func() (time.Time, error){
				func() (time.Time, error) { return ParseTime(tt.in) },
				func() (time.Time, error) { return ParseTime([]byte(tt.in)) },
			} {
				ts, err := got()
				if tt.err != "" {
					if !errors.Is(err, ErrBadTime) || !strings.Contains(err.Error(), tt.err) {
						t.Errorf("err = %v, want ErrBadTime with %q", err, tt.err)
					}
					if !ts.IsZero() {
						t.Errorf("time = %v with an error, want zero", ts)
					}
					continue
				}
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				want, _ := time.Parse(time.RFC3339Nano, tt.want)
				if !ts.Equal(want) || ts.Location() != time.UTC {
					t.Errorf("got %s (%v), want %s UTC", ts.Format(time.RFC3339Nano), ts.Location(), tt.want)
				}
			}
		})
	}
}

func TestParseTimeMatchesTimeParse(t *testing.T) {
	// Every timestamp kube-apiserver writes (metav1.MicroTime) round-trips.
	start := time.Date(2017, 12, 31, 23, 59, 59, 999999000, time.UTC)
	for i := range 1000 {
		want := start.Add(time.Duration(i) * 97 * time.Hour).Add(time.Duration(i*i) * time.Microsecond)
		s := want.Format("2006-01-02T15:04:05.000000Z07:00")
		got, err := ParseTime(s)
		if err != nil || !got.Equal(want) {
			t.Fatalf("ParseTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}

func TestParseTimeErrorQuotesShortly(t *testing.T) {
	_, err := ParseTime(strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("err = %.300v, want a short error", err)
	}
}

func BenchmarkParseTime(b *testing.B) {
	in := []byte("2026-03-01T12:34:56.123456Z")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTime(in); err != nil {
			b.Fatal(err)
		}
	}
}
