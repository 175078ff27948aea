package detect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FindingStore is where the Runner keeps findings; *Repository is one.
type FindingStore interface {
	GetMany(ctx context.Context, ids []string) (map[string]Finding, error)
	Upsert(ctx context.Context, fs []Finding) error
}

// RunnerConfig configures a Runner: Detectors is required, the rest has
// defaults.
type RunnerConfig struct {
	// Detectors to evaluate (required; detectors.Default() has them all).
	Detectors []Detector
	// Interval between two evaluations by Run (default 1m).
	Interval time.Duration
	// Window is the length of the window each evaluation by Run reads,
	// ending at the time of the evaluation (default 1h). It must be longer
	// than Interval: consecutive windows overlap by Window − Interval, so
	// an incident that spans a window's edge is seen whole by a later
	// window and stays one finding. At real time scales a watch restarts
	// every 5–10 minutes; an hour holds six or more restarts, enough for
	// the watch-loop detector's thresholds.
	Window time.Duration
	// Clusters restricts evaluation to these clusters (default: all).
	Clusters []string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives one line per evaluation with findings, and errors.
	Logger *slog.Logger
	// Metrics, when set, count evaluations (see NewMetrics).
	Metrics *Metrics
	// State, when set, is where Stateful detectors remember what earlier
	// evaluations saw (serve, detect and import pass the Repository);
	// without it each evaluation sees only its window.
	State StateStore
	// Parallel is how many detectors an evaluation runs at once (default
	// 1: one after the other). A detector that reads another's findings
	// (Follower) starts once that one is stored. scan and detect, which
	// evaluate once and have the machine to themselves, run one per core.
	Parallel int
}

func (c *RunnerConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.Window <= 0 {
		c.Window = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Parallel < 1 {
		c.Parallel = 1
	}
}

// Validate reports a configuration that cannot work.
func (c RunnerConfig) Validate() error {
	c.setDefaults()
	if len(c.Detectors) == 0 {
		return fmt.Errorf("no detectors to run")
	}
	if c.Window <= c.Interval {
		return fmt.Errorf("detection window %s must be longer than the interval %s, so that consecutive windows overlap", c.Window, c.Interval)
	}
	seen := map[string]bool{}
	for _, d := range c.Detectors {
		if seen[d.Name()] {
			return fmt.Errorf("detector %q is configured twice", d.Name())
		}
		seen[d.Name()] = true
	}
	_, err := followOrder(c.Detectors)
	return err
}

// Runner evaluates detectors over windows of stored events and keeps their
// findings: each finding found again is merged into the stored one (same
// ID), so an incident is one finding however many windows saw it.
type Runner struct {
	q   Querier
	fs  FindingStore
	cfg RunnerConfig
}

// NewRunner returns a runner that reads events through q and keeps
// findings in fs.
func NewRunner(q Querier, fs FindingStore, cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Runner{q: q, fs: fs, cfg: cfg}, nil
}

// Result says what one evaluation did.
type Result struct {
	Window Window
	// Findings are the findings of this evaluation as stored: merged with
	// what earlier evaluations found. Sorted by SortFindings.
	Findings []Finding
	// New, Updated and Unchanged count the findings by what the store
	// held before.
	New, Updated, Unchanged int
}

// RunOnce evaluates every detector over w and stores the findings. A
// detector that fails does not stop the others; the error joins every
// failure. Up to Parallel detectors run at once, each Follower after the
// detectors it follows; the result is the same in any order.
func (r *Runner) RunOnce(ctx context.Context, w Window) (Result, error) {
	res := Result{Window: w}
	if err := w.Validate(); err != nil {
		return res, err
	}
	ds := r.cfg.Detectors
	outs := make([]detectorResult, len(ds))
	var state *stateBatch
	if r.cfg.State != nil {
		state = &stateBatch{StateStore: r.cfg.State}
	}
	run := func(i int) {
		d := ds[i]
		start := time.Now()
		outs[i] = r.runDetector(ctx, d, state, w)
		r.cfg.Metrics.observe(d.Name(), time.Since(start), outs[i].stored, outs[i].err)
		r.cfg.Logger.Debug("detector evaluated", "detector", d.Name(), "window", w.String(), "stored", outs[i].stored, "took", time.Since(start))
	}
	order, _ := followOrder(ds) // Validate refused a circle
	runOrdered(ctx, ds, order, r.cfg.Parallel, run)
	var errs []error
	if state != nil {
		if err := state.flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("storing the detectors' state over %s: %w", w, err))
		}
	}
	for i, o := range outs {
		res.Findings = append(res.Findings, o.findings...)
		res.New += o.new
		res.Updated += o.updated
		res.Unchanged += o.unchanged
		if o.err != nil {
			errs = append(errs, fmt.Errorf("detector %s over %s: %w", ds[i].Name(), w, o.err))
		}
	}
	SortFindings(res.Findings)
	return res, errors.Join(errs...)
}

// followOrder returns the indexes of ds in their order, each Follower
// moved after the detectors in ds it follows, or an error when some follow
// each other round in a circle: none of them could run first.
func followOrder(ds []Detector) ([]int, error) {
	index := make(map[string]int, len(ds))
	for i, d := range ds {
		index[d.Name()] = i
	}
	order := make([]int, 0, len(ds))
	state := make([]int8, len(ds)) // 0 new, 1 being placed, 2 placed
	var place func(i int, path []string) error
	place = func(i int, path []string) error {
		path = append(path, ds[i].Name())
		switch state[i] {
		case 1:
			return fmt.Errorf("detectors follow each other in a circle: %s", strings.Join(path, " → "))
		case 2:
			return nil
		}
		state[i] = 1
		if f, ok := ds[i].(Follower); ok {
			for _, name := range f.Follows() {
				if j, ok := index[name]; ok {
					if err := place(j, path); err != nil {
						return err
					}
				}
			}
		}
		state[i] = 2
		order = append(order, i)
		return nil
	}
	for i := range ds {
		if err := place(i, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// runOrdered runs run(i) for each detector, at most parallel at once (so
// with 1 one after the other, in order). A Follower starts once the
// detectors it follows have run; meanwhile a free slot takes the first
// detector in order (followOrder's: each Follower after the detectors it
// follows) that waits on nobody, so a slow detector's followers hold back
// no one else. Once ctx ends, no other detector starts.
func runOrdered(ctx context.Context, ds []Detector, order []int, parallel int, run func(i int)) {
	index := make(map[string]int, len(ds))
	for i, d := range ds {
		index[d.Name()] = i
	}
	deps := make([][]int, len(ds))
	for _, i := range order {
		if f, ok := ds[i].(Follower); ok {
			for _, name := range f.Follows() {
				if j, ok := index[name]; ok && j != i {
					deps[i] = append(deps[i], j)
				}
			}
		}
	}
	ran := make([]bool, len(ds))
	ready := func(i int) bool {
		for _, j := range deps[i] {
			if !ran[j] {
				return false
			}
		}
		return true
	}
	pending := slices.Clone(order)
	finished := make(chan int)
	running := 0
	for len(pending) > 0 || running > 0 {
		for k := 0; k < len(pending) && running < parallel && ctx.Err() == nil; {
			i := pending[k]
			if !ready(i) {
				k++
				continue
			}
			pending = slices.Delete(pending, k, k+1)
			running++
			go func() {
				defer func() { finished <- i }()
				run(i)
			}()
		}
		if running == 0 {
			break // ctx ended: the rest does not start
		}
		ran[<-finished] = true
		running--
	}
}

// detectorResult is what one detector's evaluation did.
type detectorResult struct {
	findings                []Finding
	new, updated, unchanged int
	stored                  int
	err                     error
}

// stateBatch is the StateStore of one evaluation: the records its
// detectors save are kept and stored together once all have run (flush),
// in one INSERT. An INSERT writes a part, some 8 ms of the embedded
// engine's time however little it holds, and serve evaluates every
// interval. A detector reads only its own records, before it saves them.
type stateBatch struct {
	StateStore
	mu   sync.Mutex
	recs []StateRecord
}

// SaveState implements StateStore: the records wait for flush.
func (b *stateBatch) SaveState(_ context.Context, recs []StateRecord) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recs = append(b.recs, recs...)
	return nil
}

// flush stores the records saved since the last flush.
func (b *stateBatch) flush(ctx context.Context) error {
	b.mu.Lock()
	recs := b.recs
	b.recs = nil
	b.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	return b.StateStore.SaveState(ctx, recs)
}

// runDetector evaluates one detector and stores its findings that
// changed; a Stateful detector remembers through state (nil: none).
func (r *Runner) runDetector(ctx context.Context, d Detector, state *stateBatch, w Window) (out detectorResult) {
	var found []Finding
	var err error
	if sd, ok := d.(Stateful); ok && state != nil {
		found, err = sd.EvaluateState(ctx, r.q, state, w)
	} else {
		found, err = d.Evaluate(ctx, r.q, w)
	}
	if err != nil {
		out.err = err
		return out
	}
	// One incident, one finding, even if a detector reported it twice.
	byID := map[string]Finding{}
	var order []string
	for _, f := range found {
		f.Normalize()
		if p, ok := byID[f.ID]; ok {
			f = mergeWith(d, p, f)
			f.Normalize()
		} else {
			order = append(order, f.ID)
		}
		byID[f.ID] = f
	}
	stored, err := r.fs.GetMany(ctx, order)
	if err != nil {
		out.err = fmt.Errorf("reading stored findings: %w", err)
		return out
	}
	var changed []Finding
	for _, id := range order {
		f := byID[id]
		prev, ok := stored[id]
		switch {
		case !ok:
			out.new++
			changed = append(changed, f)
		default:
			f = mergeWith(d, prev, f)
			f.Normalize()
			if sameFinding(prev, f) {
				out.unchanged++
				f = prev
			} else {
				out.updated++
				changed = append(changed, f)
			}
		}
		out.findings = append(out.findings, f)
	}
	if len(changed) > 0 {
		if err := r.fs.Upsert(ctx, changed); err != nil {
			out.err = err
			return out
		}
		r.cfg.Logger.Info("findings stored", "detector", d.Name(), "window", w.String(), "stored", len(changed))
	}
	out.stored = len(changed)
	return out
}

// sameFinding compares two findings as stored (their JSON documents).
func sameFinding(a, b Finding) bool {
	ja, errA := json.Marshal(&a)
	jb, errB := json.Marshal(&b)
	if errA != nil || errB != nil {
		return reflect.DeepEqual(a, b)
	}
	return string(ja) == string(jb)
}

// Run evaluates the detectors every Interval over the Window that ends at
// that moment, until ctx ends. The first evaluation starts at once. Errors
// are logged and counted; Run returns only ctx's error.
func (r *Runner) Run(ctx context.Context) error {
	log := r.cfg.Logger
	log.Info("detectors running", "interval", r.cfg.Interval, "window", r.cfg.Window, "detectors", len(r.cfg.Detectors))
	for {
		started := r.cfg.Now()
		w := Window{Since: started.Add(-r.cfg.Window), Until: started, Clusters: r.cfg.Clusters}
		res, err := r.RunOnce(ctx, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			log.Warn("detector evaluation failed", "window", w.String(), "err", err)
		}
		log.Debug("detectors evaluated", "window", w.String(), "findings", len(res.Findings),
			"new", res.New, "updated", res.Updated, "took", r.cfg.Now().Sub(started))
		wait := time.NewTimer(max(started.Add(r.cfg.Interval).Sub(r.cfg.Now()), 0))
		select {
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case <-wait.C:
		}
	}
}

// Metrics count detector evaluations for /metrics.
type Metrics struct {
	Runs     *prometheus.CounterVec   // evaluations by detector and outcome (ok, error)
	Seconds  *prometheus.HistogramVec // evaluation time by detector
	Stored   *prometheus.CounterVec   // finding versions stored, by detector
	LastGood *prometheus.GaugeVec     // Unix time of the last successful evaluation, by detector
}

// NewMetrics creates the metrics and registers them with reg when it is
// not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_detector_runs_total", Help: "Detector evaluations by detector and outcome (ok, error).",
		}, []string{"detector", "outcome"}),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "auditlens_detector_run_seconds", Help: "Time to evaluate one detector over one window and store its findings.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"detector"}),
		Stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_findings_stored_total", Help: "New or changed findings stored, by detector.",
		}, []string{"detector"}),
		LastGood: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "auditlens_detector_last_success_timestamp_seconds", Help: "When the detector last evaluated a window without error.",
		}, []string{"detector"}),
	}
	if reg != nil {
		reg.MustRegister(m.Runs, m.Seconds, m.Stored, m.LastGood)
	}
	return m
}

func (m *Metrics) observe(detector string, took time.Duration, stored int, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	} else {
		m.LastGood.WithLabelValues(detector).SetToCurrentTime()
	}
	m.Runs.WithLabelValues(detector, outcome).Inc()
	m.Seconds.WithLabelValues(detector).Observe(took.Seconds())
	m.Stored.WithLabelValues(detector).Add(float64(stored))
}
