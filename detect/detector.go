package detect

import (
	"context"
	"fmt"
	"time"

	"github.com/auditlens/auditlens/store"
)

// Querier runs a read-only query and decodes its rows typed (see
// store.Each). store.Store provides it.
type Querier interface {
	store.Scanner
}

// Window is the stretch of events a detector reads: Since <= ts < Until,
// for the named clusters (all clusters when Clusters is empty).
type Window struct {
	Since, Until time.Time
	Clusters     []string
}

// Validate reports whether w can be evaluated.
func (w Window) Validate() error {
	if w.Since.IsZero() || w.Until.IsZero() {
		return fmt.Errorf("detection window [%s, %s): both ends are required", w.Since, w.Until)
	}
	if !w.Since.Before(w.Until) {
		return fmt.Errorf("detection window [%s, %s): since must be before until",
			w.Since.UTC().Format(time.RFC3339Nano), w.Until.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// String shows the window as [since, until) in RFC 3339.
func (w Window) String() string {
	return "[" + w.Since.UTC().Format(time.RFC3339) + ", " + w.Until.UTC().Format(time.RFC3339) + ")"
}

// Detector finds one kind of incident in a window of stored events.
//
// Evaluate must be deterministic for the events in the window: the same
// events give the same findings with the same IDs. An incident that
// continues beyond the window is reported with what the window shows;
// the Runner merges it with what earlier windows showed.
type Detector interface {
	// Name is the detector's name, the "detector" field of its findings.
	Name() string
	// Evaluate reads the window's events through q and returns findings.
	Evaluate(ctx context.Context, q Querier, w Window) ([]Finding, error)
}

// Merger is implemented by detectors whose findings hold counts or text
// that depend on all the evidence: Merge combines a stored finding with the
// same incident found again. Detectors without it get the generic Merge.
type Merger interface {
	Merge(prev, next Finding) Finding
}

// Follower is implemented by detectors that read the stored findings of
// other detectors: a Runner evaluates them after those (Follows names
// them).
type Follower interface {
	Follows() []string
}

// mergeWith merges with the detector's own Merge when it has one.
func mergeWith(d Detector, prev, next Finding) Finding {
	if m, ok := d.(Merger); ok {
		return m.Merge(prev, next)
	}
	return Merge(prev, next, 0)
}
