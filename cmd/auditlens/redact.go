package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/auditlens/auditlens/ingest"
)

// redactFlags are the ingest redaction flags of serve and import.
type redactFlags struct {
	rules    multiFlag
	defaults bool
}

func (r *redactFlags) register(fs *flag.FlagSet) {
	fs.Var(&r.rules, "redact", "[GROUP/]RESOURCE[/SUBRESOURCE]=PATH[,PATH...]: cut these JSON paths out of that resource's events before they are spooled or stored, "+
		"e.g. configmaps=requestObject,responseObject (repeatable; adds to --redact-defaults)")
	fs.BoolVar(&r.defaults, "redact-defaults", true, "cut the bodies of Secrets and service-account token requests, and TokenReviews' tokens, out of every event ("+
		defaultRedactions()+")")
}

func defaultRedactions() string {
	var s []string
	for _, r := range ingest.DefaultRedactions {
		s = append(s, r.String())
	}
	return strings.Join(s, "; ")
}

// redactor returns the redactor the flags ask for (nil: none).
func (r *redactFlags) redactor() (*ingest.Redactor, error) {
	var rules []ingest.RedactRule
	if r.defaults {
		rules = append(rules, ingest.DefaultRedactions...)
	}
	for _, s := range r.rules {
		rule, err := ingest.ParseRedactRule(s)
		if err != nil {
			return nil, fmt.Errorf("%w: --redact: %v", errUsage, err)
		}
		rules = append(rules, rule)
	}
	return ingest.NewRedactor(rules), nil
}
