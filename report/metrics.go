package report

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the scheduler's runs and deliveries for /metrics.
type Metrics struct {
	Runs       *prometheus.CounterVec
	Seconds    *prometheus.HistogramVec
	Deliveries *prometheus.CounterVec
	LastGood   *prometheus.GaugeVec
}

// NewMetrics creates the scheduler's metrics and registers them with reg
// (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_report_runs_total", Help: "Scheduled report runs by report and outcome (ok, error).",
		}, []string{"report", "outcome"}),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "auditlens_report_run_seconds", Help: "Time to build, store and deliver one scheduled report.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"report"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_report_deliveries_total", Help: "Report deliveries by report, kind (file, webhook) and outcome (ok, error).",
		}, []string{"report", "kind", "outcome"}),
		LastGood: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "auditlens_report_last_success_timestamp_seconds", Help: "When the report last ran without error (deliveries may still have failed).",
		}, []string{"report"}),
	}
	if reg != nil {
		reg.MustRegister(m.Runs, m.Seconds, m.Deliveries, m.LastGood)
	}
	return m
}

func (m *Metrics) observe(name string, took time.Duration, r Report, err error, now time.Time) {
	if m == nil {
		return
	}
	m.Seconds.WithLabelValues(name).Observe(took.Seconds())
	if err != nil {
		m.Runs.WithLabelValues(name, "error").Inc()
	} else {
		m.Runs.WithLabelValues(name, "ok").Inc()
		m.LastGood.WithLabelValues(name).Set(float64(now.UnixNano()) / 1e9)
	}
	for _, d := range r.Deliveries {
		kind := "file"
		if d.Status != 0 || isURL(d.Target) {
			kind = "webhook"
		}
		outcome := "ok"
		if !d.OK {
			outcome = "error"
		}
		m.Deliveries.WithLabelValues(name, kind, outcome).Inc()
	}
}

func isURL(s string) bool {
	return len(s) > 7 && (s[:7] == "http://" || (len(s) > 8 && s[:8] == "https://"))
}
