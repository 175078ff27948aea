package alert

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/report"
)

// Metrics count alert deliveries and hold the active-findings gauge.
type Metrics struct {
	// Active is auditlens_findings_active{detector,severity,cluster}: the
	// findings last seen within resolve_after, at the last pass.
	Active     *prometheus.GaugeVec
	Deliveries *prometheus.CounterVec
	Events     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "auditlens_findings_active", Help: "Findings last seen within alerts.resolve_after, by detector, severity and cluster.",
		}, []string{"detector", "severity", "cluster"}),
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
	m.Active.Reset()
	for _, f := range fs {
		m.Active.WithLabelValues(f.Detector, string(f.Severity), f.Cluster).Inc()
	}
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
