package report

import (
	"fmt"
	"slices"
	"time"

	_ "time/tzdata" // time zones of schedules, also where the system has no zoneinfo

	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/detect"
)

// The reports section of the configuration file (package config reads
// the file; ParseSpecs decodes this section):
//
//	reports:
//	- name: daily
//	  schedule: "0 6 * * *"      # cron: minute hour day-of-month month day-of-week
//	  time_zone: Europe/Berlin   # default UTC
//	  window: 24h
//	  clusters: [prod]           # default all
//	  detectors: [watch-loop]    # default all
//	  min_severity: warning      # default info
//	  outputs:
//	    dir: /var/lib/auditlens/reports
//	    formats: [html, md, json]  # default all three
//	    webhooks:
//	    - url: https://hooks.example.com/T000/B000
//	      slack: true            # Slack-compatible body instead of the report's JSON
//	      retries: 3
//	      backoff: 2s

// Spec is one scheduled report.
type Spec struct {
	Name        string          `json:"name"`
	Schedule    string          `json:"schedule"`
	TimeZone    string          `json:"time_zone,omitempty"`
	Window      Duration        `json:"window,omitempty"`
	Clusters    []string        `json:"clusters,omitempty"`
	Detectors   []string        `json:"detectors,omitempty"`
	MinSeverity detect.Severity `json:"min_severity,omitempty"`
	TopN        int             `json:"top,omitempty"`
	GapAfter    Duration        `json:"gap_after,omitempty"`
	// FeedLookback: see Config.FeedLookback.
	FeedLookback Duration `json:"feed_lookback,omitempty"`
	Outputs      Outputs  `json:"outputs"`
}

// Outputs say where a scheduled report goes. Every report is also stored
// in the reports table.
type Outputs struct {
	// Dir receives one file per format, named by FileName.
	Dir      string    `json:"dir,omitempty"`
	Formats  []string  `json:"formats,omitempty"`
	Webhooks []Webhook `json:"webhooks,omitempty"`
}

// ParseSpecs decodes and validates the reports section: a YAML list of
// Specs. Unknown keys are errors, so a misspelt setting is not silently
// ignored.
func ParseSpecs(section []byte) ([]Spec, error) {
	var specs []Spec
	if err := yaml.UnmarshalStrict(section, &specs); err != nil {
		return nil, err
	}
	if err := validateSpecs(specs); err != nil {
		return nil, err
	}
	return specs, nil
}

// validateSpecs checks every report.
func validateSpecs(specs []Spec) error {
	seen := map[string]bool{}
	for i, s := range specs {
		if s.Name == "" {
			return fmt.Errorf("report %d has no name", i+1)
		}
		if seen[s.Name] {
			return fmt.Errorf("report %q is defined twice", s.Name)
		}
		seen[s.Name] = true
		if _, err := s.compile(); err != nil {
			return err
		}
	}
	return nil
}

// job is a validated Spec.
type job struct {
	spec     Spec
	schedule Schedule
	loc      *time.Location
	formats  []string
}

func (s Spec) compile() (job, error) {
	j := job{spec: s, loc: time.UTC, formats: s.Outputs.Formats}
	var err error
	if j.schedule, err = ParseSchedule(s.Schedule); err != nil {
		return job{}, fmt.Errorf("report %q: %w", s.Name, err)
	}
	if s.TimeZone != "" {
		if j.loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return job{}, fmt.Errorf("report %q: time zone: %w", s.Name, err)
		}
	}
	if err := s.config().Validate(); err != nil {
		return job{}, err
	}
	if len(j.formats) == 0 {
		j.formats = Formats
	}
	for _, f := range j.formats {
		if !slices.Contains(Formats, f) {
			return job{}, fmt.Errorf("report %q: format %q: want html, md or json", s.Name, f)
		}
	}
	for _, w := range s.Outputs.Webhooks {
		if err := w.Validate(); err != nil {
			return job{}, fmt.Errorf("report %q: %w", s.Name, err)
		}
	}
	return j, nil
}

// config is the Build configuration of a spec.
func (s Spec) config() Config {
	return Config{Name: s.Name, Window: time.Duration(s.Window), Clusters: s.Clusters, Detectors: s.Detectors,
		MinSeverity: s.MinSeverity, TopN: s.TopN, GapAfter: time.Duration(s.GapAfter),
		FeedLookback: time.Duration(s.FeedLookback)}
}
