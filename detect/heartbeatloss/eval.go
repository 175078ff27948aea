package heartbeatloss

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
)

// hbLoss is one node's heartbeat gap: from its last heartbeat before the
// gap to its first after (To 0: not back yet), with what made it a loss.
type hbLoss struct {
	Node string `json:"node"`
	// From and To are the request times of the heartbeats around the gap,
	// in microseconds since the epoch.
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
	// Interval is the node's median heartbeat interval and Thr the gap
	// that made it lost, in microseconds.
	Interval int64 `json:"interval"`
	Thr      int64 `json:"thr"`

	silence [2]int64 // the feed silence that explains the gap, when one does
}

// end is when the gap ends as far as the feed shows: the node's return,
// else the feed's head.
func (l *hbLoss) end(head int64) int64 {
	if l.To > 0 {
		return l.To
	}
	return max(head, l.From)
}

// hbWave is one wave of heartbeat loss, as remembered between
// evaluations.
type hbWave struct {
	ID      string    `json:"id"`
	Cluster string    `json:"cluster"`
	Start   int64     `json:"start"`
	Seen    int       `json:"seen"`
	Members []*hbLoss `json:"members"`
	// Last is the latest time the wave was seen: its last return, or the
	// feed's head while a node is still lost.
	Last int64 `json:"last"`

	changed bool
}

func (w *hbWave) member(node string) *hbLoss {
	for _, m := range w.Members {
		if m.Node == node {
			return m
		}
	}
	return nil
}

func (w *hbWave) open() bool {
	return slices.ContainsFunc(w.Members, func(m *hbLoss) bool { return m.To == 0 })
}

// hbEval is one evaluation of the heartbeat-loss detector.
type hbEval struct {
	d     *HeartbeatLoss
	q     detect.Querier
	w     detect.Window
	span  detect.Window // the window and its lookback
	nodes []hbNode
	heads map[string]int64
	mem   []*hbWave
}

func (e *hbEval) run(ctx context.Context, st detect.StateStore) ([]detect.Finding, error) {
	cfg := e.d.cfg
	spanSince := e.span.Since.UnixMicro()
	byNode := map[string]map[string]*hbNode{}
	for i := range e.nodes {
		n := &e.nodes[i]
		if byNode[n.Cluster] == nil {
			byNode[n.Cluster] = map[string]*hbNode{}
		}
		byNode[n.Cluster][n.Node] = n
	}

	// Remembered waves: a node lost before the lookback is back when the
	// span shows heartbeats of it.
	for _, wv := range e.mem {
		for _, m := range wv.Members {
			if m.To != 0 || m.From >= spanSince {
				continue
			}
			if n := byNode[wv.Cluster][m.Node]; n != nil && n.FirstT > m.From {
				m.To = n.FirstT
				wv.changed = true
			}
		}
	}

	// The gaps of the span, and the nodes still silent at the feed's head.
	byCluster := map[string][]*hbLoss{}
	for i := range e.nodes {
		n := &e.nodes[i]
		if n.N < cfg.MinHeartbeats {
			continue
		}
		for j := range n.GapFrom {
			byCluster[n.Cluster] = append(byCluster[n.Cluster], &hbLoss{Node: n.Node, From: n.GapFrom[j], To: events.At(n.GapTo, j),
				Interval: n.Median, Thr: n.Thr})
		}
		if head, ok := e.heads[n.Cluster]; ok && head-n.LastT > n.Thr+usIn(cfg.Settle) {
			byCluster[n.Cluster] = append(byCluster[n.Cluster], &hbLoss{Node: n.Node, From: n.LastT, Interval: n.Median,
				Thr: n.Thr})
		}
	}

	var out []detect.Finding
	var waves []*hbWave
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		losses := e.matchRemembered(cluster, byCluster[cluster])
		if len(losses) == 0 {
			continue
		}
		losses, err := e.filterIntent(ctx, cluster, losses)
		if err != nil {
			return nil, err
		}
		feed, real, err := e.splitFeedSilence(ctx, cluster, losses)
		if err != nil {
			return nil, err
		}
		out = append(out, e.feedGapFindings(cluster, feed, byNode[cluster])...)
		waves = append(waves, e.group(cluster, real, byNode[cluster])...)
	}

	// Report the new waves, and the remembered ones this window touches.
	for _, wv := range e.mem {
		if wv.changed || wv.open() || wv.Last >= e.w.Since.UnixMicro() {
			waves = append(waves, wv)
		}
	}
	var save []*hbWave
	for _, wv := range waves {
		head := e.heads[wv.Cluster]
		last := wv.Last
		for _, m := range wv.Members {
			last = max(last, m.end(head))
		}
		if last != wv.Last {
			wv.Last, wv.changed = last, true
		}
		f, err := e.finding(ctx, wv)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		if wv.changed {
			save = append(save, wv)
		}
	}
	if err := e.d.saveWaves(ctx, st, save); err != nil {
		return nil, err
	}
	return out, nil
}

// matchRemembered updates the remembered members that the span's losses
// show again (their return) and returns the losses no remembered wave
// holds.
func (e *hbEval) matchRemembered(cluster string, losses []*hbLoss) []*hbLoss {
	var rest []*hbLoss
	for _, l := range losses {
		matched := false
		for _, wv := range e.mem {
			if wv.Cluster != cluster {
				continue
			}
			if m := wv.member(l.Node); m != nil && m.From == l.From {
				if m.To != l.To && l.To != 0 {
					m.To, wv.changed = l.To, true
				}
				matched = true
				break
			}
		}
		if !matched {
			rest = append(rest, l)
		}
	}
	return rest
}

// filterIntent drops the losses of nodes taken away on purpose (deleted,
// or written by a person or a non-routine controller shortly before) and
// of nodes whose kubelet made requests during the gap (it was not cut
// off from the apiserver).
func (e *hbEval) filterIntent(ctx context.Context, cluster string, losses []*hbLoss) ([]*hbLoss, error) {
	cfg := e.d.cfg
	head := e.heads[cluster]
	var nodes []string
	from, until := losses[0].From, int64(0)
	for _, l := range losses {
		nodes = append(nodes, l.Node)
		from = min(from, l.From)
		until = max(until, l.end(head))
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	w := detect.Window{Since: detect.Micros(from).Add(-cfg.IntentBefore), Until: detect.Micros(until).Add(time.Microsecond)}
	intent, err := e.d.selectIntent(ctx, e.q, w, cluster, nodes)
	if err != nil {
		return nil, err
	}
	losses = slices.DeleteFunc(losses, func(l *hbLoss) bool {
		return slices.ContainsFunc(intent[l.Node], func(t int64) bool { return t >= l.From-usIn(cfg.IntentBefore) && t <= l.end(head) })
	})
	if len(losses) == 0 {
		return nil, nil
	}
	// Requests in the gap after the next heartbeat was due (until then the
	// connection may still have worked) and an interval before its end (a
	// returning kubelet relists before its next heartbeat). A node with
	// two gaps in the span is asked about its first.
	var names []string
	var lo, hi []int64
	asked := map[string]int64{}
	from, until = losses[0].From, int64(0)
	for _, l := range losses {
		if _, ok := asked[l.Node]; ok {
			continue
		}
		asked[l.Node] = l.From
		names, lo, hi = append(names, l.Node), append(lo, l.From+l.Interval+1_000_000), append(hi, l.end(head)-l.Interval)
		from, until = min(from, l.From), max(until, l.end(head))
	}
	active, err := selectActive(ctx, e.q, detect.Window{Since: detect.Micros(from), Until: detect.Micros(until).Add(time.Microsecond)}, cluster, names, lo, hi)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(losses, func(l *hbLoss) bool { return active[l.Node] && asked[l.Node] == l.From }), nil
}

// splitFeedSilence tells apart the gaps that the audit feed's own
// silence explains (what is left of the gap outside the silences is
// shorter than the node's threshold) from the rest.
func (e *hbEval) splitFeedSilence(ctx context.Context, cluster string, losses []*hbLoss) (feed, real []*hbLoss, err error) {
	if len(losses) == 0 {
		return nil, nil, nil
	}
	head := e.heads[cluster]
	// A silence counts for a node when it lasts at least the node's
	// interval (and SilenceMin): shorter ones are the quiet of a small
	// cluster between heartbeats.
	least := func(l *hbLoss) int64 { return max(l.Interval, usIn(e.d.cfg.SilenceMin)) }
	from, until, shortest := losses[0].From, int64(0), least(losses[0])
	for _, l := range losses {
		from = min(from, l.From)
		until = max(until, l.end(head))
		shortest = min(shortest, least(l))
	}
	sil, err := e.d.selectSilences(ctx, e.q, detect.Window{Since: detect.Micros(from), Until: detect.Micros(until).Add(time.Microsecond), Clusters: []string{cluster}},
		time.Duration(shortest)*time.Microsecond)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range losses {
		lo, hi := l.From, l.end(head)
		covered, best := int64(0), int64(0)
		for _, s := range sil[cluster] {
			o := min(hi, s[1]) - max(lo, s[0])
			if o <= 0 || s[1]-s[0] < least(l) {
				continue
			}
			covered += o
			if o > best {
				best, l.silence = o, s
			}
		}
		if covered > 0 && hi-lo-covered < l.Thr {
			feed = append(feed, l)
		} else {
			real = append(real, l)
		}
	}
	return feed, real, nil
}

// group puts the losses of one cluster into waves: a loss joins a
// remembered wave, or the wave being built, when it began within
// WaveWithin (or its node's interval, when longer) of the wave's start.
// New waves of fewer than MinNodes nodes are no waves.
func (e *hbEval) group(cluster string, losses []*hbLoss, nodes map[string]*hbNode) []*hbWave {
	cfg := e.d.cfg
	slices.SortFunc(losses, func(a, b *hbLoss) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Node, b.Node)) })
	within := func(l *hbLoss) int64 { return max(usIn(cfg.WaveWithin), l.Interval) }
	joins := func(wv *hbWave, l *hbLoss) bool {
		return wv.Cluster == cluster && l.From >= wv.Start && l.From-wv.Start <= within(l) && wv.member(l.Node) == nil
	}
	var fresh []*hbWave
	for _, l := range losses {
		// A remembered wave takes a loss that a later window showed (a
		// node with a longer interval is found lost later), even one that
		// began a little before the wave's first: the wave starts earlier
		// then, under the same ID.
		if i := slices.IndexFunc(e.mem, func(wv *hbWave) bool {
			return wv.Cluster == cluster && wv.member(l.Node) == nil && l.From >= wv.Start-within(l) && l.From-wv.Start <= within(l)
		}); i >= 0 {
			e.mem[i].Members = append(e.mem[i].Members, l)
			e.mem[i].Start = min(e.mem[i].Start, l.From)
			e.mem[i].changed = true
			continue
		}
		if n := len(fresh); n > 0 && joins(fresh[n-1], l) {
			fresh[n-1].Members = append(fresh[n-1].Members, l)
			continue
		}
		fresh = append(fresh, &hbWave{Cluster: cluster, Start: l.From, Members: []*hbLoss{l}, changed: true})
	}
	fresh = slices.DeleteFunc(fresh, func(wv *hbWave) bool { return len(wv.Members) < cfg.MinNodes })
	for _, wv := range fresh {
		wv.ID = detect.FindingID(Name, cluster, "wave", detect.Micros(wv.Start).Format(time.RFC3339Nano))
		for _, n := range nodes {
			if n.FirstT < wv.Start {
				wv.Seen++
			}
		}
	}
	return fresh
}
