package relist

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/events"
)

// What the relist-loop detector remembers between evaluations (in the
// detector_state table): one history per declared loop, keyed by the
// client's program identity.

// relistHistory is what a loop's finding counts, over its whole life.
type relistHistory struct {
	Reflector events.Reflector `json:"reflector"`
	// UserAgent is the newest user agent of its watches; Instances the
	// addresses they came from and Scopes the namespaces and selectors
	// that looped (up to 16 each).
	UserAgent string   `json:"user_agent"`
	Instances []string `json:"instances,omitempty"`
	Scopes    []string `json:"scopes,omitempty"`
	// FirstSeen is the first turn's watch, LastSeen the latest turn's
	// relist; CountedUntil the latest turn (its watch) already counted.
	FirstSeen    time.Time `json:"first_seen"`
	LastSeen     time.Time `json:"last_seen"`
	CountedUntil time.Time `json:"counted_until"`
	Turns        int       `json:"turns"`
	// Durations of the short watches, in microseconds.
	Durations durations `json:"durations"`
}

// durations summarises how long the short watches lasted.
type durations struct {
	Min int64 `json:"min_us"`
	Max int64 `json:"max_us"`
	Sum int64 `json:"sum_us"`
	N   int   `json:"n"`
}

func (s *durations) add(d time.Duration) {
	us := d.Microseconds()
	if s.N == 0 || us < s.Min {
		s.Min = us
	}
	if us > s.Max {
		s.Max = us
	}
	s.Sum += us
	s.N++
}

func (s durations) mean() time.Duration {
	if s.N == 0 {
		return 0
	}
	return time.Duration(s.Sum/int64(s.N)) * time.Microsecond
}

func (h *relistHistory) clone() relistHistory {
	c := *h
	c.Instances = slices.Clone(h.Instances)
	c.Scopes = slices.Clone(h.Scopes)
	return c
}

func (h *relistHistory) key() string { return h.Reflector.Cluster + "/" + h.Reflector.Ident }

// scope names a reflector's namespace and selectors ("" for a
// cluster-wide watch of everything).
func scope(r turnRow) string {
	var parts []string
	if r.Namespace != "" {
		parts = append(parts, "namespace "+r.Namespace)
	}
	if r.LabelSelector != "" {
		parts = append(parts, "labels "+r.LabelSelector)
	}
	if r.FieldSelector != "" {
		parts = append(parts, "fields "+r.FieldSelector)
	}
	return strings.Join(parts, ", ")
}

// load reads the remembered loops of the window's clusters, by key.
func (d *Loop) load(ctx context.Context, st detect.StateStore, w detect.Window) (map[string]*relistHistory, error) {
	out := map[string]*relistHistory{}
	if st == nil {
		return out, nil
	}
	recs, err := st.LoadState(ctx, LoopName, w.Clusters, w.Since.Add(-d.cfg.Remember))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		var h relistHistory
		if err := json.Unmarshal(r.Body, &h); err != nil {
			return nil, fmt.Errorf("decoding remembered relist loop %s of cluster %s: %w", r.Key, r.Cluster, err)
		}
		if h.Reflector.Cluster != r.Cluster || h.Reflector.Ident != r.Key {
			continue // not what this version of the detector wrote
		}
		out[h.key()] = &h
	}
	return out, nil
}

// account adds the loop's turns of the window to its remembered history:
// turns after what the history counted, up to settled, are added to it
// (changed reports that it grew); the younger ones only to the totals
// returned for this evaluation.
func (d *Loop) account(c *relistClient, turns []turn, settled time.Time) (tot relistHistory, changed bool) {
	if c.hist == nil {
		c.hist = &relistHistory{Reflector: c.Reflector}
	}
	h := c.hist
	tot = h.clone()
	for _, t := range turns {
		if !h.CountedUntil.IsZero() && !t.at().After(h.CountedUntil) {
			continue // counted by an earlier evaluation
		}
		for _, target := range []*relistHistory{h, &tot} {
			if target == h && t.relist.Time.After(settled) {
				continue
			}
			target.Turns++
			target.Durations.add(t.duration)
			if target.FirstSeen.IsZero() || t.at().Before(target.FirstSeen) {
				target.FirstSeen = t.at()
			}
			if t.relist.Time.After(target.LastSeen) {
				target.LastSeen = t.relist.Time
			}
			if t.at().After(target.CountedUntil) {
				target.CountedUntil = t.at()
			}
			target.UserAgent = t.row.UserAgent
			target.Instances = detect.MergeStrings(target.Instances, []string{t.row.SourceIP})
			target.Scopes = detect.MergeStrings(target.Scopes, []string{scope(t.row)})
			if target == h {
				changed = true
			}
		}
	}
	return tot, changed
}

// save stores the histories that changed.
func (d *Loop) save(ctx context.Context, st detect.StateStore, hists []*relistHistory) error {
	if st == nil || len(hists) == 0 {
		return nil
	}
	recs := make([]detect.StateRecord, 0, len(hists))
	for _, h := range hists {
		body, err := json.Marshal(h)
		if err != nil {
			return err
		}
		recs = append(recs, detect.StateRecord{Detector: LoopName, Cluster: h.Reflector.Cluster, Key: h.Reflector.Ident,
			LastSeen: h.LastSeen, Body: body})
	}
	return st.SaveState(ctx, recs)
}
