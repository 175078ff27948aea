package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/report"
)

// Source is where the notifier reads findings; *detect.Repository is one.
type Source interface {
	List(ctx context.Context, f detect.ListFilter) ([]detect.Finding, error)
}

// Event says why a finding is sent.
type Event string

// Events, in the order a finding goes through them.
const (
	New       Event = "new"       // first seen (or seen again after it resolved)
	Escalated Event = "escalated" // its severity rose
	Repeat    Event = "repeat"    // still active: re-sent to Alertmanager every Config.Repeat
	Resolved  Event = "resolved"  // not seen for Config.ResolveAfter
)

// Options are the notifier's collaborators; all are optional.
type Options struct {
	Clock   report.Clock // default report.SystemClock
	Client  *http.Client // default a client without timeout (each post has its own)
	Logger  *slog.Logger
	Metrics *Metrics
	// StatePath is a file where the notifier keeps what it has sent, so
	// that a restart neither sends an active finding as new again nor
	// forgets to send its resolution. Empty: kept in memory only.
	StatePath string
}

// Notifier pushes findings to the routes of a Config as they happen.
type Notifier struct {
	cfg    Config
	src    Source
	clock  report.Clock
	client *http.Client
	log    *slog.Logger
	m      *Metrics
	// sent holds, per route, what was last sent of each active finding.
	sent      map[string]map[string]sent
	statePath string
}

type sent struct {
	f  detect.Finding // as last sent
	at time.Time
}

// NewNotifier returns a notifier over src.
func NewNotifier(cfg Config, src Source, o Options) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if o.Clock == nil {
		o.Clock = report.SystemClock{}
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: cfg, src: src, clock: o.Clock, client: o.Client, log: o.Logger, m: o.Metrics,
		sent: map[string]map[string]sent{}, statePath: o.StatePath}
	for _, r := range cfg.Routes {
		n.sent[r.Name] = map[string]sent{}
	}
	if n.statePath != "" {
		if err := loadState(n.statePath, n.sent); err != nil {
			// Starting afresh sends the active findings again: a
			// duplicate is better than no alerts at all.
			o.Logger.Warn("alerts: cannot read what was sent before; active findings are sent again", "err", err)
			for _, r := range cfg.Routes {
				n.sent[r.Name] = map[string]sent{}
			}
		}
	}
	return n, nil
}

// Pass looks at the findings once: it sets the active-findings gauge and
// sends every route its new, escalated, due-for-repeat and resolved
// findings. A failed delivery is tried again at the next pass (the state
// is only advanced by a delivery that succeeded). It returns the
// deliveries made.
func (n *Notifier) Pass(ctx context.Context) ([]report.Delivery, error) {
	now := n.clock.Now()
	fs, err := n.src.List(ctx, detect.ListFilter{Since: now.Add(-n.cfg.ResolveAfter)})
	if err != nil {
		return nil, fmt.Errorf("listing findings seen since %s: %w", now.Add(-n.cfg.ResolveAfter).Format(time.RFC3339), err)
	}
	n.m.setActive(fs)
	var out []report.Delivery
	for _, r := range n.cfg.Routes {
		evs := n.events(r, fs, now)
		if len(evs) == 0 {
			continue
		}
		ds := n.deliver(ctx, r, evs, now)
		out = append(out, ds...)
	}
	if n.statePath != "" && slices.ContainsFunc(out, func(d report.Delivery) bool { return d.OK }) {
		if err := saveState(n.statePath, n.sent); err != nil {
			n.log.Warn("alerts: cannot keep what was sent; a restart may send it again", "path", n.statePath, "err", err)
		}
	}
	return out, nil
}

// routed is one finding a route is about to send, and why.
type routed struct {
	f  detect.Finding
	ev Event
	// prev is the severity last sent, for an escalation.
	prev detect.Severity
}

// events computes what r sends at now.
func (n *Notifier) events(r Route, fs []detect.Finding, now time.Time) []routed {
	st := n.sent[r.Name]
	seen := map[string]bool{}
	var out []routed
	for _, f := range fs {
		if !r.selects(f) {
			continue
		}
		seen[f.ID] = true
		prev, ok := st[f.ID]
		switch {
		case !ok:
			out = append(out, routed{f: f, ev: New})
		case f.Severity != prev.f.Severity && f.Severity.AtLeast(prev.f.Severity):
			out = append(out, routed{f: f, ev: Escalated, prev: prev.f.Severity})
		case r.Kind() == "alertmanager" && now.Sub(prev.at) >= n.cfg.Repeat:
			out = append(out, routed{f: f, ev: Repeat})
		}
	}
	var gone []string
	for id := range st {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		out = append(out, routed{f: st[id].f, ev: Resolved})
	}
	return out
}

// deliver sends evs to r's target and advances the state of those sent.
func (n *Notifier) deliver(ctx context.Context, r Route, evs []routed, now time.Time) []report.Delivery {
	var ds []report.Delivery
	advance := func(d report.Delivery, evs []routed) {
		n.m.delivered(r, d)
		ds = append(ds, d)
		if !d.OK {
			n.log.Warn("alert delivery failed", "route", r.Name, "target", d.Target, "findings", len(evs), "attempts", d.Attempts, "err", d.Error)
			return
		}
		for _, e := range evs {
			n.m.event(r, e.ev)
			if e.ev == Resolved {
				delete(n.sent[r.Name], e.f.ID)
			} else {
				n.sent[r.Name][e.f.ID] = sent{f: e.f, at: now}
			}
		}
	}
	if r.Kind() == "alertmanager" {
		body, err := json.Marshal(n.alertmanagerAlerts(evs, now))
		if err != nil {
			advance(report.Delivery{Target: r.Alertmanager, At: now, Error: err.Error()}, evs)
			return ds
		}
		// Alertmanager's own client gives up quickly and re-sends at the
		// next evaluation; so do we, with few retries.
		w := report.Webhook{URL: r.Alertmanager + "/api/v2/alerts", Retries: 2, Backoff: report.Duration(time.Second)}
		advance(report.PostBody(ctx, n.client, n.clock, w, body, "application/json"), evs)
		return ds
	}
	for _, e := range evs {
		if e.ev == Repeat {
			continue
		}
		body, err := n.webhookBody(r, e, now)
		if err != nil {
			advance(report.Delivery{Target: r.Webhook.URL, At: now, Error: err.Error()}, []routed{e})
			continue
		}
		advance(report.PostBody(ctx, n.client, n.clock, r.Webhook, body, "application/json"), []routed{e})
	}
	return ds
}

// Run makes a pass every Interval until ctx ends; errors are logged.
func (n *Notifier) Run(ctx context.Context) error {
	n.log.Info("alerts running", "routes", len(n.cfg.Routes), "interval", n.cfg.Interval, "resolve_after", n.cfg.ResolveAfter, "repeat", n.cfg.Repeat)
	for {
		if _, err := n.Pass(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("alerts pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.clock.After(n.cfg.Interval):
		}
	}
}

// Link is the finding's page in the UI, or "" without Config.UIURL.
func (n *Notifier) Link(id string) string {
	if n.cfg.UIURL == "" {
		return ""
	}
	return n.cfg.UIURL + "/findings/" + id
}
