// Package detect finds known failure patterns in stored audit events and
// keeps them as findings.
//
// # Framework
//
// A [Detector] reads a [Window] of events (Since <= ts < Until, some or all
// clusters) through a [Querier] — store.Store's Select, every value a
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
// behind vanishing Endpoints (DOMAIN.md; Kubernetes 1.7.0–1.9.2): a client
// re-watching Services from the same resourceVersion across restarts while
// Services demonstrably moved on, each restart followed by Endpoints
// deleted and re-created for Services nobody deleted. Its parameters
// ([WatchLoopConfig]) and their defaults:
//
//	Resources         services    watched resources whose loop is looked for
//	ChurnResource     endpoints   the resource whose delete→create pairs are the symptom
//	OwnerResource     services    a delete or create of it (same namespace/name) in the window explains a pair
//	MinRestarts       3           restarts from one resourceVersion that make it "static"
//	RetrySpacing      5s          watches closer than this are one restart (quick retries)
//	FollowWithin      30s         a delete this soon after a restart follows it
//	PairWithin        15m         longest delete→create gap of a pair
//	MinIterations     2           restarts followed by churn that make a loop
//	MinFollowedRatio  0.5         least share of restarts followed by churn
//	IgnoreChurnBy     system:apiserver  writers whose pairs never count
//	MaxEvidence       1000        evidence kept per finding
//
// The defaults hold at real time scales (client-go restarts watches every
// 5–10 minutes; the replay and the endpoints controller act within seconds
// of a restart; Endpoints stayed gone for minutes) and at compressed test
// scales (restarts every 10–20 s, re-creation within seconds).
//
// [Regression] ("watch-rv-regression") finds a client whose successive
// watches of a resource restart from a resourceVersion lower than one it
// already used, without relisting in between — the DELETE-event bug of
// seed 001. Parameters ([RegressionConfig]): Resources (default all),
// MaxEvidence.
//
// # Evidence roles
//
// Evidence events carry a role: "static-watch", "endpoints-delete",
// "endpoints-create" (linked by watch_audit_id to the restart they
// followed) and "rv-advanced" for watch-loop; "watch-before" and
// "watch-regressed" for watch-rv-regression.
package detect
