package watchloop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
)

// watchLoopID is the ID of the watch-loop finding of one reflector: its
// cluster, client (user, program, and the apiserver instance of a loopback
// client) and what it watches. watch-rv-regression names the loop its
// regressions belong to by it.
func watchLoopID(cluster, user, program, instance, apiGroup, resource, namespace, labelSelector, fieldSelector string) string {
	return detect.FindingID(Name, cluster, user, program, instance, apiGroup, resource, namespace, labelSelector, fieldSelector)
}

// finding builds the finding of one loop from the window's evidence and
// the totals of its history.
func (d *WatchLoop) finding(ctx context.Context, q detect.Querier, w detect.Window, c *candidate, tot history, hd *head) (detect.Finding, error) {
	r := c.Reflector
	cl := c.Client()
	f := detect.Finding{
		ID:       watchLoopID(r.Cluster, r.User, r.Program, r.Instance, r.APIGroup, r.Resource, r.Namespace, r.LabelSelector, r.FieldSelector),
		Detector: Name,
		Cluster:  r.Cluster,
		Severity: detect.Critical,
		Subjects: detect.Subjects{
			User: r.User, UserAgent: tot.UserAgent, Resource: r.Resource, APIGroup: r.APIGroup,
			StaleRVs: slices.Clone(tot.StaleRVs),
			SourceIP: cl.SourceIP, Namespace: r.Namespace, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
			WatchRestarts: tot.Restarts, Iterations: tot.Iterations,
		},
		Objects: slices.Clone(tot.Victims),
	}
	if hd != nil {
		f.Subjects.APIServers = slices.Clone(hd.APIServers)
	}
	if len(tot.StaleRVs) > 0 {
		f.Subjects.ResourceVersion = tot.StaleRVs[0].RV
	}
	for i, ws := range c.Watches {
		if b := c.burstOf[i]; b >= 0 && c.inLoop[b] {
			f.Evidence = append(f.Evidence, ws.Evidence(cl, ws.RV, RoleStaticWatch))
		}
	}
	for _, a := range c.deletes {
		if !c.inLoop[c.burstOf[a.watch]] {
			continue
		}
		watchID := c.Watches[a.watch].AuditID
		rows := []struct {
			row  events.Row
			role string
		}{{a.del, d.deleteRole()}}
		if a.create != nil {
			rows = append(rows, struct {
				row  events.Row
				role string
			}{*a.create, d.createRole()})
		}
		for _, e := range rows {
			ev := e.row.Evidence(e.role, e.row.ResponseRV)
			ev.WatchAuditID = watchID
			f.Evidence = append(f.Evidence, ev)
		}
		f.Objects = append(f.Objects, detect.Object{Resource: d.cfg.ChurnResource, Namespace: a.del.Namespace, Name: a.del.Name})
	}
	if adv := tot.Advance; adv != nil {
		// The request that proved the cluster past the static
		// resourceVersion may be from an earlier window.
		aw := detect.Window{Since: adv.Time.Add(-time.Minute), Until: adv.Time.Add(time.Minute)}
		rows, err := events.Select(ctx, q, aw, r.Cluster, []string{adv.AuditID})
		if err != nil {
			return detect.Finding{}, err
		}
		if e, ok := events.FirstStage(rows[adv.AuditID]); ok {
			f.Evidence = append(f.Evidence, e.Evidence(RoleRVAdvanced, adv.RV))
		}
	}
	f.Normalize()
	f.FirstSeen, f.LastSeen = tot.FirstSeen, tot.LastSeen
	for _, e := range f.Evidence {
		if e.Role == RoleRVAdvanced {
			continue
		}
		if f.FirstSeen.IsZero() || e.Time.Before(f.FirstSeen) {
			f.FirstSeen = e.Time
		}
		if e.Time.After(f.LastSeen) {
			f.LastSeen = e.Time
		}
	}
	d.describe(&f)
	return f, nil
}

// loopCounts recomputes the restarts and iterations a finding's evidence
// shows (a floor for the counts: the remembered history counts more).
func (d *WatchLoop) loopCounts(ev []detect.Evidence) (restarts, iterations int) {
	var times []time.Time
	var ids []string
	followed := map[string]bool{}
	for _, e := range ev {
		switch e.Role {
		case RoleStaticWatch:
			times = append(times, e.Time)
			ids = append(ids, e.AuditID)
		case d.deleteRole():
			followed[e.WatchAuditID] = true
		}
	}
	burstOf, n := events.Bursts(times, d.cfg.RetrySpacing)
	seen := map[int]bool{}
	for i, id := range ids {
		if followed[id] {
			seen[burstOf[i]] = true
		}
	}
	return n, len(seen)
}

// Merge implements Merger: the generic merge, then counts, confidence
// and text from the merged evidence.
func (d *WatchLoop) Merge(prev, next detect.Finding) detect.Finding {
	// The proof that the cluster moved past the static resourceVersion
	// is kept from the first evaluation that had one: later windows show
	// ever higher resourceVersions, which would change the finding at
	// every evaluation without telling more.
	if slices.ContainsFunc(prev.Evidence, isAdvance) {
		next.Evidence = slices.DeleteFunc(slices.Clone(next.Evidence), isAdvance)
	}
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Normalize()
	// Thinned evidence undercounts, a window sees part of the history; a
	// count never goes down.
	restarts, iterations := d.loopCounts(f.Evidence)
	f.Subjects.WatchRestarts = max(restarts, prev.Subjects.WatchRestarts, next.Subjects.WatchRestarts)
	f.Subjects.Iterations = max(iterations, prev.Subjects.Iterations, next.Subjects.Iterations)
	f.Subjects.APIServers = detect.MergeStrings(prev.Subjects.APIServers, next.Subjects.APIServers)
	f.Subjects.StaleRVs = detect.MergeStaleRVs(prev.Subjects.StaleRVs, next.Subjects.StaleRVs)
	if len(f.Subjects.StaleRVs) > 0 {
		f.Subjects.ResourceVersion = f.Subjects.StaleRVs[0].RV
	}
	d.describe(&f)
	return f
}

func isAdvance(e detect.Evidence) bool { return e.Role == RoleRVAdvanced }

// describe sets the confidence, title, summary and remediation of a
// finding from its subjects, objects and evidence. The counts are the
// larger of the subjects' (from the remembered history) and what the
// evidence shows.
func (d *WatchLoop) describe(f *detect.Finding) {
	s := &f.Subjects
	restarts, iterations := d.loopCounts(f.Evidence)
	s.WatchRestarts, s.Iterations = max(s.WatchRestarts, restarts), max(s.Iterations, iterations)
	deletes, creates := 0, 0
	top := ""
	for _, e := range f.Evidence {
		switch e.Role {
		case d.deleteRole():
			deletes++
		case d.createRole():
			creates++
		case RoleRVAdvanced:
			if c, ok := detect.CompareRV(e.ResourceVersion, top); top == "" || (ok && c > 0) {
				top = e.ResourceVersion
			}
		}
	}
	prog := events.ProgramName(s.UserAgent, s.User)
	version, affected, known := apiserverAffected(s.APIServers)

	// Confidence: two iterations make a loop (0.7); each further one up to
	// four adds 0.1; a loop that replays at nearly every restart adds a
	// little, and so does an apiserver of an affected version.
	conf := 0.6 + 0.1*float64(min(max(s.Iterations-1, 0), 3))
	if s.WatchRestarts > 0 && float64(s.Iterations) >= 0.8*float64(s.WatchRestarts) {
		conf += 0.05
	}
	if affected {
		conf += 0.04
	}
	f.Confidence = detect.Round2(min(conf, 0.99))

	owner := strings.TrimSuffix(d.cfg.OwnerResource, "s")
	stale := staleList(s)
	f.Title = fmt.Sprintf("%s re-watches %s from stale %s; %d %s deleted and re-created after its restarts",
		prog, s.Resource, staleTitle(s), len(f.Objects), detect.Plural(len(f.Objects), d.cfg.ChurnResource+" object", d.cfg.ChurnResource+" objects"))

	var b strings.Builder
	fmt.Fprintf(&b, "%s (user %s, user agent %q", prog, s.User, s.UserAgent)
	if s.SourceIP != "" {
		fmt.Fprintf(&b, ", from %s", s.SourceIP)
	}
	if len(s.StaleRVs) > 1 {
		fmt.Fprintf(&b, ") restarted its watch of %s %d times from stale resourceVersions between %s and %s, none above one it had "+
			"already resumed from: %s; the resume point drifted as other %ss were deleted while it looped (each DELETE event carried "+
			"the deleted object's old resourceVersion)",
			s.Resource, s.WatchRestarts, f.FirstSeen.Format(time.RFC3339), f.LastSeen.Format(time.RFC3339), stale, strings.TrimSuffix(s.Resource, "s"))
	} else {
		fmt.Fprintf(&b, ") restarted its watch of %s %d times from the same resourceVersion %s between %s and %s",
			s.Resource, s.WatchRestarts, s.ResourceVersion, f.FirstSeen.Format(time.RFC3339), f.LastSeen.Format(time.RFC3339))
	}
	if top != "" {
		fmt.Fprintf(&b, ", although the cluster was already at resourceVersion %s (resourceVersions are etcd revisions, global to the cluster)", top)
	}
	fmt.Fprintf(&b, ". After %d of those restarts, within seconds, %s deleted %s of %ss that nobody had just deleted or created "+
		"(%d %s, %d re-created): %s. ",
		s.Iterations, prog, d.cfg.ChurnResource, owner, deletes, detect.Plural(deletes, "delete", "deletes"), creates, detect.ObjectList(f.Objects, 8))
	fmt.Fprintf(&b, "Each restart from a stale resourceVersion replays the %s events since then: %ss deleted and re-created after it "+
		"vanish from %s's cache, and its endpoints controller deletes their %s as orphans, then re-creates them; the %ss stop "+
		"serving in between, at every restart. ", s.Resource, owner, prog, d.cfg.ChurnResource, owner)
	switch {
	case affected:
		fmt.Fprintf(&b, "The kube-apiserver (%s) is in the range whose watch cache sent DELETE events with the deleted object's "+
			"old resourceVersion (1.7.0–1.7.12, 1.8.0–1.8.7, 1.9.0–1.9.2). ", version)
	case known:
		fmt.Fprintf(&b, "The kube-apiserver (%s) is not in the range with the DELETE-event bug: look for whatever stands between "+
			"%s and the apiservers and rewrites events (a proxy, an aggregated API), or for a client that resumes from an "+
			"old resourceVersion of its own. ", version, prog)
	}
	fmt.Fprintf(&b, "Break the loop now by restarting %s or by touching any %s (see remediation).", prog, owner)
	f.Summary = b.String()
	f.Remediation = loopRemediation(prog, owner)
}

// staleTitle names a loop's stale resourceVersions in a title.
func staleTitle(s *detect.Subjects) string {
	switch n := len(s.StaleRVs); {
	case n <= 1:
		return "resourceVersion " + s.ResourceVersion
	case n <= 4:
		rvs := make([]string, n)
		for i, r := range s.StaleRVs {
			rvs[i] = r.RV
		}
		return "resourceVersions " + strings.Join(rvs, ", ")
	default:
		return fmt.Sprintf("resourceVersions %s, %s and %d more", s.StaleRVs[0].RV, s.StaleRVs[1].RV, n-2)
	}
}

// staleList tells each stale resourceVersion with when the loop resumed
// from it (up to 8).
func staleList(s *detect.Subjects) string {
	var parts []string
	for i, r := range s.StaleRVs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(s.StaleRVs)-8))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d %s, %s to %s)", r.RV, r.Restarts, detect.Plural(r.Restarts, "restart", "restarts"),
			r.First.UTC().Format(time.RFC3339), r.Last.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, ", ")
}

func loopRemediation(prog, owner string) string {
	return "Cause: the watch-cache bug of Kubernetes 1.7.0–1.7.12, 1.8.0–1.8.7 and 1.9.0–1.9.2 (introduced by PR #46223, " +
		"fixed by PR #58547 in 1.10.0 and backported to 1.9.3, 1.8.8 and 1.7.13; issue #58545): a DELETE watch event carried " +
		"the deleted object's old resourceVersion, so a reflector that saw it last resumed its watch from that old " +
		"resourceVersion and replayed history at every restart. Fix: upgrade the kube-apiservers to a fixed version. " +
		"Workarounds that break the loop at once: restart " + prog + " (it relists and resumes from a fresh " +
		"resourceVersion); create any " + owner + "; or touch any " + owner + " (for example `kubectl label " + owner +
		" <name> touched=1`), so that a fresh resourceVersion lands at the end of the " + owner + " event stream. " +
		"Workarounds that do not help: deleting pods or deployments (they do not touch the " + owner + " event stream). " +
		"Other rarely-changing resources (ConfigMaps, Secrets) loop the same way: apps with config hot-reload restart " +
		"repeatedly, and controller logs show \"watch of *v1.ConfigMap ended with: too old resource version\"."
}

// apiserverAffected reads the kube-apiservers' versions from their own
// user agents ("kube-apiserver/v1.9.2 …"), as seen in the cluster's feed:
// the bug is the apiserver's, whatever the client's version. version lists
// them; affected is true when one is in the affected range; known when at
// least one version was read.
func apiserverAffected(userAgents []string) (version string, affected, known bool) {
	var vers []string
	for _, ua := range userAgents {
		if events.ProgramName(ua, "") != "kube-apiserver" {
			continue
		}
		v, aff := affectedVersion(ua)
		if v == "" {
			continue
		}
		vers = append(vers, v)
		known = true
		affected = affected || aff
	}
	slices.Sort(vers)
	return strings.Join(slices.Compact(vers), ", "), affected, known
}

// affectedVersion returns the version in a Kubernetes component's user
// agent and whether it is in a range affected by the DELETE-event bug:
// 1.7.0–1.7.12, 1.8.0–1.8.7, 1.9.0–1.9.2.
func affectedVersion(userAgent string) (string, bool) {
	_, rest, ok := strings.Cut(userAgent, "/")
	if !ok {
		return "", false
	}
	ver, _, _ := strings.Cut(rest, " ")
	var major, minor, patch int
	if n, _ := fmt.Sscanf(strings.TrimPrefix(ver, "v"), "%d.%d.%d", &major, &minor, &patch); n != 3 || major != 1 {
		return ver, false
	}
	switch minor {
	case 7:
		return ver, patch <= 12
	case 8:
		return ver, patch <= 7
	case 9:
		return ver, patch <= 2
	}
	return ver, false
}
