package report

import (
	"fmt"
	"os"
	"slices"
	"time"

	_ "time/tzdata" // time zones of schedules, also where the system has no zoneinfo

	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/detect"
)

// File is the reports configuration file (YAML, serve --config):
//
//	reports:
//	- name: daily
//	  schedule: "0 6 * * *"      # cron: minute hour day-of-month month day-of-week
//	  timeZone: Europe/Berlin    # default UTC
//	  window: 24h
//	  clusters: [prod]           # default all
//	  detectors: [watch-loop]    # default all
//	  minSeverity: warning       # default info
//	  outputs:
//	    dir: /var/lib/auditlens/reports
//	    formats: [html, md, json]  # default all three
//	    webhooks:
//	    - url: https://hooks.example.com/T000/B000
//	      slack: true            # Slack-compatible body instead of the report's JSON
//	      retries: 3
//	      backoff: 2s
type File struct {
	Reports []Spec `json:"reports"`
	// Alerts is the alerts section of the same file, read and checked by
	// package alert (alert.LoadFile); reports only let it be.
	Alerts any `json:"alerts,omitempty"`
}

// Spec is one scheduled report.
type Spec struct {
	Name        string          `json:"name"`
	Schedule    string          `json:"schedule"`
	TimeZone    string          `json:"timeZone,omitempty"`
	Window      Duration        `json:"window,omitempty"`
	Clusters    []string        `json:"clusters,omitempty"`
	Detectors   []string        `json:"detectors,omitempty"`
	MinSeverity detect.Severity `json:"minSeverity,omitempty"`
	TopN        int             `json:"top,omitempty"`
	GapAfter    Duration        `json:"gapAfter,omitempty"`
	// FeedLookback: see Config.FeedLookback.
	FeedLookback Duration `json:"feedLookback,omitempty"`
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

// LoadFile reads and validates a reports configuration file. Unknown keys
// are errors, so a misspelt setting is not silently ignored.
func LoadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("reading reports config: %w", err)
	}
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return File{}, fmt.Errorf("parsing reports config %s: %w", path, err)
	}
	if err := f.Validate(); err != nil {
		return File{}, fmt.Errorf("reports config %s: %w", path, err)
	}
	return f, nil
}

// Validate checks every report of the file.
func (f File) Validate() error {
	seen := map[string]bool{}
	for i, s := range f.Reports {
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
