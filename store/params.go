package store

import (
	"strconv"
	"strings"
	"time"
)

// Parameter values travel as text that ClickHouse parses in its escaped
// format, on both engines: a backslash starts an escape and a raw tab or
// newline is an error. These helpers render Go values for Params.

// paramEscaper escapes a value for a String parameter or for a quoted
// element of an Array(String) parameter.
var paramEscaper = strings.NewReplacer(
	`\`, `\\`,
	`'`, `\'`,
	"\x00", `\0`,
	"\n", `\n`,
	"\r", `\r`,
	"\t", `\t`,
)

// StringParam renders s for a {name:String} parameter.
func StringParam(s string) string {
	if !strings.ContainsAny(s, "\\'\x00\n\r\t") {
		return s
	}
	return paramEscaper.Replace(s)
}

// StringArrayParam renders vals for a {name:Array(String)} parameter.
func StringArrayParam(vals []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\'')
		_, _ = paramEscaper.WriteString(&b, v)
		b.WriteByte('\'')
	}
	b.WriteByte(']')
	return b.String()
}

// StringTupleArrayParam renders tuples of strings for a
// {name:Array(Tuple(String, ...))} parameter: each tuple its values
// quoted as StringArrayParam quotes them, in parentheses.
func StringTupleArrayParam(tuples [][]string) string {
	parts := make([]string, len(tuples))
	for i, t := range tuples {
		a := StringArrayParam(t)
		parts[i] = "(" + a[1:len(a)-1] + ")"
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// MinTime and MaxTime bound what a DateTime64(6) column holds.
var (
	MinTime = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(2299, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// TimeParam renders t for a {name:DateTime64(6, 'UTC')} parameter, rounded
// up to the microsecond (the columns' precision, so ts >= t and ts < t hold
// exactly when they hold for the rounded value) and clamped to the range
// the type holds.
func TimeParam(t time.Time) string {
	t = t.UTC()
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		t = r.Add(time.Microsecond)
	}
	if t.Before(MinTime) {
		t = MinTime
	}
	if t.After(MaxTime) {
		t = MaxTime
	}
	return t.Format("2006-01-02 15:04:05.000000")
}

// TimeArrayParam renders ts for a {name:Array(DateTime64(6, 'UTC'))}
// parameter, each as TimeParam renders it.
func TimeArrayParam(ts []time.Time) string {
	vals := make([]string, len(ts))
	for i, t := range ts {
		vals[i] = TimeParam(t)
	}
	return StringArrayParam(vals)
}

// FloatArrayParam renders vals for a {name:Array(Float32)} or
// {name:Array(Float64)} parameter, each in the shortest form that reads
// back as the same float of that many bits.
func FloatArrayParam(vals []float64, bits int) string {
	b := []byte{'['}
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, v, 'g', -1, bits)
	}
	return string(append(b, ']'))
}
