package rollback

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// What the rv-rollback detector remembers of each cluster between
// evaluations (detector_state, key "head"): the head of its current
// timeline, and the rollback going on, if any.
type rollbackMemory struct {
	// Top is the highest resourceVersion the cluster showed, TopAt the
	// start of the bucket that showed it.
	Top   uint64    `json:"top"`
	TopAt time.Time `json:"top_at"`
	// Rollback is the drop whose lower head has not caught up yet.
	Rollback *rollbackState `json:"rollback,omitempty"`
	// Pending is a drop the window ended too soon to tell: its events, so
	// that the next evaluation, which sees its rest, names the same ones.
	Pending *rollbackState `json:"pending,omitempty"`
}

// rollbackState is one rollback: the events that showed the heads before
// and after, and the new head's highest value so far.
type rollbackState struct {
	BeforeRV  uint64          `json:"before_rv"`
	AfterRV   uint64          `json:"after_rv"`
	Before    detect.Evidence `json:"before"`
	After     detect.Evidence `json:"after"`
	NewHead   uint64          `json:"new_head"`
	NewHeadAt time.Time       `json:"new_head_at"`
}

const rollbackKey = "head"

// maxDrops bounds the drops one evaluation looks into per cluster.
const maxDrops = 4

func (d *RVRollback) loadMemory(ctx context.Context, st detect.StateStore, w detect.Window) (map[string]*rollbackMemory, error) {
	out := map[string]*rollbackMemory{}
	if st == nil {
		return out, nil
	}
	recs, err := st.LoadState(ctx, Name, w.Clusters, w.Since.Add(-d.cfg.Remember))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Key != rollbackKey {
			continue
		}
		var m rollbackMemory
		if err := json.Unmarshal(r.Body, &m); err != nil {
			return nil, fmt.Errorf("decoding the remembered resourceVersion head of cluster %s: %w", r.Cluster, err)
		}
		out[r.Cluster] = &m
	}
	return out, nil
}

// Evaluate implements Detector: one window, nothing remembered.
func (d *RVRollback) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: the window, measured against the
// head and the rollback earlier evaluations remembered in st (nil:
// nothing).
func (d *RVRollback) EvaluateState(ctx context.Context, q detect.Querier, st detect.StateStore, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	mem, err := d.loadMemory(ctx, st, w)
	if err != nil {
		return nil, err
	}
	heads, err := d.selectHeads(ctx, q, w)
	if err != nil {
		return nil, err
	}
	var out []detect.Finding
	var save []detect.StateRecord
	for _, cluster := range slices.Sorted(maps.Keys(heads)) {
		bs := heads[cluster]
		m := mem[cluster]
		var top uint64
		var topAt time.Time
		var cur *drop
		var known *rollbackState
		if m != nil && m.TopAt.Before(w.Since) {
			// Only what happened before the window: a state saved by a
			// later window says nothing about this one.
			top, topAt = m.Top, m.TopAt
			if rb := m.Rollback; rb != nil && rb.After.Time.Before(w.Since) {
				known = rb
				cur = &drop{Before: rb.BeforeRV, BeforeAt: m.TopAt, Confirmed: true, continuing: true,
					NewHeads: []newHead{{At: rb.NewHeadAt, Head: rb.NewHead}}}
			}
		}
		drops, jumps, pending, end, endAt := d.scan(bs, top, topAt, cur)
		next := &rollbackMemory{Top: end, TopAt: endAt}
		// Where the head changed, the writes, read once.
		var froms []time.Time
		for _, dr := range drops {
			if !dr.Retracted && !dr.continuing && len(froms) < maxDrops {
				froms = append(froms, bs[dr.From].start())
			}
		}
		if pending != nil {
			froms = append(froms, bs[pending.From].start())
		}
		for _, j := range jumps[:min(len(jumps), maxDrops)] {
			froms = append(froms, bs[j.At].start())
		}
		near, err := d.writesNear(ctx, q, w, cluster, froms)
		if err != nil {
			return nil, err
		}
		if pending != nil && len(drops) == 0 {
			if next.Pending, err = d.locate(ctx, q, w, cluster, bs, near, pending, m); err != nil {
				return nil, err
			}
		}
		located := 0
		for _, dr := range drops {
			if dr.Retracted {
				continue
			}
			if located++; located > maxDrops {
				break // not one etcd's history: a few restores a window at most
			}
			rb := known
			if !dr.continuing {
				if rb, err = d.locate(ctx, q, w, cluster, bs, near, dr, m); err != nil {
					return nil, err
				}
				if rb == nil {
					continue
				}
			}
			n := dr.NewHeads[len(dr.NewHeads)-1]
			if n.Head > rb.NewHead {
				rb.NewHead, rb.NewHeadAt = n.Head, n.At
			}
			f, err := d.rollbackFinding(ctx, q, w, cluster, rb, dr)
			if err != nil {
				return nil, err
			}
			out = append(out, f)
			if dr.CaughtUp.IsZero() {
				next.Rollback = rb
			}
		}
		for _, j := range jumps[:min(len(jumps), maxDrops)] {
			f, ok, err := d.jumpFinding(ctx, q, w, cluster, bs, near, j)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, f)
			}
		}
		if st != nil && end > 0 {
			body, err := json.Marshal(next)
			if err != nil {
				return nil, err
			}
			save = append(save, detect.StateRecord{Detector: Name, Cluster: cluster, Key: rollbackKey, LastSeen: lastBucket(bs), Body: body})
		}
	}
	if st != nil && len(save) > 0 {
		if err := st.SaveState(ctx, save); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func lastBucket(bs []bucket) time.Time {
	if len(bs) == 0 {
		return time.Time{}
	}
	return bs[len(bs)-1].start()
}

// locate finds the events that showed a drop's heads: the one that showed
// the head before (in the window, else remembered: m) and the write that
// showed the lower one (the highest within a Bucket of the first lower
// write). nil when they are not to be found (the window cut the drop's
// first bucket) or the writes did not pause at the edge.
func (d *RVRollback) locate(ctx context.Context, q detect.Querier, w detect.Window, cluster string, bs []bucket, near []headRow, dr *drop, m *rollbackMemory) (*rollbackState, error) {
	var newHead newHead
	if len(dr.NewHeads) > 0 {
		newHead = dr.NewHeads[0]
	}
	// The same drop an earlier evaluation saw begin: the same events, and
	// so the same finding, whatever part of it this window holds.
	if m != nil {
		for _, known := range []*rollbackState{m.Rollback, m.Pending} {
			if known != nil && known.BeforeRV == dr.Before {
				rb := *known
				if newHead.Head > rb.NewHead {
					rb.NewHead, rb.NewHeadAt = newHead.Head, newHead.At
				}
				return &rb, nil
			}
		}
	}
	from := bs[dr.From].start()
	hr, paused := d.edge(near, from, func(hv uint64) bool { return hv+d.cfg.MinDrop <= dr.Before },
		func(hv uint64) bool { return hv+d.cfg.MinDrop > dr.Before })
	if hr == nil || !paused {
		return nil, nil
	}
	// The first lower write may carry an old object's own resourceVersion
	// (a kubelet's Lease update right after its re-read: the revision the
	// Lease was last written at before the snapshot, hundreds below the
	// restored head). The head after is the highest resourceVersion the
	// writes showed within a Bucket of the first: a bound from below that
	// the restored head's own writes reach within seconds.
	top := *hr
	for _, r := range near {
		if r.TS >= hr.TS && detect.Micros(r.TS).Sub(detect.Micros(hr.TS)) < d.cfg.Bucket && r.HV > top.HV && r.HV+d.cfg.MinDrop <= dr.Before {
			top = r
		}
	}
	hr = &top
	ev, err := d.event(ctx, q, w, cluster, hr.AuditID, detect.Micros(hr.TS))
	if err != nil || ev == nil {
		return nil, err
	}
	after := hr.HV
	rb := &rollbackState{BeforeRV: dr.Before, AfterRV: after, After: ev.Evidence(RoleHeadAfter, detect.FormatRV(after)),
		NewHead: newHead.Head, NewHeadAt: newHead.At}
	before, err := d.firstShowing(ctx, q, w, cluster, dr.Before, dr.BeforeAt)
	if err != nil {
		return nil, err
	}
	if before != nil {
		rb.Before = before.Evidence(RoleHeadBefore, detect.FormatRV(dr.Before))
	} else {
		// Shown before the window: only its time and value are known.
		rb.Before = detect.Evidence{Time: dr.BeforeAt, Role: RoleHeadBefore, ResourceVersion: detect.FormatRV(dr.Before)}
	}
	return rb, nil
}

// jumpFinding looks for the relist herd after a jump and the events that
// showed it.
func (d *RVRollback) jumpFinding(ctx context.Context, q detect.Querier, w detect.Window, cluster string, bs []bucket, near []headRow, j jump) (detect.Finding, bool, error) {
	hr, paused := d.edge(near, bs[j.At].start(), func(hv uint64) bool { return hv >= j.Before+d.cfg.MinJump },
		func(hv uint64) bool { return hv+d.cfg.MinDrop > j.Before && hv < j.Before+d.cfg.MinJump })
	if hr == nil || !paused {
		return detect.Finding{}, false, nil
	}
	after, err := d.event(ctx, q, w, cluster, hr.AuditID, detect.Micros(hr.TS))
	if err != nil || after == nil {
		return detect.Finding{}, false, err
	}
	rv := hr.HV
	before, err := d.firstShowing(ctx, q, w, cluster, j.Before, j.BeforeAt)
	if err != nil || before == nil {
		return detect.Finding{}, false, err
	}
	return d.restoreFinding(ctx, q, w, cluster, before.Evidence(RoleHeadBefore, detect.FormatRV(j.Before)), after.Evidence(RoleHeadAfter, detect.FormatRV(rv)))
}
