package heartbeatloss

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"

	"github.com/auditlens/auditlens/internal/heartbeat"
)

// Evidence caps per evaluation: a wave over a large cluster evicts
// thousands of pods and relists as many times; the counts stay exact
// (Subjects.PodsEvicted), the evidence keeps a sample.
const (
	maxEvictionEvidence = 400
	maxRelistEvidence   = 200
	maxPodObjects       = 1000
)

// finding builds the finding of one wave: the nodes' heartbeats around
// their gaps that the span holds, and the consequences.
func (e *hbEval) finding(ctx context.Context, wv *hbWave) (detect.Finding, error) {
	head := e.heads[wv.Cluster]
	spanSince := e.span.Since.UnixMicro()
	f := detect.Finding{
		ID: wv.ID, Detector: Name, Cluster: wv.Cluster,
		FirstSeen: detect.Micros(wv.Start), LastSeen: detect.Micros(wv.Last),
		Subjects: detect.Subjects{Resource: "nodes", NodesLost: len(wv.Members), NodesSeen: max(wv.Seen, len(wv.Members))},
	}
	var keys []string
	role := map[string]string{}
	waveEnd := wv.Start
	byNode := map[string]*hbLoss{}
	var names []string
	for _, m := range wv.Members {
		byNode[m.Node] = m
		names = append(names, m.Node)
		f.Objects = append(f.Objects, detect.Object{Resource: "nodes", Name: m.Node})
		waveEnd = max(waveEnd, m.end(head))
		if m.From >= spanSince {
			k := m.Node + "/" + strconv.FormatInt(m.From, 10)
			keys, role[k] = append(keys, k), RoleLastHeartbeat
		}
		if m.To >= spanSince && m.To > 0 {
			k := m.Node + "/" + strconv.FormatInt(m.To, 10)
			keys, role[k] = append(keys, k), RoleHeartbeatResumed
		}
	}
	rows, err := selectBoundaries(ctx, e.q, wv.Cluster, keys)
	if err != nil {
		return detect.Finding{}, err
	}
	for _, k := range keys {
		if r, ok := events.FirstStage(rows[k]); ok {
			f.Evidence = append(f.Evidence, r.Evidence(role[k], r.ResponseRV))
		}
	}

	since := max(wv.Start, spanSince)
	until := min(e.w.Until.UnixMicro(), waveEnd+usIn(e.d.cfg.After))
	if since < until {
		slices.Sort(names)
		cons, err := e.d.selectConsequences(ctx, e.q, detect.Window{Since: detect.Micros(since), Until: detect.Micros(until)}, wv.Cluster, names)
		if err != nil {
			return detect.Finding{}, err
		}
		evicted := map[detect.Object]bool{}
		relists := 0
		for _, c := range cons {
			var role string
			kubelet := strings.HasPrefix(c.User, heartbeat.UserPrefix)
			switch {
			case !kubelet && c.Resource == "nodes" && c.Sub == "status":
				role = RoleNotReady
			case !kubelet && c.Resource == "nodes":
				role = RoleTaint
			case !kubelet && c.Resource == "pods":
				role = RoleEviction
				o := detect.Object{Resource: "pods", Namespace: c.Namespace, Name: c.Name}
				if evicted[o] {
					continue
				}
				evicted[o] = true
				if len(evicted) <= maxPodObjects {
					f.Objects = append(f.Objects, o)
				}
				if len(evicted) > maxEvictionEvidence {
					continue
				}
			default:
				m := byNode[strings.TrimPrefix(c.User, heartbeat.UserPrefix)]
				if m == nil || m.To == 0 || c.TS < m.To-m.Interval || c.TS > m.To+usIn(e.d.cfg.After) {
					continue
				}
				if relists++; relists > maxRelistEvidence {
					continue
				}
				role = detect.RoleRelist
			}
			f.Evidence = append(f.Evidence, c.Evidence(role, ""))
		}
		f.Subjects.PodsEvicted = len(evicted)
		active, err := selectAnyRequest(ctx, e.q, detect.Window{Since: detect.Micros(since), Until: detect.Micros(until)}, wv.Cluster, e.d.cfg.LifecycleUsers)
		if err != nil {
			return detect.Finding{}, err
		}
		f.Subjects.LifecycleActive = active
	}
	f.Normalize()
	e.d.describe(&f)
	return f, nil
}

// feedGapFindings reports the silences of a cluster's audit feed that
// explain at least MinNodes nodes' heartbeat gaps: feed health, not
// heartbeat loss.
func (e *hbEval) feedGapFindings(cluster string, losses []*hbLoss, nodes map[string]*hbNode) []detect.Finding {
	bySilence := map[[2]int64][]*hbLoss{}
	for _, l := range losses {
		bySilence[l.silence] = append(bySilence[l.silence], l)
	}
	var out []detect.Finding
	for s, ls := range bySilence {
		if len(ls) < e.d.cfg.MinNodes {
			continue
		}
		seen := 0
		for _, n := range nodes {
			if n.FirstT < s[0] {
				seen++
			}
		}
		from, to := detect.Micros(s[0]), detect.Micros(s[1])
		f := detect.Finding{
			ID:       detect.FindingID(Name, cluster, "feed-gap", from.Format(time.RFC3339Nano)),
			Detector: Name, Cluster: cluster, Severity: detect.Info, Confidence: 0.9,
			FirstSeen: from, LastSeen: to,
			Subjects: detect.Subjects{Resource: "nodes", NodesSeen: seen},
			Title: fmt.Sprintf("Audit feed gap: no events at all from cluster %s for %s (not a heartbeat loss)",
				cluster, to.Sub(from).Round(time.Second)),
			Summary: fmt.Sprintf("Between %s and %s auditlens holds no event at all from cluster %s: not one request of any "+
				"client. The heartbeats of %d of the %d nodes seen before are missing over the same stretch, but so is "+
				"everything else, so the gap says nothing about the nodes: the audit feed itself stopped (the apiservers "+
				"did not send, or auditlens did not receive or store). Check the audit pipeline for that time. "+
				"An apiserver that stalled or restarted (a single control plane) looks the same: then nobody, not only the "+
				"kubelets, was served.", from.Format(time.RFC3339), to.Format(time.RFC3339), cluster,
				len(ls), max(seen, len(ls))),
			Remediation: "Check the audit pipeline over the gap: the kube-apiservers' audit webhook backend (its logs: " +
				"\"Error in audit plugin 'webhook'\", dropped batches when its buffer of 10000 events fills; " +
				"apiserver_audit_error_total), the network and load balancer between the apiservers and auditlens, and " +
				"auditlens's own receiver (its ingest metrics and spool). With --audit-webhook-mode=batch the apiserver " +
				"retries a batch for a few minutes and then drops it: a longer outage loses events for good; the log " +
				"backend (--audit-log-path) on the apiservers keeps a copy that `auditlens import` can fill the gap from.",
		}
		f.Normalize()
		out = append(out, f)
	}
	return out
}

// Merge implements Merger: the generic merge, then the counts, severity
// and text from the merged evidence and subjects.
func (d *HeartbeatLoss) Merge(prev, next detect.Finding) detect.Finding {
	f := detect.Merge(prev, next, d.cfg.MaxEvidence)
	f.Normalize()
	f.Subjects.NodesLost = max(prev.Subjects.NodesLost, next.Subjects.NodesLost)
	f.Subjects.NodesSeen = max(prev.Subjects.NodesSeen, next.Subjects.NodesSeen)
	f.Subjects.PodsEvicted = max(prev.Subjects.PodsEvicted, next.Subjects.PodsEvicted)
	f.Subjects.LifecycleActive = prev.Subjects.LifecycleActive || next.Subjects.LifecycleActive
	if !strings.HasPrefix(next.Title, "Audit feed gap") {
		d.describe(&f)
	}
	return f
}

// describe sets a wave's counts, severity, confidence, title, summary and
// remediation from its subjects, objects and evidence.
func (d *HeartbeatLoss) describe(f *detect.Finding) {
	s := &f.Subjects
	var nodes []string
	for _, o := range f.Objects {
		if o.Resource == "nodes" {
			nodes = append(nodes, o.Name)
		}
	}
	s.NodesLost = max(s.NodesLost, len(nodes))
	s.NodesSeen = max(s.NodesSeen, s.NodesLost)
	back := map[string]time.Time{}
	notReady, tainted := map[string]bool{}, map[string]bool{}
	evictions, relists := 0, 0
	for _, e := range f.Evidence {
		switch e.Role {
		case RoleHeartbeatResumed:
			if t, ok := back[e.Name]; !ok || e.Time.Before(t) {
				back[e.Name] = e.Time
			}
		case RoleNotReady:
			notReady[e.Name] = true
		case RoleTaint:
			tainted[e.Name] = true
		case RoleEviction:
			evictions++
		case detect.RoleRelist:
			relists++
		}
	}
	pods := 0
	for _, o := range f.Objects {
		if o.Resource == "pods" {
			pods++
		}
	}
	s.PodsEvicted = max(s.PodsEvicted, evictions, pods)
	share := float64(s.NodesLost) / float64(max(s.NodesSeen, 1))

	reacted := len(notReady) > 0 || len(tainted) > 0 || s.PodsEvicted > 0
	if !reacted && s.LifecycleActive && f.LastSeen.Sub(f.FirstSeen) > d.cfg.ReactWithin {
		d.describeUnconfirmed(f, share)
		return
	}
	switch {
	case s.PodsEvicted > 0:
		f.Severity = detect.Critical
	case share >= d.cfg.WarnShare:
		f.Severity = detect.Warning
	default:
		f.Severity = detect.Info
	}
	conf := 0.6
	if len(notReady) > 0 || len(tainted) > 0 {
		conf += 0.2
	}
	if share >= 0.5 {
		conf += 0.1
	}
	if relists > 0 || s.PodsEvicted > 0 {
		conf += 0.05
	}
	f.Confidence = detect.Round2(min(conf, 0.95))

	start := f.FirstSeen
	f.Title = fmt.Sprintf("Heartbeat loss: %d of %d nodes (%d%%) stopped reaching the apiserver at %s while the rest of the cluster went on",
		s.NodesLost, s.NodesSeen, int(share*100+0.5), start.Format(time.RFC3339))
	if s.PodsEvicted > 0 {
		f.Title += fmt.Sprintf("; %d %s evicted", s.PodsEvicted, detect.Plural(s.PodsEvicted, "pod", "pods"))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "From %s, %d of the %d nodes seen heartbeating before (%d%%) sent no heartbeat — no Lease renewal in "+
		"kube-node-lease, no node status — and no other request, while other clients' requests kept arriving: %s. ",
		start.Format(time.RFC3339), s.NodesLost, s.NodesSeen, int(share*100+0.5), detect.ObjectList(nodeObjects(f.Objects), 12))
	var last time.Time
	for _, t := range back {
		last = later(last, t)
	}
	switch {
	case len(back) == 0:
		fmt.Fprintf(&b, "None had come back by %s (%s after the first loss). ", f.LastSeen.Format(time.RFC3339),
			f.LastSeen.Sub(start).Round(time.Second))
	case len(back) < s.NodesLost:
		fmt.Fprintf(&b, "%d came back (%s); %d had not by %s (%s after the first loss). ", len(back),
			comebacks(back, start), s.NodesLost-len(back), f.LastSeen.Format(time.RFC3339), f.LastSeen.Sub(start).Round(time.Second))
	default:
		fmt.Fprintf(&b, "All came back within %s, the last at %s (%s). ", last.Sub(start).Round(time.Second),
			last.Format(time.RFC3339), comebacks(back, start))
	}
	if len(notReady) > 0 || len(tainted) > 0 {
		fmt.Fprintf(&b, "The node-lifecycle controller marked %d of them NotReady/Unknown and tainted %d "+
			"(node.kubernetes.io/unreachable, removed on return). ", len(notReady), len(tainted))
	}
	if s.PodsEvicted > 0 {
		fmt.Fprintf(&b, "%d %s deleted or evicted by the node-lifecycle and taint-eviction controllers during the wave. ",
			s.PodsEvicted, detect.Plural(s.PodsEvicted, "pod was", "pods were"))
	}
	if relists > 0 {
		fmt.Fprintf(&b, "Returning kubelets relisted %d times within %s of coming back. ", relists, d.cfg.After)
	}
	b.WriteString("Many kubelets going silent at one moment while the apiserver keeps serving everyone else is the " +
		"signature of their connections being cut between them and the apiserver — typically a load balancer failover " +
		"that silently dropped established connections, each kubelet's single HTTP/2 connection hanging until the " +
		"kernel gave up on it (see remediation).")
	f.Summary = b.String()
	f.Remediation = heartbeatRemediation
}

// describeUnconfirmed describes a wave the node-lifecycle controller did
// not react to although it was active.
func (d *HeartbeatLoss) describeUnconfirmed(f *detect.Finding, share float64) {
	s := &f.Subjects
	f.Severity, f.Confidence = detect.Info, 0.4
	start := f.FirstSeen
	f.Title = fmt.Sprintf("Heartbeats of %d of %d nodes (%d%%) missing from %s, but the node-lifecycle controller did not react: "+
		"part of the audit feed lost?", s.NodesLost, s.NodesSeen, int(share*100+0.5), start.Format(time.RFC3339))
	f.Summary = fmt.Sprintf("From %s, the audit log holds no heartbeat and no other request of %d of the %d nodes seen before: %s. "+
		"Other clients' requests kept arriving, among them the node-lifecycle controller's (%s), yet in %s it marked none of "+
		"these nodes NotReady, tainted none and evicted nothing — with its default grace period (40–50 s) it reacts within a "+
		"minute. The controller reads the nodes' Leases from etcd, so they were most likely renewed all along and only their "+
		"audit events are missing: an apiserver whose audit backend stopped delivering (in an HA control plane, the kubelets "+
		"connected to it vanish together), or a policy change that stopped logging them. If the controller's node writes are "+
		"not logged at all, this can be a real heartbeat loss: check `auditlens policy check`.",
		start.Format(time.RFC3339), s.NodesLost, s.NodesSeen, detect.ObjectList(nodeObjects(f.Objects), 12),
		strings.Join(d.cfg.LifecycleUsers, " or "), f.LastSeen.Sub(start).Round(time.Second))
	f.Remediation = "Check the audit pipeline of each kube-apiserver for that time (apiserver_audit_error_total, " +
		"\"Error in audit plugin\" in its log, auditlens's ingest metrics per apiserver) and whether the audit policy changed. " +
		"If the nodes really were cut off, see the heartbeat-loss remediation: " + heartbeatRemediation
}

const heartbeatRemediation = "Cause (seed 004): the kubelets reach the apiserver through a load balancer whose failover " +
	"silently dropped their established connections (no RST). A kubelet sends everything over one HTTP/2 connection, " +
	"and without HTTP/2 health checks it keeps writing into the dead connection until the kernel gives up on it " +
	"(net.ipv4.tcp_retries2: about 15 minutes), so the node's Lease and status go stale and the node-lifecycle " +
	"controller marks it NotReady, taints it node.kubernetes.io/unreachable and evicts its pods after the toleration " +
	"(300 s by default). Restarting the kubelet opens a new connection and ends it at once. Kubernetes once closed all " +
	"connections when heartbeats failed (PR #63492, 1.10.3), then lost it (the closeAllConns regression, fixed in 1.14); " +
	"see kubernetes#48638, #41916 and client-go#374. Fix: run kubelets of a version with the fix and HTTP/2 health " +
	"checks (client-go pings idle HTTP/2 connections and drops dead ones since 1.19: HTTP2_READ_IDLE_TIMEOUT_SECONDS, " +
	"HTTP2_PING_TIMEOUT_SECONDS), or set DISABLE_HTTP2 for the kubelet; lower net.ipv4.tcp_retries2 and the TCP " +
	"keepalive settings on nodes. Protect the workloads: kube-controller-manager's --node-monitor-grace-period (how long " +
	"before NotReady), --unhealthy-zone-threshold and --large-cluster-size-threshold (a zone with most nodes NotReady " +
	"is treated as a disruption and evictions slow or stop), --node-eviction-rate and --secondary-node-eviction-rate, " +
	"and pods' tolerationSeconds for node.kubernetes.io/unreachable. Check the load balancer: its failover must keep " +
	"connection state (or reset connections so clients reconnect), and its health checks and logs at the wave's start."

func nodeObjects(objs []detect.Object) []detect.Object {
	var out []detect.Object
	for _, o := range objs {
		if o.Resource == "nodes" {
			out = append(out, o)
		}
	}
	return out
}

// comebacks says when the nodes came back after start: the first and
// the last, or the one.
func comebacks(back map[string]time.Time, start time.Time) string {
	names := slices.Sorted(maps.Keys(back))
	slices.SortStableFunc(names, func(a, b string) int { return back[a].Compare(back[b]) })
	first, last := names[0], names[len(names)-1]
	if first == last {
		return fmt.Sprintf("%s after %s", first, back[first].Sub(start).Round(time.Second))
	}
	return fmt.Sprintf("the first, %s, after %s; the last, %s, after %s", first, back[first].Sub(start).Round(time.Second),
		last, back[last].Sub(start).Round(time.Second))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// loadWaves reads the remembered waves of the window's clusters.
func (d *HeartbeatLoss) loadWaves(ctx context.Context, st detect.StateStore, w detect.Window) ([]*hbWave, error) {
	if st == nil {
		return nil, nil
	}
	recs, err := st.LoadState(ctx, Name, w.Clusters, w.Since.Add(-d.cfg.Remember))
	if err != nil {
		return nil, err
	}
	var out []*hbWave
	for _, r := range recs {
		var wv hbWave
		if err := json.Unmarshal(r.Body, &wv); err != nil {
			return nil, fmt.Errorf("decoding remembered heartbeat-loss wave %s of cluster %s: %w", r.Key, r.Cluster, err)
		}
		if wv.ID != r.Key || wv.Cluster != r.Cluster {
			continue // not what this version of the detector wrote
		}
		out = append(out, &wv)
	}
	return out, nil
}

// saveWaves stores the waves that changed.
func (d *HeartbeatLoss) saveWaves(ctx context.Context, st detect.StateStore, waves []*hbWave) error {
	if st == nil || len(waves) == 0 {
		return nil
	}
	recs := make([]detect.StateRecord, 0, len(waves))
	for _, wv := range waves {
		body, err := json.Marshal(wv)
		if err != nil {
			return err
		}
		recs = append(recs, detect.StateRecord{Detector: Name, Cluster: wv.Cluster, Key: wv.ID, LastSeen: detect.Micros(wv.Last), Body: body})
	}
	return st.SaveState(ctx, recs)
}
