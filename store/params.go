package store

import (
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

// TimeParam renders t for a {name:DateTime64(6, 'UTC')} parameter,
// truncated to microseconds.
func TimeParam(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}
