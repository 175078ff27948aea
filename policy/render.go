package policy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Formats are the output formats of Render.
var Formats = []string{"text", "json"}

// Render writes a report in format: "text" (for a terminal) or "json". name
// names the policy (its file) in the text.
func Render(w io.Writer, format, name string, rep Report) error {
	bw := bufio.NewWriter(w)
	switch format {
	case "json":
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("encoding the report: %w", err)
		}
	case "text":
		renderText(bw, name, rep)
	default:
		return fmt.Errorf("output format %q: want %s", format, strings.Join(Formats, " or "))
	}
	return bw.Flush()
}

func renderText(w *bufio.Writer, name string, rep Report) {
	fmt.Fprintf(w, "Audit policy %s (%s, %d rules)\n", name, rep.APIVersion, rep.Rules)
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	var verdicts []string
	for _, d := range rep.Detectors {
		fmt.Fprintf(w, "\n%s: %s\n", d.Detector, strings.ToUpper(string(d.Verdict)))
		for _, n := range d.Needs {
			title := n.Title
			if n.Any {
				title += " (any one suffices)"
			}
			if n.Met {
				fmt.Fprintf(w, "  [ok] %s\n", title)
			} else {
				fmt.Fprintf(w, "  [MISSING, %s the detector] %s\n", n.Effect, title)
			}
			for _, p := range n.Probes {
				if p.Seen {
					fmt.Fprintf(w, "       seen    %s: %s at %s, by %s\n", p.Probe, p.Level, stageList(p.Stages), shortRule(p))
				} else {
					fmt.Fprintf(w, "       hidden  %s: %s\n", p.Probe, p.Reason)
				}
			}
			if n.Met {
				continue
			}
			fmt.Fprintf(w, "       The detector reads: %s.\n", n.Why)
			fmt.Fprintf(w, "       When hidden: %s.\n", n.Loss)
			fmt.Fprintln(w, "       Fix:")
			for _, line := range strings.Split(n.Fix, "\n") {
				fmt.Fprintf(w, "         %s\n", line)
			}
		}
		verdicts = append(verdicts, d.Detector+" "+string(d.Verdict))
	}
	if len(rep.Sensitive) > 0 {
		fmt.Fprintf(w, "\nSensitive content: WARNING, the policy records bodies that hold secrets (%d):\n", len(rep.Sensitive))
		for _, e := range rep.Sensitive {
			fmt.Fprintf(w, "  - %s\n", e)
		}
		fmt.Fprintln(w, "  Audit events are copied to auditlens and every reader of its store: no detector reads these bodies.")
		fmt.Fprintln(w, "  Fix: put first in rules (or level None to drop these requests):")
		for _, line := range strings.Split(rep.SensitiveFix, "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	} else {
		fmt.Fprintln(w, "\nSensitive content: ok, no body of Secrets, ConfigMaps, service-account tokens, TokenReviews or SubjectAccessReviews is recorded.")
	}
	fmt.Fprintf(w, "\nResult: %s.", strings.Join(verdicts, ", "))
	if rep.Blinded {
		fmt.Fprint(w, " A blinded detector cannot find what it exists for under this policy.")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Level Metadata is enough for every request above except a Service write's response object:"+
		" a watch's or list's resourceVersion is in its requestURI, and responseStatus is recorded at every level but None.")
}

// shortRule names the deciding rule (hidden probes describe it in full).
func shortRule(p ProbeResult) string {
	if p.Rule < 0 {
		return "no rule"
	}
	return fmt.Sprintf("rules[%d]", p.Rule)
}
