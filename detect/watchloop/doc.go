// Package watchloop holds the detectors of watches resumed from stale
// resourceVersions: "watch-loop" and "watch-rv-regression".
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
// what it claims and needs. Parameters ([Config]) and defaults:
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
// The watch loop is [detect.Stateful]: the Runner gives it a
// [detect.StateStore] (the findings repository, over the detector_state
// table). It remembers there each reflector's
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
package watchloop
