package ingest

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ingest counters exported on /metrics. Per-event facts are
// counted here instead of logged.
type Metrics struct {
	Requests     *prometheus.CounterVec // webhook requests by HTTP status code
	Received     *prometheus.CounterVec // events accepted into the spool, by cluster
	Rejected     *prometheus.CounterVec // malformed events, by cluster
	Redacted     prometheus.Counter     // events with parts cut out before spooling
	Stored       prometheus.Counter
	Duplicates   prometheus.Counter
	StoreErrors  prometheus.Counter
	BatchSeconds prometheus.Histogram
	BatchRows    prometheus.Histogram
	SpoolSeconds prometheus.Histogram
	OTLPRequests *prometheus.CounterVec // OTLP logs requests by HTTP status code
	OTLPRejected *prometheus.CounterVec // OTLP log records rejected, by reason

	spoolPtr atomic.Pointer[Spool]
}

// NewMetrics creates the metrics and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_webhook_requests_total", Help: "Webhook requests by HTTP status code.",
		}, []string{"code"}),
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_events_received_total", Help: "Events accepted (durably spooled or imported), by cluster.",
		}, []string{"cluster"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_events_rejected_total", Help: "Malformed events rejected on their own, by cluster.",
		}, []string{"cluster"}),
		Redacted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_events_redacted_total", Help: "Events with parts cut out before they were spooled (serve --redact).",
		}),
		Stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_events_stored_total", Help: "Events written to the store.",
		}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_events_duplicate_total", Help: "Events dropped because their (cluster, auditID, stage) was already stored.",
		}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_store_errors_total", Help: "Failed store operations of the writer (retried).",
		}),
		BatchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "auditlens_writer_batch_seconds", Help: "Time to deduplicate and insert one batch.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		BatchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "auditlens_writer_batch_rows", Help: "Rows per insert batch before deduplication.",
			Buckets: prometheus.ExponentialBuckets(100, 2, 10),
		}),
		SpoolSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "auditlens_spool_append_seconds", Help: "Time for a webhook batch to become durable in the spool.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		OTLPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_otlp_requests_total", Help: "OTLP logs requests (POST /v1/logs) by HTTP status code.",
		}, []string{"code"}),
		OTLPRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_otlp_log_records_rejected_total",
			Help: "OTLP log records rejected, by reason: no_cluster, body_type (neither a string nor a map), not_audit, malformed_event.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Received, m.Rejected, m.Redacted, m.Stored, m.Duplicates, m.StoreErrors,
			m.BatchSeconds, m.BatchRows, m.SpoolSeconds, m.OTLPRequests, m.OTLPRejected,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "auditlens_spool_bytes", Help: "Bytes in spool segments not yet deleted.",
			}, func() float64 { return float64(m.spoolStats().Bytes) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "auditlens_spool_pending_batches", Help: "Acknowledged batches not yet stored.",
			}, func() float64 { return float64(m.spoolStats().PendingRecords) }),
		)
	}
	return m
}

// WatchSpool makes the spool gauges report sp.
func (m *Metrics) WatchSpool(sp *Spool) { m.spoolPtr.Store(sp) }

func (m *Metrics) spoolStats() SpoolStats {
	if sp := m.spoolPtr.Load(); sp != nil {
		return sp.Stats()
	}
	return SpoolStats{}
}
