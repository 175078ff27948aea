package relist

import (
	"fmt"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect/events"

	"github.com/auditlens/auditlens/detect"
)

// finding builds the finding of one loop from the window's turns and the
// totals of its history.
func (d *Loop) finding(c *relistClient, turns []turn, tot relistHistory) detect.Finding {
	r := c.Reflector
	f := detect.Finding{
		ID:       detect.FindingID(LoopName, r.Cluster, r.User, r.Program, r.Instance, r.APIGroup, r.Resource),
		Detector: LoopName,
		Cluster:  r.Cluster,
		Severity: detect.Warning,
		Subjects: detect.Subjects{User: r.User, UserAgent: tot.UserAgent, Resource: r.Resource, APIGroup: r.APIGroup,
			Iterations: tot.Turns},
	}
	if len(tot.Instances) == 1 {
		f.Subjects.SourceIP = tot.Instances[0]
	}
	if len(tot.Scopes) == 1 {
		t := turns[len(turns)-1].row
		f.Subjects.Namespace, f.Subjects.LabelSelector, f.Subjects.FieldSelector = t.Namespace, t.LabelSelector, t.FieldSelector
	}
	for _, t := range turns {
		f.Evidence = append(f.Evidence, t.watch, t.relist)
	}
	f.Normalize()
	f.FirstSeen, f.LastSeen = tot.FirstSeen, tot.LastSeen
	for _, e := range f.Evidence {
		if f.FirstSeen.IsZero() || e.Time.Before(f.FirstSeen) {
			f.FirstSeen = e.Time
		}
		if e.Time.After(f.LastSeen) {
			f.LastSeen = e.Time
		}
	}
	st := loopStats{Durations: tot.Durations, Instances: tot.Instances, Scopes: tot.Scopes}
	d.stats.Store(f.ID, st)
	d.describe(&f, st)
	return f
}

// loopStats is what a loop's text says beyond its subjects and evidence.
type loopStats struct {
	Durations durations
	Instances []string
	Scopes    []string
}

// turnCount counts the turns a finding's evidence shows (a floor: the
// remembered history counts more).
func turnCount(ev []detect.Evidence) int {
	n := 0
	for _, e := range ev {
		if e.Role == RoleShortWatch {
			n++
		}
	}
	return n
}

// Merge implements Merger: the generic merge, then the turns and text
// from the merged evidence and the latest evaluation's figures.
func (d *Loop) Merge(prev, next detect.Finding) detect.Finding {
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Normalize()
	f.Subjects.Iterations = max(turnCount(f.Evidence), prev.Subjects.Iterations, next.Subjects.Iterations)
	st, _ := d.stats.Load(next.ID)
	if prev.Subjects.SourceIP != next.Subjects.SourceIP {
		st.Instances = detect.MergeStrings(st.Instances, []string{prev.Subjects.SourceIP, next.Subjects.SourceIP})
		f.Subjects.SourceIP = ""
	}
	d.describe(&f, st)
	return f
}

// describe sets the severity, confidence, title, summary and remediation
// of a loop's finding.
func (d *Loop) describe(f *detect.Finding, st loopStats) {
	s := &f.Subjects
	s.Iterations = max(s.Iterations, turnCount(f.Evidence))
	prog := events.ProgramName(s.UserAgent, s.User)
	lasted := f.LastSeen.Sub(f.FirstSeen)

	f.Severity = detect.Warning
	if lasted >= d.cfg.CriticalAfter {
		f.Severity = detect.Critical
	}
	// Three turns make a loop (0.7); each further turn adds a little, up
	// to 0.95.
	f.Confidence = detect.Round2(min(0.7+0.05*float64(max(s.Iterations-d.cfg.MinTurns, 0)), 0.95))

	f.Title = fmt.Sprintf("%s relists %s over and over: %d watches ended within seconds, each followed by a relist",
		prog, s.Resource, s.Iterations)

	var b strings.Builder
	fmt.Fprintf(&b, "%s (user %s, user agent %q", prog, s.User, s.UserAgent)
	switch n := len(st.Instances); {
	case s.SourceIP != "":
		fmt.Fprintf(&b, ", from %s", s.SourceIP)
	case n > 1:
		fmt.Fprintf(&b, ", %d instances: %s", n, strings.Join(st.Instances, ", "))
	}
	fmt.Fprintf(&b, ") relisted %s %d times between %s and %s", s.Resource, s.Iterations,
		f.FirstSeen.Format(time.RFC3339), f.LastSeen.Format(time.RFC3339))
	if s.Iterations > 1 && lasted > 0 {
		fmt.Fprintf(&b, " (one relist every %s on average)", roundDuration(lasted/time.Duration(s.Iterations-1)))
	}
	if len(st.Scopes) > 1 || len(st.Scopes) == 1 && st.Scopes[0] != "" {
		fmt.Fprintf(&b, ", in %s", scopeList(st.Scopes))
	}
	b.WriteString(". Each time its watch ended ")
	if st.Durations.N > 0 {
		fmt.Fprintf(&b, "after %s (from %s to %s) ", roundDuration(st.Durations.mean()),
			roundDuration(time.Duration(st.Durations.Min)*time.Microsecond), roundDuration(time.Duration(st.Durations.Max)*time.Microsecond))
	} else {
		b.WriteString("within seconds ")
	}
	fmt.Fprintf(&b, "instead of running for its timeout (5–10 minutes), and its next request listed the whole collection again. "+
		"This is the \"too old resource version\" loop: the apiserver answers a watch from a resourceVersion it no longer holds "+
		"with 410 Expired inside the stream (the audit log shows 200), the reflector relists and watches from the list's "+
		"resourceVersion, and that one is already too old again. Every turn is a full list of %s served by the apiserver "+
		"(from etcd when the resourceVersion has left the watch cache) and a cache rebuilt in %s. Likely causes: the watch "+
		"cache of %s is too small for its event rate, or etcd compacts faster than the client keeps up; a proxy or load "+
		"balancer between %s and the apiservers that cuts or replays watches; an apiserver whose cache lags behind the "+
		"others, a restored etcd, or clock and resourceVersion bugs in the client.", s.Resource, prog, s.Resource, prog)
	if f.Severity == detect.Critical {
		fmt.Fprintf(&b, " It has gone on for %s: it will not heal by itself.", roundDuration(lasted))
	}
	f.Summary = b.String()
	f.Remediation = "Find what ends the watches. Raise the watch cache of " + s.Resource + " on every kube-apiserver " +
		"(--watch-cache-sizes=" + s.Resource + "#<size>, or --default-watch-cache-size) so that a resourceVersion stays " +
		"servable for longer than a list takes; check etcd's compaction (kube-apiserver --etcd-compaction-interval, etcd " +
		"--auto-compaction-retention) against how long the client's lists take; check the idle and stream timeouts of " +
		"proxies and load balancers between " + prog + " and the apiservers (they must outlast a watch, 5–10 minutes); " +
		"upgrade the client to a client-go with watch bookmarks (1.15+, they keep an idle watch's resourceVersion fresh) " +
		"and watch-list (WatchListClient, 1.32+: a relist streamed from the watch cache instead of a full list). Then " +
		"restart " + prog + " if it does not recover by itself."
}

func scopeList(scopes []string) string {
	var parts []string
	for _, s := range scopes {
		if s == "" {
			s = "the whole collection"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// roundDuration shows a duration to a sensible precision.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
