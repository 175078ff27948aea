package detect

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Formats are the output formats of Render.
var Formats = []string{"text", "json", "markdown"}

// Render writes findings in format: "json" (an array of findings, the API's
// documents), "text" (for a terminal) or "markdown" (for a ticket or a
// chat). Strings from audit events are written as they are in JSON and
// text, and escaped in Markdown.
func Render(w io.Writer, format string, fs []Finding) error {
	bw := bufio.NewWriter(w)
	switch format {
	case "json":
		if fs == nil {
			fs = []Finding{}
		}
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(fs); err != nil {
			return fmt.Errorf("encoding findings: %w", err)
		}
	case "text":
		renderText(bw, fs)
	case "markdown", "md":
		renderMarkdown(bw, fs)
	default:
		return fmt.Errorf("output format %q: want %s", format, strings.Join(Formats, ", "))
	}
	return bw.Flush()
}

// textEvidence is how many evidence events the text format lists.
const textEvidence = 12

func renderText(w *bufio.Writer, fs []Finding) {
	if len(fs) == 0 {
		fmt.Fprintln(w, "No findings.")
		return
	}
	fmt.Fprintf(w, "%s.\n", countLine(fs))
	for _, f := range fs {
		s := f.Subjects
		fmt.Fprintf(w, "\n%s  %s  cluster %s  confidence %.2f\n", strings.ToUpper(string(f.Severity)), f.Detector, f.Cluster, f.Confidence)
		fmt.Fprintf(w, "  %s\n", f.Title)
		fmt.Fprintf(w, "  id %s, seen %s to %s\n", f.ID, stamp(f.FirstSeen), stamp(f.LastSeen))
		// A cluster-wide incident names no client or resource: only what it sets.
		if s.User != "" || s.UserAgent != "" {
			fmt.Fprintf(w, "  client: %s, user agent %q%s\n", s.User, s.UserAgent, ifSet(", from ", s.SourceIP))
		}
		if s.Resource != "" {
			fmt.Fprintf(w, "  resource: %s%s, resourceVersion %s%s%s%s\n", groupResource(s.APIGroup, s.Resource), ifSet(" in namespace ", s.Namespace),
				s.ResourceVersion, ifSet(" (before: ", s.PreviousResourceVersion, ")"), ifCount(", watch restarts ", s.WatchRestarts), ifCount(", iterations ", s.Iterations))
		} else if s.ResourceVersion != "" || s.PreviousResourceVersion != "" {
			// A cluster-wide finding (rv-rollback): the cluster's resourceVersion.
			fmt.Fprintf(w, "  resourceVersion %s%s%s%s\n", s.ResourceVersion, ifSet(" (before: ", s.PreviousResourceVersion, ")"),
				ifCount(", 409 conflicts ", s.Conflicts), ifCount(", relists ", s.Relists))
		}
		for _, c := range s.Stuck {
			fmt.Fprintf(w, "  stuck: %s (%d) on %s from %s–%s, %s to %s\n", c.Program, c.Instances, strings.Join(c.Resources, ", "),
				c.MinRV, c.MaxRV, stamp(c.From), stamp(c.Until))
		}
		if len(f.Objects) > 0 {
			var objs []string
			for _, o := range f.Objects {
				objs = append(objs, o.String())
			}
			fmt.Fprintf(w, "  objects (%d): %s\n", len(f.Objects), strings.Join(objs, ", "))
		}
		fmt.Fprintln(w)
		wrap(w, f.Summary, "  ", 100)
		fmt.Fprintln(w)
		wrap(w, "Remediation: "+f.Remediation, "  ", 100)
		fmt.Fprintf(w, "\n  evidence (%d events):\n", len(f.Evidence))
		for i, e := range f.Evidence {
			if i == textEvidence {
				fmt.Fprintf(w, "    … and %d more (--format json shows all)\n", len(f.Evidence)-textEvidence)
				break
			}
			fmt.Fprintf(w, "    %s  %-16s %-6s %s %s code %d  %s%s\n", e.Time.Format("2006-01-02T15:04:05.000Z"), e.Role, e.Verb,
				objectOf(e), e.User, e.Code, e.AuditID, ifSet(" after watch ", e.WatchAuditID))
		}
	}
}

func renderMarkdown(w *bufio.Writer, fs []Finding) {
	fmt.Fprintln(w, "# auditlens findings")
	fmt.Fprintln(w)
	if len(fs) == 0 {
		fmt.Fprintln(w, "No findings.")
		return
	}
	fmt.Fprintf(w, "%s.\n", countLine(fs))
	for _, f := range fs {
		s := f.Subjects
		fmt.Fprintf(w, "\n## %s: %s\n\n", strings.ToUpper(string(f.Severity)), mdText(f.Title))
		fmt.Fprintln(w, "| | |\n|---|---|")
		row := func(k, v string) { fmt.Fprintf(w, "| %s | %s |\n", k, v) }
		row("detector", code(f.Detector))
		row("cluster", code(f.Cluster))
		row("id", code(f.ID))
		row("confidence", fmt.Sprintf("%.2f", f.Confidence))
		row("seen", stamp(f.FirstSeen)+" to "+stamp(f.LastSeen))
		if s.User != "" || s.UserAgent != "" {
			row("client", code(s.User)+", user agent "+code(s.UserAgent)+ifSet(", from ", code(s.SourceIP)))
		}
		if s.Resource != "" {
			row("resource", code(groupResource(s.APIGroup, s.Resource))+ifSet(" in namespace ", code(s.Namespace))+
				" at resourceVersion "+code(s.ResourceVersion)+ifSet(" (before: ", code(s.PreviousResourceVersion), ")"))
		} else if s.ResourceVersion != "" || s.PreviousResourceVersion != "" {
			row("resourceVersion", code(s.ResourceVersion)+ifSet(" (before: ", code(s.PreviousResourceVersion), ")"))
		}
		if s.WatchRestarts > 0 || s.Iterations > 0 {
			row("watch restarts / iterations", fmt.Sprintf("%d / %d", s.WatchRestarts, s.Iterations))
		}
		fmt.Fprintf(w, "\n%s\n", mdText(f.Summary))
		if len(f.Objects) > 0 {
			var objs []string
			for _, o := range f.Objects {
				objs = append(objs, code(o.String()))
			}
			fmt.Fprintf(w, "\n**Objects (%d):** %s\n", len(f.Objects), strings.Join(objs, ", "))
		}
		fmt.Fprintf(w, "\n**Remediation.** %s\n", mdText(f.Remediation))
		fmt.Fprintf(w, "\n<details><summary>Evidence (%d events)</summary>\n\n", len(f.Evidence))
		fmt.Fprintln(w, "| time | role | verb | object | user | code | audit ID | after watch |\n|---|---|---|---|---|---|---|---|")
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s | %s |\n", e.Time.Format("2006-01-02T15:04:05.000000Z"), e.Role, code(e.Verb),
				code(objectOf(e)), code(e.User), e.Code, code(e.AuditID), code(e.WatchAuditID))
		}
		fmt.Fprintln(w, "\n</details>")
	}
}

func countLine(fs []Finding) string {
	n := map[Severity]int{}
	for _, f := range fs {
		n[f.Severity]++
	}
	var parts []string
	for _, s := range []Severity{Critical, Warning, Info} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
		}
	}
	return fmt.Sprintf("%d %s: %s", len(fs), Plural(len(fs), "finding", "findings"), strings.Join(parts, ", "))
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func ifSet(prefix, v string, suffix ...string) string {
	if v == "" || v == "``" {
		return ""
	}
	return prefix + v + strings.Join(suffix, "")
}

func ifCount(prefix string, n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s%d", prefix, n)
}

func groupResource(group, res string) string {
	if group == "" {
		return res
	}
	return res + "." + group
}

// objectOf names the object or collection an evidence event is about,
// with the resourceVersion it shows.
func objectOf(e Evidence) string {
	s := e.Resource
	switch {
	case e.Namespace != "" && e.Name != "":
		s += " " + e.Namespace + "/" + e.Name
	case e.Name != "":
		s += " " + e.Name
	case e.Namespace != "":
		s += " in " + e.Namespace
	}
	if e.ResourceVersion != "" {
		s += " rv=" + e.ResourceVersion
	}
	return s
}

// wrap writes text in lines of at most width columns, each indented.
func wrap(w io.Writer, text, indent string, width int) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		fmt.Fprintln(w, line)
	}
}

// mdEscaper escapes what Markdown would otherwise interpret in text that
// comes from audit events (user names, user agents, object names): an
// event is attacker-controlled.
var mdEscaper = strings.NewReplacer(`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "<", "&lt;", ">", "&gt;",
	"|", `\|`, "#", `\#`, "\n", " ", "\r", " ")

func mdText(s string) string { return mdEscaper.Replace(s) }

// code renders s as inline code in a table cell: no backticks or pipes
// can end it early, no newlines break the row.
func code(s string) string {
	if s == "" {
		return ""
	}
	s = strings.NewReplacer("`", "'", "|", `\|`, "\n", " ", "\r", " ").Replace(s)
	return "`" + s + "`"
}
