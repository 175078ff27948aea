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
// [WatchLoop] ("watch-loop") finds the static-resourceVersion watch loop
// behind vanishing Endpoints (DOMAIN.md; Kubernetes 1.7.0–1.9.2): a
// reflector (a program's watch: user, user-agent product, namespace,
// selectors) re-watching Services, restart after restart, from stale
// resourceVersions — at or below the highest it resumed from since its
// last relist, from the first restart that went below it; the stale one
// drifts when other Services are deleted during the loop, and the loop
// stays one finding — while the cluster was seen past them (any higher
// resourceVersion: etcd revisions are global), restarts followed by
// the same program deleting Endpoints that no Service create or delete
// explains (a Service write explains the Endpoints writes within
// ReactionWithin after it, nothing later). Its doc comment says exactly
// what it claims and needs. Parameters ([WatchLoopConfig]) and defaults:
//
//	Resources         services    watched resources whose loop is looked for
//	ChurnResource     endpoints   the resource whose deletes (and re-creates) are the symptom
//	OwnerResource     services    whose create/delete explains a churn write right after it
//	MinRestarts       3           restarts from stale resourceVersions that make a loop
//	RetrySpacing      5s          watches closer than this are one restart (quick retries)
//	FollowWithin      30s         a delete this soon after a restart follows it
//	ReactionWithin    10s         an owner write explains the churn writes this long after it
//	PairWithin        30m         longest delete→re-create gap shown as a pair
//	MinIterations     2           restarts followed by churn that make a loop
//	MinFollowedRatio  0.5         least share of restarts followed by churn, to declare a loop
//	IgnoreChurnBy     system:apiserver  writers whose writes never count
//	Settle            2m          restarts younger than this are counted, not yet remembered
//	Remember          168h        how long a reflector's history outlives its last restart
//	MaxEvidence       1000        evidence kept per finding
//
// The defaults hold at real time scales (client-go restarts watches every
// 5–10 minutes; the replay and the endpoints controller act within
// milliseconds of a restart; Endpoints stayed gone for minutes; loops run
// for days) and at compressed test scales (restarts every 10–25 s).
//
// # State across windows
//
// A detector that implements [Stateful] is given a [StateStore] by the
// Runner (serve, detect and import pass the [Repository], over the
// detector_state table). The watch loop remembers there each reflector's
// history once churn followed one of its restarts (where its walk stands:
// the highest resourceVersion since its last relist, whether a loop
// episode runs; the loop's restarts, iterations, stale resourceVersions,
// victims, first and last seen, whether it was declared, the request that
// proved the cluster past it) and each
// cluster's head (the highest resourceVersion seen, the apiservers' user
// agents). Every evaluation adds the restarts of its window that the
// history has not counted yet, so counts add up across overlapping
// windows and restarts of serve, and a declared loop stays one finding
// whose last_seen follows every restart of the loop, even in windows
// without churn.
//
// [Regression] ("watch-rv-regression") finds a client whose successive
// watches of a resource restart from a resourceVersion lower than one it
// already used, without relisting in between — the DELETE-event bug of
// seed 001. Failed watches are left out and a watch-list counts as a
// relist. A regression of the reflector of a stored watch-loop finding,
// to whichever resourceVersion, is information naming it
// (Subjects.PartOf).
// Parameters ([RegressionConfig]): Resources (default all), MaxEvidence.
//
// [RVRollback] ("rv-rollback") finds etcd restored from a snapshot without
// --bump-revision (seed 003): the head — the highest resourceVersion
// successful writes show, per Bucket in the engine — falls by MinDrop or
// more after writes paused (MinGap), and no write shows the old head for
// Hold. Critical when clients watch from above the new head or updates get
// 409 with such a resourceVersion; the finding names them
// (Subjects.Stuck), the 409s and relists, and what controllers deleted or
// created again. A jump up with a relist herd (--bump-revision
// --mark-compacted) is an info finding. It remembers each cluster's head
// and the rollback going on, so that a drop at a window's edge is named
// the same and a rollback lasting days is one finding. Parameters:
// [RVRollbackConfig].
//
// [HeartbeatLoss] ("heartbeat-loss") finds waves of node heartbeat loss
// (seed 004): at least MinNodes kubelets whose Lease renewals and node
// status posts stop within WaveWithin of each other, each after its own
// learnt interval (max(IntervalFactor × median, 1.5 × p90, Floor)), with
// no other request of theirs in the gap, while other clients' events keep
// arriving. Nodes deleted, cordoned or tainted by someone else shortly
// before are taken away on purpose; a gap that only the feed's own
// silence explains is an information finding titled as an audit-feed gap;
// a long wave the active node-lifecycle controller never reacted to is
// unconfirmed information. One finding per wave, remembered across windows
// (Stateful): nodes lost of nodes seen, returns, NotReady marks, taints,
// evictions (critical) and relists. Parameters: [HeartbeatLossConfig].
//
// A heartbeat is a kubelet showing the control plane its node is alive, in
// the two ways the node-lifecycle controller watches: the node's Lease in
// kube-node-lease created (at the kubelet's first start) or renewed
// (update, or patch), and a patch or update of nodes/<node>/status, each
// written by that node's own kubelet, system:node:<node>. Another user's
// write of a Lease or node status (the node-lifecycle controller marking
// it NotReady, the attach/detach controller), a kubelet's write of another
// node's, and reads are none. A request counts once whatever stages the
// log holds, at its request time, when it was served: 2xx, or 409
// Conflict (the kubelet reached the apiserver with a stale
// resourceVersion and retries at once), or no response stage stored.
// 401, 403, 429 and 5xx answers are none: the Lease was not renewed. The
// heartbeats a finding page draws (query.NodeHeartbeats) are exactly
// these; internal/heartbeat holds the SQL both read them with.
//
// Both relist detectors use internal/reflector's definition of a relist:
// a list (a list's first page or a watch-list) of a target — resource,
// namespace, object name and selectors: the same collection or object —
// that the same client (a program instance) had already read or watched
// before. A client's first read of a target is no relist: a node starting,
// or a kubelet reading the ConfigMaps and Secrets of a pod it was just
// given, one object at a time.
//
// [RelistLoop] ("relist-loop") finds a client stuck relisting: its watches
// of one target end within ShortWatch and its next request for that target
// is a relist, MinTurns times in a row, each turn within MaxGap of the one
// before — the "too old resource version" loop. One finding per program
// identity and resource, its turns remembered across windows; critical
// after CriticalAfter.
//
// [RelistHerd] ("relist-herd") finds at least MinClients distinct clients
// relisting one resource within 60 s, Factor times the window's median
// for it, each relist judged against the clients' requests in the window
// and the LookBack before it: one finding per herd, information naming a
// heartbeat-loss or rv-rollback finding that covers its time.
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
