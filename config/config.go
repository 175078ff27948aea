// Package config reads auditlens's configuration file: one YAML document
// whose sections are read by the packages they configure.
//
//	reports:     # scheduled reports (package report; serve)
//	- name: daily
//	  schedule: "0 6 * * *"
//	  time_zone: Europe/Berlin
//	alerts:      # alert routes (package alert; serve)
//	  resolve_after: 10m
//	  routes: [...]
//	detectors:   # detector parameters (package detect; serve, scan, detect, import)
//	  heartbeat-loss:
//	    floor: 45s
//
// Keys are in snake case. The reports' older camel-case keys (timeZone,
// minSeverity, gapAfter, feedLookback) are still read, each with a
// warning naming its line and its new name.
package config

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/auditlens/auditlens/alert"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/report"
)

// File is the configuration file, each section decoded and validated.
type File struct {
	Reports   []report.Spec
	Alerts    alert.Config
	Detectors detectors.Config
}

// Sections are the top-level keys of the file.
var Sections = []string{"reports", "alerts", "detectors"}

// renamed are the reports' old keys and their snake-case names.
var renamed = map[string]string{
	"timeZone": "time_zone", "minSeverity": "min_severity", "gapAfter": "gap_after", "feedLookback": "feed_lookback",
}

// Load reads and checks the file at path. Warnings say what still works
// but should change (an old key); an error names the file and, where it
// can, the line.
func Load(path string) (File, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, nil, fmt.Errorf("reading the configuration: %w", err)
	}
	f, warnings, err := Parse(b)
	if err != nil {
		return File{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, w := range warnings {
		warnings[i] = path + ": " + w
	}
	return f, warnings, nil
}

// Parse decodes a configuration document.
func Parse(b []byte) (File, []string, error) {
	var f File
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return f, nil, err
	}
	if len(doc.Content) == 0 {
		return f, nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return f, nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return f, nil, fmt.Errorf("line %d: want a mapping with the sections %s", root.Line, strings.Join(Sections, ", "))
	}
	var warnings []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return f, nil, fmt.Errorf("line %d: section %s is there twice", k.Line, k.Value)
		}
		seen[k.Value] = true
		var err error
		switch k.Value {
		case "reports":
			warnings = append(warnings, renameOld(v)...)
			f.Reports, err = decodeReports(v)
		case "alerts":
			f.Alerts, err = alert.Decode(v)
		case "detectors":
			f.Detectors, err = detectors.ParseConfig(v)
		default:
			return f, nil, fmt.Errorf("line %d: unknown section %q (the sections are %s)", k.Line, k.Value, strings.Join(Sections, ", "))
		}
		if err != nil {
			return f, nil, err
		}
	}
	return f, warnings, nil
}

// decodeReports decodes the reports section with package report's strict
// decoder; its errors get the section's line.
func decodeReports(n *yaml.Node) ([]report.Spec, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: reports: want a list of reports", n.Line)
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("line %d: reports: %w", n.Line, err)
	}
	specs, err := report.ParseSpecs(b)
	if err != nil {
		return nil, fmt.Errorf("line %d: reports: %w", n.Line, err)
	}
	return specs, nil
}

// renameOld gives the reports' old camel-case keys their snake-case names
// and says so, line by line.
func renameOld(n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode {
		return nil
	}
	var warnings []string
	for _, item := range n.Content {
		if item.Kind != yaml.MappingNode {
			continue
		}
		var keys []string
		for i := 0; i+1 < len(item.Content); i += 2 {
			keys = append(keys, item.Content[i].Value)
		}
		for i := 0; i+1 < len(item.Content); i += 2 {
			k := item.Content[i]
			to, ok := renamed[k.Value]
			if !ok || slices.Contains(keys, to) {
				continue // a new key beside its old one: the strict decoder refuses the old
			}
			warnings = append(warnings, fmt.Sprintf("line %d: reports: %s is now called %s (the old name still works)", k.Line, k.Value, to))
			k.Value = to
		}
	}
	return warnings
}
