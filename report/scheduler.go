package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// SchedulerConfig wires a Scheduler.
type SchedulerConfig struct {
	Store    Store
	Findings FindingLister
	Reports  []Spec
	// Clock drives schedules and webhook retries (default SystemClock).
	Clock Clock
	// Client posts webhooks (default a client with no overall timeout;
	// each attempt is bounded by the webhook's Timeout).
	Client *http.Client
	Logger *slog.Logger
	// Metrics, when set, count runs and deliveries.
	Metrics *Metrics
}

// Scheduler runs scheduled reports: at each scheduled time it builds the
// report whose window ends then, stores it, writes its files, posts its
// webhooks and stores it again with the outcome of each delivery.
//
// Runs missed while the scheduler was not running: at start, for each
// report with a stored run, if one or more scheduled times passed after
// the window end of its latest stored run, exactly one report is built at
// once, for the latest of those times; earlier missed times are skipped
// (not rebuilt). A report never run before starts at its next scheduled
// time. Likewise, when the process falls behind (a suspended machine), one
// run covers the latest scheduled time that passed.
type Scheduler struct {
	cfg  SchedulerConfig
	jobs []job
}

// NewScheduler validates the reports and returns a scheduler.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.Store == nil || cfg.Findings == nil {
		return nil, errors.New("report scheduler: a store and a findings source are required")
	}
	if err := validateSpecs(cfg.Reports); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{cfg: cfg}
	for _, spec := range cfg.Reports {
		j, err := spec.compile()
		if err != nil {
			return nil, err
		}
		s.jobs = append(s.jobs, j)
	}
	return s, nil
}

// latestSlot returns the latest scheduled time in (after, now], or the zero
// time when there is none.
func latestSlot(sch Schedule, loc *time.Location, after, now time.Time) time.Time {
	var last time.Time
	for t := sch.Next(after.In(loc)); !t.IsZero() && !t.After(now); t = sch.Next(t) {
		last = t
	}
	return last
}

// Run runs the schedules until ctx is done, then returns nil. Failures of
// single runs are logged (and recorded in the stored report's
// deliveries), not returned.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.jobs) == 0 {
		<-ctx.Done()
		return nil
	}
	now := s.cfg.Clock.Now()
	next := make([]time.Time, len(s.jobs))
	for i, j := range s.jobs {
		prev, err := Previous(ctx, s.cfg.Store, j.spec.Name, now.Add(time.Minute))
		switch {
		case err == nil:
			if slot := latestSlot(j.schedule, j.loc, prev.WindowEnd, now); !slot.IsZero() {
				s.cfg.Logger.Info("report: catching up a missed run", "report", j.spec.Name, "scheduled", slot)
				s.runLogged(ctx, j, slot)
			}
		case !errors.Is(err, ErrNotFound):
			s.cfg.Logger.Error("report: reading the previous run", "report", j.spec.Name, "err", err)
		}
		next[i] = j.schedule.Next(now.In(j.loc))
	}
	for {
		earliest := time.Time{}
		for _, t := range next {
			if !t.IsZero() && (earliest.IsZero() || t.Before(earliest)) {
				earliest = t
			}
		}
		if earliest.IsZero() {
			<-ctx.Done() // no schedule ever fires again
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Clock.After(earliest.Sub(s.cfg.Clock.Now())):
		}
		now := s.cfg.Clock.Now()
		for i, j := range s.jobs {
			if next[i].IsZero() || next[i].After(now) {
				continue
			}
			slot := latestSlot(j.schedule, j.loc, next[i].Add(-time.Minute), now)
			s.runLogged(ctx, j, slot)
			next[i] = j.schedule.Next(now.In(j.loc))
		}
	}
}

func (s *Scheduler) runLogged(ctx context.Context, j job, slot time.Time) {
	t0 := s.cfg.Clock.Now()
	r, err := s.RunOnce(ctx, j.spec, slot)
	now := s.cfg.Clock.Now()
	s.cfg.Metrics.observe(j.spec.Name, now.Sub(t0), r, err, now)
	if err != nil {
		s.cfg.Logger.Error("report run failed", "report", j.spec.Name, "scheduled", slot, "err", err)
		return
	}
	for _, d := range r.Deliveries {
		if !d.OK {
			s.cfg.Logger.Warn("report delivery failed", "report", r.Name, "target", d.Target, "attempts", d.Attempts, "err", d.Error)
		}
	}
	s.cfg.Logger.Info("report run", "report", r.Name, "id", r.ID, "window_end", r.WindowEnd, "deliveries", len(r.Deliveries))
}

// RunOnce builds the report of spec whose window ends at end, stores it,
// delivers it to its outputs and stores it again with the deliveries.
func (s *Scheduler) RunOnce(ctx context.Context, spec Spec, end time.Time) (Report, error) {
	j, err := spec.compile()
	if err != nil {
		return Report{}, err
	}
	cfg := spec.config()
	cfg.End, cfg.Now = end, s.cfg.Clock.Now
	r, err := Build(ctx, s.cfg.Store, s.cfg.Findings, cfg)
	if err != nil {
		return Report{}, err
	}
	if err := Save(ctx, s.cfg.Store, r); err != nil {
		return Report{}, err
	}
	if spec.Outputs.Dir == "" && len(spec.Outputs.Webhooks) == 0 {
		return r, nil
	}
	var ds []Delivery
	if spec.Outputs.Dir != "" {
		ds = append(ds, WriteFiles(spec.Outputs.Dir, j.formats, r, s.cfg.Clock.Now())...)
	}
	for _, w := range spec.Outputs.Webhooks {
		ds = append(ds, Post(ctx, s.cfg.Client, s.cfg.Clock, w, r))
	}
	r.Deliveries = ds
	if err := Save(ctx, s.cfg.Store, r); err != nil {
		return r, fmt.Errorf("recording deliveries: %w", err)
	}
	return r, nil
}
