// Package detect finds known failure patterns in stored audit events and
// keeps them as findings.
//
// # Framework
//
// A [Detector] reads a [Window] of events (Since <= ts < Until, some or all
// clusters) through a [Querier] — store.Store's typed reads, every value a
// server-side {name:Type} parameter — and returns [Finding]s. A finding's ID
// is a hash of the detector, the cluster and what identifies the incident
// ([FindingID]; for the watch loop: the client, the resource and the static
// resourceVersion), so the same incident found again has the same ID.
//
// The [Runner] evaluates detectors and keeps their findings in a
// [FindingStore] (the [Repository] over the findings table): a finding
// found again is merged into the stored one ([Merge], or the detector's own
// [Merger]): first_seen is the earliest, last_seen the latest, objects and
// evidence the union, counts recomputed. [Runner.Run] evaluates every
// Interval over the Window that ends then (serve: windows overlap, so an
// incident that spans a window's edge stays one finding, updated in place);
// [Runner.RunOnce] evaluates one window (import, scan, detect). A finding
// that did not change is not stored again. Time comes from an injected
// clock.
//
// # Detectors
//
// Each detector lives in a package of its own, with its parameters, its
// queries, what it needs from the audit policy and its tests; the reads
// they share are in [github.com/auditlens/auditlens/detect/events], and
// [github.com/auditlens/auditlens/detect/detectors] lists them all with
// their configuration:
//
//   - watchloop: "watch-loop", the static-resourceVersion watch loop
//     behind vanishing Endpoints, and "watch-rv-regression", a watch
//     resumed from a lower resourceVersion than its client had used;
//   - heartbeatloss: "heartbeat-loss", waves of nodes whose kubelets
//     stopped renewing their Leases and status;
//   - rollback: "rv-rollback", etcd restored from a snapshot without
//     --bump-revision;
//   - relist: "relist-loop", a client stuck relisting, and "relist-herd",
//     many clients relisting one resource at once.
//
// # State across windows
//
// A detector that implements [Stateful] is given a [StateStore] by the
// Runner (serve, detect and import pass the [Repository], over the
// detector_state table), so that what it learnt outlives a window and a
// restart of serve: an incident that runs for days stays one finding.
//
// # Evidence roles
//
// Evidence events carry a role: "static-watch", "endpoints-delete",
// "endpoints-create" (linked by watch_audit_id to the restart they
// followed) and "rv-advanced" for watch-loop; "watch-before" and
// "watch-regressed" for watch-rv-regression; "head-before", "head-after",
// "future-watch", "conflict", "relist" and "churn" for rv-rollback;
// "last-heartbeat", "heartbeat-resumed", "not-ready", "taint", "eviction"
// and "relist" for heartbeat-loss; "short-watch" and "relist" (linked by
// watch_audit_id to the watch it followed) for relist-loop; "relist" (one
// per client) for relist-herd.
package detect
