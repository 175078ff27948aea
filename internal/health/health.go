// Package health tracks the parts of serve that can fail again and again
// (the spool's disk, the store) so that a failure is logged when it
// starts and when it ends, with counts, rather than once per attempt, and
// so that /readyz can say what is wrong.
package health

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Condition is one thing that is either working or failing.
type Condition struct {
	name string
	// what the failures mean for a user, in the log line that opens them
	consequence string
	log         *slog.Logger
	now         func() time.Time

	mu       sync.Mutex
	since    time.Time // failing since; zero while working
	failures uint64    // in the current failing spell
	last     error
}

// NewCondition returns a working condition named name (e.g. "spool").
// consequence says what a failure means, for the log; now may be nil.
func NewCondition(name, consequence string, log *slog.Logger, now func() time.Time) *Condition {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Condition{name: name, consequence: consequence, log: log, now: now}
}

// Fail records a failed attempt. The first of a spell is logged as an
// error; the others only counted.
func (c *Condition) Fail(err error) {
	c.mu.Lock()
	first := c.since.IsZero()
	if first {
		c.since = c.now()
	}
	c.failures++
	c.last = err
	c.mu.Unlock()
	if first {
		c.log.Error(c.name+" failing: "+c.consequence+"; logged again when it recovers", "err", err)
	} else {
		c.log.Debug(c.name+" still failing", "err", err)
	}
}

// OK records a successful attempt, and logs the end of a failing spell.
func (c *Condition) OK() {
	c.mu.Lock()
	if c.since.IsZero() {
		c.mu.Unlock()
		return
	}
	since, n, last := c.since, c.failures, c.last
	c.since, c.failures, c.last = time.Time{}, 0, nil
	d := c.now().Sub(since)
	c.mu.Unlock()
	c.log.Info(c.name+" recovered", "failed_for", d.Round(time.Millisecond).String(), "failures", n, "last_err", last)
}

// State says since when the condition fails (zero: it works), how many
// attempts failed since, and the last error.
func (c *Condition) State() (since time.Time, failures uint64, last error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.since, c.failures, c.last
}

// Check says why a condition makes serve unready: it has failed for
// longer than grace.
func (c *Condition) Check(grace time.Duration) error {
	since, n, last := c.State()
	if since.IsZero() {
		return nil
	}
	d := c.now().Sub(since)
	if d < grace {
		return nil
	}
	return fmt.Errorf("%s failing for %s (%d failures): %w", c.name, d.Round(time.Second), n, last)
}

// Readiness joins conditions, each with its grace.
type Readiness struct {
	checks []check
}

type check struct {
	c     *Condition
	grace time.Duration
}

// Add makes r unready while c has failed for longer than grace.
func (r *Readiness) Add(c *Condition, grace time.Duration) {
	r.checks = append(r.checks, check{c, grace})
}

// Err says why serve is not ready, or nil.
func (r *Readiness) Err() error {
	var errs []error
	for _, ch := range r.checks {
		if err := ch.c.Check(ch.grace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
