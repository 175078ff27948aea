package alert

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/report"
)

// Metrics count alert deliveries and hold the active-findings gauge.
type Metrics struct {
	// Active is auditlens_findings_active{detector,severity,cluster}: the
	// findings last seen within resolve_after, at the last pass.
	Active     *activeGauge
	Deliveries *prometheus.CounterVec
	Events     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Active: &activeGauge{desc: prometheus.NewDesc("auditlens_findings_active",
			"Findings last seen within alerts.resolve_after, by detector, severity and cluster.", []string{"detector", "severity", "cluster"}, nil)},
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_alert_deliveries_total", Help: "Alert deliveries by route, kind (alertmanager, webhook) and outcome (ok, error).",
		}, []string{"route", "kind", "outcome"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_alert_events_total", Help: "Findings delivered by route and event (new, escalated, repeat, resolved).",
		}, []string{"route", "event"}),
	}
	if reg != nil {
		reg.MustRegister(m.Active, m.Deliveries, m.Events)
	}
	return m
}

func (m *Metrics) setActive(fs []detect.Finding) {
	if m == nil {
		return
	}
	counts := map[[3]string]float64{}
	for _, f := range fs {
		counts[[3]string{f.Detector, string(f.Severity), f.Cluster}]++
	}
	m.Active.mu.Lock()
	m.Active.counts = counts
	m.Active.mu.Unlock()
}

// activeGauge is the active-findings gauge as one snapshot: a pass
// replaces all its series at once, so a scrape never sees a pass half
// done (as a GaugeVec's Reset and Set would show it).
type activeGauge struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	counts map[[3]string]float64
}

func (g *activeGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *activeGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, v := range g.counts {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, k[0], k[1], k[2])
	}
}

// value returns one series' value (0 when absent).
func (g *activeGauge) value(detector, severity, cluster string) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts[[3]string{detector, severity, cluster}]
}

func (m *Metrics) delivered(r Route, d report.Delivery) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !d.OK {
		outcome = "error"
	}
	m.Deliveries.WithLabelValues(r.Name, r.Kind(), outcome).Inc()
}

func (m *Metrics) event(r Route, e Event) {
	if m == nil {
		return
	}
	m.Events.WithLabelValues(r.Name, string(e)).Inc()
}
