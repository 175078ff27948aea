package query

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestParseFilter(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		want    Filter
		wantErr string // substring of the error; the error must wrap ErrBadFilter
	}{
		{name: "empty", query: "", want: Filter{}},
		{name: "unknown parameters are ignored", query: "jq=.verb&format=ndjson", want: Filter{}},
		{
			name:  "rfc3339 times",
			query: "since=2024-05-01T10:00:00Z&until=2024-05-01T13:30:00.5%2B02:00",
			want: Filter{
				Since: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
				Until: time.Date(2024, 5, 1, 13, 30, 0, 5e8, time.FixedZone("", 2*3600)),
			},
		},
		{
			name:  "relative times",
			query: "since=24h&until=15m",
			want:  Filter{Since: testNow.Add(-24 * time.Hour), Until: testNow.Add(-15 * time.Minute)},
		},
		{name: "days and leading minus", query: "since=-7d", want: Filter{Since: testNow.Add(-7 * 24 * time.Hour)}},
		{name: "compound duration", query: "since=1h30m", want: Filter{Since: testNow.Add(-90 * time.Minute)}},
		{
			name:  "repeated and comma lists",
			query: "verb=get,list&verb=watch&resource=pods&namespace=default,+kube-system+&cluster=prod&apiserver=master-1,master-2",
			want: Filter{
				Verb:      []string{"get", "list", "watch"},
				Resource:  []string{"pods"},
				Namespace: []string{"default", "kube-system"},
				Cluster:   []string{"prod"},
				APIServer: []string{"master-1", "master-2"},
			},
		},
		{name: "empty items are ignored", query: "verb=&name=a,,b", want: Filter{Name: []string{"a", "b"}}},
		{
			name:  "user and user agent are not split at commas",
			query: "user_agent=Mozilla/5.0+(KHTML,+like+Gecko)&user_agent=kubectl/*&user=CN%3Dx,O%3Dy",
			want: Filter{
				UserAgent: []string{"Mozilla/5.0 (KHTML, like Gecko)", "kubectl/*"},
				User:      []string{"CN=x,O=y"},
			},
		},
		{
			name:  "stage and level ignore case",
			query: "stage=responsecomplete,PANIC&level=metadata",
			want:  Filter{Stage: []string{"ResponseComplete", "Panic"}, Level: []string{"Metadata"}},
		},
		{name: "codes", query: "code=200,404&code=0", want: Filter{Code: []int32{200, 404, 0}}},
		{name: "limit and order", query: "limit=50&order=DESC", want: Filter{Limit: 50, Order: Desc}},
		{name: "max limit", query: "limit=100000", want: Filter{Limit: MaxLimit}},
		{name: "order asc", query: "order=asc", want: Filter{Order: Asc}},

		{name: "bad since", query: "since=yesterday", wantErr: `since "yesterday" is neither an RFC 3339 time`},
		{name: "bad until", query: "until=2024-05-01", wantErr: `until "2024-05-01" is neither`},
		{name: "negative duration", query: "since=--5m", wantErr: `since "--5m"`},
		{name: "huge duration", query: "since=1000000d", wantErr: `since "1000000d"`},
		{name: "fractional days", query: "since=1.5d", wantErr: `since "1.5d"`},
		{name: "since twice", query: "since=1h&since=2h", wantErr: "since is given 2 times"},
		{name: "since after until", query: "since=1h&until=2h", wantErr: "must be before until"},
		{name: "since equals until", query: "since=1h&until=60m", wantErr: "must be before until"},
		{name: "bad code", query: "code=abc", wantErr: `code "abc" is not an HTTP status code: use a number such as 200`},
		{name: "code out of range", query: "code=1000", wantErr: `code "1000"`},
		{name: "negative code", query: "code=-1", wantErr: `code "-1"`},
		{name: "code beyond int32", query: "code=99999999999", wantErr: `code "99999999999"`},
		{name: "bad limit", query: "limit=ten", wantErr: `limit "ten" is not a number from 1 to 100000`},
		{name: "zero limit", query: "limit=0", wantErr: `limit "0"`},
		{name: "limit too large", query: "limit=100001", wantErr: `limit "100001"`},
		{name: "limit twice", query: "limit=1&limit=2", wantErr: "limit is given 2 times"},
		{name: "bad order", query: "order=newest", wantErr: `order "newest" is neither asc nor desc`},
		{name: "bad stage", query: "stage=Done", wantErr: `stage "Done" is not one of RequestReceived, ResponseStarted, ResponseComplete, Panic`},
		{name: "bad level", query: "level=All", wantErr: `level "All" is not one of None, Metadata, Request, RequestResponse`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseFilter(v, testNow)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseFilter(%q) = %+v, want an error containing %q", tt.query, got, tt.wantErr)
				}
				if !errors.Is(err, ErrBadFilter) {
					t.Errorf("error %q does not wrap ErrBadFilter", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFilter(%q): %v", tt.query, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseFilter(%q)\n got %+v\nwant %+v", tt.query, got, tt.want)
			}
		})
	}
}

func TestFilterValidate(t *testing.T) {
	tests := []struct {
		name    string
		f       Filter
		wantErr string
	}{
		{name: "zero", f: Filter{}},
		{name: "full", f: Filter{Since: testNow.Add(-time.Hour), Until: testNow, Stage: Stages, Level: Levels, Code: []int32{0, 999}, Limit: MaxLimit, Order: Desc}},
		{name: "negative limit", f: Filter{Limit: -1}, wantErr: "limit -1 is out of range"},
		{name: "limit too large", f: Filter{Limit: MaxLimit + 1}, wantErr: "limit 100001 is out of range"},
		{name: "empty time range", f: Filter{Since: testNow, Until: testNow}, wantErr: "must be before until"},
		{name: "bad order", f: Filter{Order: 7}, wantErr: "order 7"},
		{name: "stage in wrong case", f: Filter{Stage: []string{"responsecomplete"}}, wantErr: `stage "responsecomplete"`},
		{name: "unknown level", f: Filter{Level: []string{""}}, wantErr: `level ""`},
		{name: "bad code", f: Filter{Code: []int32{-5}}, wantErr: "code -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate succeeded, want an error containing %q", tt.wantErr)
			case err != nil && (!errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an ErrBadFilter containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestOrderString(t *testing.T) {
	for o, want := range map[Order]string{Asc: "asc", Desc: "desc", 5: "Order(5)"} {
		if got := o.String(); got != want {
			t.Errorf("Order(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
