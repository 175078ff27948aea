package report

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// Formats are the renderings Render knows.
var Formats = []string{"html", "md", "json"}

// Ext returns the file extension of a format.
func Ext(format string) string {
	if format == "md" {
		return ".md"
	}
	return "." + format
}

// Render writes r as html, md (Markdown) or json.
func Render(w io.Writer, format string, r Report) error {
	var err error
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	case "md", "markdown":
		bw := bufio.NewWriter(w)
		renderMarkdown(bw, r)
		err = bw.Flush()
	case "html":
		err = renderHTML(w, r)
	default:
		return fmt.Errorf("report format %q: want html, md or json", format)
	}
	if err != nil {
		return fmt.Errorf("rendering report %s as %s: %w", r.ID, format, err)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// mdEscaper escapes what Markdown would read as markup, and turns line
// breaks into spaces so a string stays in its table cell.
var mdEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "<", "&lt;", ">", "&gt;",
	"|", `\|`, "#", `\#`, "\r", " ", "\n", " ", "\x00", "",
)

func md(s string) string { return mdEscaper.Replace(s) }

func renderMarkdown(w *bufio.Writer, r Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# Report %s\n\n", md(r.Name))
	p("Window %s to %s (generated %s)", stamp(r.WindowStart), stamp(r.WindowEnd), stamp(r.GeneratedAt))
	if len(r.Clusters) > 0 {
		p(", clusters: %s", md(strings.Join(r.Clusters, ", ")))
	}
	p(".\n\n## Findings\n\n")
	if len(r.Findings) == 0 {
		p("No findings in the window.\n\n")
	}
	for _, g := range r.Findings {
		p("### %s — %s (%d)\n\n", md(g.Detector), g.Severity, len(g.Findings))
		for _, f := range g.Findings {
			p("#### %s\n\n", md(f.Title))
			p("- id: %s, cluster: %s, confidence %.2f\n", md(f.ID), md(f.Cluster), f.Confidence)
			p("- seen %s to %s, %d evidence events\n", stamp(f.FirstSeen), stamp(f.LastSeen), len(f.Evidence))
			if sp := subjectPairs(f.Subjects); len(sp) > 0 {
				var parts []string
				for _, x := range sp {
					parts = append(parts, md(x.Key)+": "+md(x.Value))
				}
				p("- subjects: %s\n", strings.Join(parts, ", "))
			}
			if len(f.Objects) > 0 {
				var objs []string
				for _, o := range f.Objects {
					objs = append(objs, md(o.String()))
				}
				p("- objects: %s\n", strings.Join(objs, ", "))
			}
			p("\n%s\n\n**Remediation:** %s\n\n", md(f.Summary), md(f.Remediation))
		}
	}
	p("## Changes since the previous report\n\n")
	if r.Changes.Previous == "" {
		p("No previous report named %s: every finding is new.\n\n", md(r.Name))
	} else {
		p("Compared with %s (window ending %s).\n\n", md(r.Changes.Previous), stamp(r.Changes.PreviousWindowEnd))
	}
	p("| change | severity | detector | finding | id |\n|---|---|---|---|---|\n")
	for _, c := range []struct {
		what string
		l    []Change
	}{{"new", r.Changes.New}, {"ongoing", r.Changes.Ongoing}, {"resolved", r.Changes.Resolved}} {
		for _, x := range c.l {
			p("| %s | %s | %s | %s | %s |\n", c.what, x.Severity, md(x.Detector), md(x.Title), md(x.ID))
		}
	}
	p("\n## Event volume by verb (requests per %s)\n\n", time.Duration(r.VolumeStep))
	verbs, starts, counts := volumeTable(r)
	if len(verbs) == 0 {
		p("No events in the window.\n\n")
	} else {
		p("| bucket start |")
		for _, v := range verbs {
			p(" %s |", md(v))
		}
		p("\n|---|%s\n", strings.Repeat("---:|", len(verbs)))
		for _, s := range starts {
			p("| %s |", stamp(s))
			for _, v := range verbs {
				p(" %d |", counts[s][v])
			}
			p("\n")
		}
		p("\n")
	}
	p("## Top talkers\n\n")
	for _, t := range talkerLists(r) {
		p("### %s\n\n", t.Title)
		if len(t.List) == 0 {
			p("None.\n\n")
			continue
		}
		p("| %s | requests | errors |\n|---|---:|---:|\n", t.Who)
		for _, x := range t.List {
			p("| %s | %d | %d |\n", md(orNone(x.Name)), x.Requests, x.Errors)
		}
		p("\n")
	}
	p("## Audit feed health\n\n")
	if len(r.Feed) == 0 {
		p("No cluster sent events in the window.\n")
	}
	for _, f := range r.Feed {
		p("### %s: %d events\n\n", md(f.Cluster), f.Events)
		if f.LastEvent != nil {
			p("**Silent for the whole window**: its last event was at %s.\n\n", stamp(*f.LastEvent))
		}
		p("| hour | events |\n|---|---:|\n")
		for _, h := range f.Hours {
			p("| %s | %d |\n", stamp(h.Hour), h.Events)
		}
		if len(f.Gaps) == 0 {
			p("\nNo gaps.\n\n")
			continue
		}
		p("\nGaps (silent for at least the gap threshold):\n\n")
		for _, g := range f.Gaps {
			p("- %s to %s (%s)\n", stamp(g.Start), stamp(g.End), g.End.Sub(g.Start))
		}
		p("\n")
	}
}

// subjectPair is one subject of a finding, named as a person reads it.
type subjectPair struct{ Key, Value string }

// subjectPairs lists the subjects a finding sets, in the order the
// Subjects type declares them, whatever the detector: every detector
// sets its own (a watch loop's client and resourceVersion, the nodes a
// heartbeat loss counts, the heads of a resourceVersion rollback) and
// leaves the rest empty.
func subjectPairs(s detect.Subjects) []subjectPair {
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	return orderedPairs(b)
}

// orderedPairs reads a JSON object's members in their order, with the
// text of each non-empty value.
func orderedPairs(obj []byte) []subjectPair {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []subjectPair
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		if val := subjectText(v); val != "" {
			out = append(out, subjectPair{Key: strings.ReplaceAll(key, "_", " "), Value: val})
		}
	}
	return out
}

// subjectText renders a subject's JSON value; "" for an empty one. A
// record (rv-rollback's stuck clients) reads "key value, …" in its
// fields' order; records in a list are separated by semicolons.
func subjectText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '{':
		var parts []string
		for _, p := range orderedPairs(raw) {
			parts = append(parts, p.Key+" "+p.Value)
		}
		return strings.Join(parts, ", ")
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return ""
		}
		sep := ", "
		var parts []string
		for _, e := range items {
			if e = bytes.TrimSpace(e); len(e) > 0 && e[0] == '{' {
				sep = "; "
			}
			if t := subjectText(e); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, sep)
	case '"':
		var str string
		_ = json.Unmarshal(raw, &str)
		return str
	case 'n', 'f':
		return "" // null, false
	case 't':
		return "yes"
	}
	if string(raw) == "0" {
		return ""
	}
	return string(raw) // a number
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

type talkerList struct {
	Title, Who string
	List       []Talker
}

func talkerLists(r Report) []talkerList {
	return []talkerList{
		{"Users by requests", "user", r.TopUsersByRequests},
		{"Users by errors", "user", r.TopUsersByErrors},
		{"User agents by requests", "user agent", r.TopUserAgentsByRequests},
		{"User agents by errors", "user agent", r.TopUserAgentsByErrors},
	}
}

// volumeTable returns the verbs (by total, largest first), every bucket
// start of the window, and the counts by start and verb.
func volumeTable(r Report) ([]string, []time.Time, map[time.Time]map[string]int64) {
	totals := map[string]int64{}
	counts := map[time.Time]map[string]int64{}
	for _, b := range r.Volume {
		totals[b.Verb] += b.Count
		if counts[b.Start] == nil {
			counts[b.Start] = map[string]int64{}
		}
		counts[b.Start][b.Verb] += b.Count
	}
	var verbs []string
	for v := range totals {
		verbs = append(verbs, v)
	}
	sortByTotal(verbs, totals)
	var starts []time.Time
	if step := time.Duration(r.VolumeStep); step > 0 {
		for s := r.WindowStart; s.Before(r.WindowEnd); s = s.Add(step) {
			starts = append(starts, s)
		}
	}
	return verbs, starts, counts
}

func sortByTotal(verbs []string, totals map[string]int64) {
	slices.SortFunc(verbs, func(a, b string) int { return cmp.Or(cmp.Compare(totals[b], totals[a]), cmp.Compare(a, b)) })
}

// FileName names the file of a rendering: the report name (with path
// separators and other unsafe characters replaced) and the window end,
// e.g. "daily-20260302T1200Z.html".
func FileName(r Report, format string) string {
	safe := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			return c
		}
		return '_'
	}, r.Name)
	return strings.TrimLeft(safe, ".") + "-" + r.WindowEnd.UTC().Format("20060102T1504Z") + Ext(format)
}
