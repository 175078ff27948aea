package query

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// sqlCases are the filters whose SQL is kept in testdata/sql/NAME.golden.
var sqlCases = []struct {
	name string
	f    Filter
}{
	{"zero", Filter{}},
	{"time_range", Filter{Since: testNow.Add(-time.Hour), Until: testNow}},
	{"since_only_rounds_up", Filter{Since: time.Date(2024, 5, 1, 11, 0, 0, 1500, time.UTC)}},
	{"until_in_other_zone", Filter{Until: time.Date(2024, 5, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))}},
	{"times_outside_datetime64", Filter{Since: time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)}},
	{"every_list", Filter{
		Cluster:   []string{"prod"},
		APIServer: []string{"master-1", ""},
		Verb:      []string{"watch", "list"},
		Resource:  []string{"endpoints"},
		Namespace: []string{"", "kube-system"},
		Name:      []string{"kube-dns"},
		Stage:     []string{"ResponseComplete"},
		Level:     []string{"Metadata", "RequestResponse"},
		Code:      []int32{200, 410},
		Limit:     50,
	}},
	{"user_exact", Filter{User: []string{"system:kube-controller-manager"}}},
	{"user_prefix", Filter{User: []string{"system:serviceaccount:kube-system:*"}}},
	{"user_exact_and_prefixes", Filter{User: []string{"alice", "system:node:*", "bob", "system:serviceaccount:*"}}},
	{"user_agent_prefix", Filter{UserAgent: []string{"kubectl/*"}}},
	{"desc", Filter{Verb: []string{"delete"}, Order: Desc, Limit: 10}},
	{"limit_clamped", Filter{Limit: 5 * MaxLimit}},
	{"all", Filter{Cluster: []string{"prod"}, Since: testNow.Add(-24 * time.Hour), Limit: 10, All: true}},
}

func TestFilterSQLGolden(t *testing.T) {
	for _, tc := range sqlCases {
		t.Run(tc.name, func(t *testing.T) {
			sql, params := tc.f.SQL("ts, raw")
			checkGolden(t, filepath.Join("testdata", "sql", tc.name+".golden"), renderSQL(sql, params))
		})
	}
}

func TestParseExportFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ExportFormat
		ok   bool
	}{
		{"ndjson", NDJSON, true}, {"NDJSON", NDJSON, true}, {"jsonl", NDJSON, true}, {" parquet ", Parquet, true},
		{"", 0, false}, {"csv", 0, false}, {"json", 0, false},
	} {
		got, err := ParseExportFormat(tc.in)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("ParseExportFormat(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadExportFormat) {
			t.Errorf("ParseExportFormat(%q): %v does not wrap ErrBadExportFormat", tc.in, err)
		}
	}
	if NDJSON.String() != "ndjson" || Parquet.String() != "parquet" {
		t.Errorf("String: %s %s", NDJSON, Parquet)
	}
}

// renderSQL writes a query and its parameters, sorted, for a golden file.
func renderSQL(sql string, params store.Params) string {
	var b strings.Builder
	b.WriteString(sql)
	b.WriteString("\n\n-- parameters\n")
	for _, k := range slices.Sorted(maps.Keys(params)) {
		fmt.Fprintf(&b, "-- %s = %s\n", k, params[k])
	}
	return b.String()
}

// checkGolden compares got with the golden file, or rewrites the file
// under -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing; run go test ./query/ -update to create it", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./query/ -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// hostile are values that would break out of SQL string literals, or of
// the parameter encoding, if either were built by pasting them in.
var hostile = []string{
	`'`, `\`, `\'`, `''`, `'; DROP TABLE audit_events; --`, "\x00", "a\x00b", "tab\there",
	"new\nline", "cr\rlf", `{p:String}`, `}`, `['x']`, `\N`, "quote\\'and\\\\back", `"`, "é日本", "\xff",
	`x' OR 1=1 OR 'x`, `*`, `\*`,
}

func TestFilterSQLHostileValuesOnlyInParams(t *testing.T) {
	codes := []int32{0, 200, 999}
	f := Filter{
		Cluster: hostile, APIServer: hostile, Verb: hostile, Resource: hostile, Namespace: hostile, Name: hostile,
		User: hostile, UserAgent: hostile, Stage: hostile, Level: hostile, Code: codes,
	}
	sql, params := f.SQL("raw")
	for _, v := range hostile {
		if len(v) > 1 && strings.Contains(sql, v) {
			t.Errorf("SQL contains the value %q:\n%s", v, sql)
		}
	}
	// The text is the same as for harmless values of the same shape.
	benign := Filter{
		Cluster: []string{"a"}, APIServer: []string{"a"}, Verb: []string{"a"}, Resource: []string{"a"}, Namespace: []string{"a"},
		Name: []string{"a"}, User: []string{"a", "b*"}, UserAgent: []string{"a", "b*"}, Stage: []string{"a"},
		Level: []string{"a"}, Code: []int32{1},
	}
	if want, _ := benign.SQL("raw"); sql != want {
		t.Errorf("SQL depends on the values:\n%s\nwant\n%s", sql, want)
	}
	// Every value comes back out of its parameter unchanged.
	var exact, prefixes []string
	for _, v := range hostile {
		if p, ok := strings.CutSuffix(v, "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			exact = append(exact, v)
		}
	}
	for name, want := range map[string][]string{
		"cluster": hostile, "verb": hostile, "resource": hostile, "namespace": hostile, "name": hostile,
		"stage": hostile, "level": hostile, "user": exact, "user_prefix": prefixes,
		"user_agent": exact, "user_agent_prefix": prefixes,
	} {
		got, err := parseStringArray(params[name])
		if err != nil {
			t.Errorf("parameter %s = %q: %v", name, params[name], err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("parameter %s decodes to %q, want %q", name, got, want)
		}
	}
	if got := params["code"]; got != "[0,200,999]" {
		t.Errorf("parameter code = %q", got)
	}
	for name, v := range params {
		if strings.ContainsAny(v, "\x00\n\r\t") {
			t.Errorf("parameter %s = %q holds a raw control character", name, v)
		}
	}
}

// parseStringArray decodes an Array(String) parameter as ClickHouse reads
// it: ['…','…'] with backslash escapes inside the quotes.
func parseStringArray(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, errors.New("not a bracketed list")
	}
	s = s[1 : len(s)-1]
	var out []string
	for i := 0; i < len(s); {
		if len(out) > 0 {
			if s[i] != ',' {
				return nil, fmt.Errorf("expected a comma at %d", i)
			}
			i++
		}
		if i >= len(s) || s[i] != '\'' {
			return nil, fmt.Errorf("expected a quote at %d", i)
		}
		i++
		var b strings.Builder
		for {
			if i >= len(s) {
				return nil, errors.New("unterminated string")
			}
			c := s[i]
			i++
			if c == '\'' {
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				continue
			}
			if i >= len(s) {
				return nil, errors.New("dangling backslash")
			}
			e := s[i]
			i++
			switch e {
			case '0':
				b.WriteByte(0)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '\\', '\'':
				b.WriteByte(e)
			default:
				return nil, fmt.Errorf("unexpected escape \\%c", e)
			}
		}
		out = append(out, b.String())
	}
	return out, nil
}

func TestFormatTime(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), "2024-05-01 12:00:00.000000"},
		{time.Date(2024, 5, 1, 12, 0, 0, 1, time.UTC), "2024-05-01 12:00:00.000001"},
		{time.Date(2024, 5, 1, 12, 0, 0, 999999001, time.UTC), "2024-05-01 12:00:01.000000"},
		{time.Date(2024, 5, 1, 14, 0, 0, 123456000, time.FixedZone("", 7200)), "2024-05-01 12:00:00.123456"},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "1900-01-01 00:00:00.000000"},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "2299-12-31 23:59:59.999999"},
	}
	for _, tt := range tests {
		if got := formatTime(tt.in); got != tt.want {
			t.Errorf("formatTime(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatInt32Array(t *testing.T) {
	for _, tt := range []struct {
		in   []int32
		want string
	}{
		{[]int32{200}, "[200]"},
		{[]int32{-1, 0, 2147483647}, "[-1,0,2147483647]"},
	} {
		if got := formatInt32Array(tt.in); got != tt.want {
			t.Errorf("formatInt32Array(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
