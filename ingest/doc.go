// Package ingest takes Kubernetes audit events in and stores them as rows.
//
// Events arrive two ways:
//
//   - Webhook: kube-apiserver's webhook backend POSTs audit.k8s.io/v1 (or,
//     on old clusters, v1beta1 or 1.7's v1alpha1) EventList batches, 400
//     events by default, to /audit/{cluster} or
//     /audit/{cluster}/{apiserver}. The apiserver retries any non-2xx
//     answer or timeout and drops events when its buffer fills, so the
//     receiver must answer fast and never push back.
//   - OTLP (otlp.go): an OpenTelemetry Collector that tails the log
//     backend's file POSTs OTLP/HTTP logs to /v1/logs (or
//     /otlp/{cluster}[/{apiserver}]/v1/logs), each record's body one event,
//     a string or a map. It shares the webhook's authentication (identify),
//     body reader and spool; a record that is not an event is counted in
//     the answer's partial_success.
//   - Import: audit log files written by the log backend, one Event per line
//     (EventList lines captured from a webhook are accepted too), plain or
//     gzipped, or the exports of managed control planes' audit logs, each
//     line in its cloud provider's envelope (envelope.go: AKS diagnostic
//     records, EKS CloudWatch Logs payloads and exports; envelope_gke.go:
//     GKE Cloud Logging entries, translated into events).
//
// Events do not say who sent them: a Source (source.go) names the cluster
// and, on an HA control plane, which of its apiservers, from the URL path,
// a bearer token or a client certificate (Webhook.source), or import's
// flags. Decoding tags rows with the cluster; the apiserver is set on the
// rows after it and kept with each spool record.
//
// The path of a webhook batch is
//
//	webhook → decode → spool → writer → store
//
// and its stages are:
//
//   - Decode (decode.go, timestamp.go, requesturi.go) validates each event
//     on its own with DecodeBody: one malformed event is a Reject, the rest
//     of the batch is kept; a body that is not audit JSON at all is an error
//     wrapping ErrNotAudit, which the webhook answers with 400. Decoding
//     flattens an event into a store.Row: typed columns, the list and watch
//     options parsed out of the requestURI once (ParseRequestURI), times in
//     UTC microseconds whatever precision the sender wrote (ParseTime), and
//     the event's original bytes as Row.Raw.
//   - Spool (spool.go): the raw bytes of the good events are appended to a
//     local, fsync'd log before the webhook answers 200. That answer is the
//     promise to the apiserver; the store may be slow or down meanwhile.
//   - Writer (writer.go) reads the spool in order, takes the rows the
//     spool still holds decoded or decodes each spooled event again
//     (DecodeEvent), drops events whose (cluster, auditID, stage)
//     is already stored, which is what an apiserver retry produces, inserts
//     large batches and then checkpoints the spool. Each event is stored as
//     its residual, what the typed columns cannot restore of Row.Raw
//     (package store/residual), with the raw column empty.
//   - Store is package store: the embedded engine or a ClickHouse server.
//
// Import (importer.go) skips the spool: it decodes lines with
// DecodeImportLine, which tells the envelope of each line by cheap checks
// (a line the apiserver wrote goes straight to DecodeLine's decoder) and
// takes the cluster from the envelope unless the importer fixes it, and
// hands rows to the same Writer, so re-importing a file stores nothing twice.
//
// Decoding uses github.com/goccy/go-json into purpose-built structs, several
// times faster than encoding/json into the upstream k8s.io/apiserver types
// (BenchmarkDecodeBody against BenchmarkDecodeBodyStdlibK8sTypes). The
// strings of a decoded Row point into its Raw bytes instead of being copied;
// see Batch.
package ingest
