package main

import (
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/auditlens/auditlens/query"
)

// filterFlags are the event filters of query and export. Each maps to the
// HTTP API parameter of the same name, so the CLI and /api/v1/events parse
// filters with one function (query.ParseFilter).
type filterFlags struct {
	vals []*string
}

var filterFlagDefs = []struct{ name, help string }{
	{"since", "start: RFC3339 time or a duration ago, e.g. 2h"},
	{"until", "end: RFC3339 time or a duration ago"},
	{"cluster", "cluster name (comma-separated for several)"},
	{"apiserver", "apiserver name, on a control plane that runs several (comma-separated for several)"},
	{"verb", "verb, e.g. watch,list"},
	{"resource", "resource, e.g. services"},
	{"namespace", "namespace"},
	{"name", "object name"},
	{"user", "user name (a trailing * matches a prefix)"},
	{"user-agent", "user agent (a trailing * matches a prefix)"},
	{"code", "response code, e.g. 409"},
	{"stage", "stage, e.g. ResponseComplete"},
	{"level", "audit level"},
	{"order", "asc (default) or desc"},
}

func (ff *filterFlags) register(fs *flag.FlagSet) {
	ff.vals = make([]*string, len(filterFlagDefs))
	for i, f := range filterFlagDefs {
		ff.vals[i] = fs.String(f.name, "", f.help)
	}
}

// values returns the flags that were set as API parameters.
func (ff *filterFlags) values() url.Values {
	v := url.Values{}
	for i, f := range filterFlagDefs {
		if *ff.vals[i] != "" {
			v.Set(apiName(f.name), *ff.vals[i])
		}
	}
	return v
}

// filter parses the flags into a filter selecting every matching event
// (Filter.All); now is the reference for relative times. Errors are usage
// errors.
func (ff *filterFlags) filter(now time.Time) (query.Filter, error) {
	f, err := query.ParseFilter(ff.values(), now)
	if err != nil {
		return query.Filter{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	f.All = true
	return f, nil
}

func apiName(flagName string) string {
	if flagName == "user-agent" {
		return "user_agent"
	}
	return flagName
}
