package heartbeatloss

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// Name is the name of the heartbeat-loss detector.
const Name = "heartbeat-loss"

// Evidence roles of heartbeat-loss findings. The UI draws a lane per node
// from them: its heartbeats up to the gap, the gap, the NotReady and taint
// marks, the evictions and the return.
const (
	// RoleLastHeartbeat is a node's last heartbeat before its gap (Name is
	// the node).
	RoleLastHeartbeat = "last-heartbeat"
	// RoleHeartbeatResumed is a node's first heartbeat after its gap.
	RoleHeartbeatResumed = "heartbeat-resumed"
	// RoleNotReady is a node-lifecycle controller write of a lost node's
	// status (marking it NotReady or Unknown).
	RoleNotReady = "not-ready"
	// RoleTaint is a node-lifecycle controller write of a lost node itself
	// (the node.kubernetes.io/unreachable taint, and its removal).
	RoleTaint = "taint"
	// RoleEviction is a pod delete or eviction by the node-lifecycle or
	// taint-eviction controller during the wave (Namespace/Name: the pod).
	RoleEviction = "eviction"
)

// Config holds the heartbeat-loss detector's parameters.
// Zero fields take the defaults, which hold at real time scales (kubelets
// renew their Lease every 10 s and post status every 10 s to 5 min; the
// node-lifecycle controller marks a node NotReady after 40–50 s and
// evicts after 5 min) and at compressed test scales (heartbeats every
// 1–2 s).
type Config struct {
	// Lookback is how far before the window's start heartbeats are read,
	// to learn each node's interval and to see the start of a wave that a
	// window shows only the end of (default 1h).
	Lookback time.Duration
	// MinHeartbeats is the fewest heartbeats of a node in the lookback and
	// window that let its interval be learnt (default 5). Nodes with fewer
	// are not judged, unless a remembered wave holds them.
	MinHeartbeats int
	// IntervalFactor and Floor: a node is lost when no heartbeat comes for
	// longer than max(IntervalFactor × its median interval, 1.5 × its
	// 90th-percentile interval, Floor) (defaults 3 and 30s). With 10 s
	// Lease renewals that is 30 s, less than the controller's 40–50 s
	// grace period; with status every 5 min only (a policy that drops
	// Leases) it is 15 min.
	IntervalFactor float64
	Floor          time.Duration
	// SilenceMin: a stretch in which the cluster's audit feed holds no
	// event at all explains a node's missing heartbeats when it lasts at
	// least the node's median interval and SilenceMin (default 5s): for
	// that long nobody was served, so the node could not have been either.
	// A gap whose part outside such silences is shorter than the node's
	// threshold is the feed's (an apiserver restart of 20 s after a node's
	// last heartbeat 9 s before it), not the node's.
	SilenceMin time.Duration
	// Settle: a node not back by the end of the feed is lost only when the
	// feed reaches this far past its threshold (default 1m): webhook
	// batches wait up to 30 s, and the apiservers of an HA control plane
	// deliver their batches independently.
	Settle time.Duration
	// WaveWithin: losses that begin within this long of a wave's first one
	// (or within the node's own interval, when that is longer) belong to
	// the wave (default 1m). A load balancer failover drops every
	// kubelet's connection at once; each kubelet's last heartbeat came at
	// most one interval before.
	WaveWithin time.Duration
	// MinNodes is the fewest lost nodes that make a wave (default 2). A
	// single node going away is the node-lifecycle controller's business,
	// not a wave: no finding.
	MinNodes int
	// WarnShare is the share of the nodes seen heartbeating before a wave
	// from which it is a warning (default 0.3); a smaller wave is
	// information. Evictions make any wave critical.
	WarnShare float64
	// IntentBefore: a node deleted during or around its gap, or written
	// (cordoned, tainted) by someone other than its kubelet and the
	// node-lifecycle controller within this long before it, was taken away
	// on purpose (scale-down, drain, maintenance): not lost (default 30m).
	IntentBefore time.Duration
	// After is how long after a wave's last node came back its
	// consequences (taint removal, relists) are still gathered
	// (default 2m).
	After time.Duration
	// ReactWithin: a wave that has lasted this long with the
	// node-lifecycle controller active and no reaction of it to any lost
	// node (no NotReady mark, taint or eviction) is unconfirmed: the
	// controller reads the nodes' Leases from etcd, so the nodes most
	// likely kept renewing and only their audit events are missing (one
	// apiserver's audit backend not delivering, a policy change). It is
	// reported as information (default 3m: with the default 40–50 s grace
	// period the controller marks a lost node NotReady within a minute;
	// set it above --node-monitor-grace-period).
	ReactWithin time.Duration
	// LifecycleUsers are the node-lifecycle controller's identities,
	// whose writes of lost nodes are the NotReady marks and taints
	// (default: system:serviceaccount:kube-system:node-controller and
	// system:kube-controller-manager, without service-account
	// credentials).
	LifecycleUsers []string
	// EvictionUsers are the identities whose pod deletes and evictions
	// during a wave are its evictions (default: the node-lifecycle
	// controller's and system:serviceaccount:kube-system:taint-eviction-controller,
	// which took over taint-based eviction in Kubernetes 1.29).
	EvictionUsers []string
	// RoutineNodeWriters are controllers whose writes of a node show no
	// intent to take it away (default: the ttl and attach-detach
	// controllers' service accounts).
	RoutineNodeWriters []string
	// Remember is how long a wave is remembered after it was last seen
	// (default 7 days).
	Remember time.Duration
	// MaxEvidence bounds a finding's evidence (default DefaultMaxEvidence).
	MaxEvidence int
}

func (c *Config) setDefaults() {
	if c.Lookback <= 0 {
		c.Lookback = time.Hour
	}
	if c.MinHeartbeats <= 0 {
		c.MinHeartbeats = 5
	}
	if c.IntervalFactor <= 0 {
		c.IntervalFactor = 3
	}
	if c.Floor <= 0 {
		c.Floor = 30 * time.Second
	}
	if c.SilenceMin <= 0 {
		c.SilenceMin = 5 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = time.Minute
	}
	if c.WaveWithin <= 0 {
		c.WaveWithin = time.Minute
	}
	if c.MinNodes <= 0 {
		c.MinNodes = 2
	}
	if c.WarnShare <= 0 {
		c.WarnShare = 0.3
	}
	if c.IntentBefore <= 0 {
		c.IntentBefore = 30 * time.Minute
	}
	if c.After <= 0 {
		c.After = 2 * time.Minute
	}
	if c.ReactWithin <= 0 {
		c.ReactWithin = 3 * time.Minute
	}
	if c.LifecycleUsers == nil {
		c.LifecycleUsers = []string{"system:serviceaccount:kube-system:node-controller", "system:kube-controller-manager"}
	}
	if c.EvictionUsers == nil {
		c.EvictionUsers = append(slices.Clone(c.LifecycleUsers), "system:serviceaccount:kube-system:taint-eviction-controller")
	}
	if c.RoutineNodeWriters == nil {
		c.RoutineNodeWriters = []string{"system:serviceaccount:kube-system:ttl-controller",
			"system:serviceaccount:kube-system:attach-detach-controller"}
	}
	if c.Remember <= 0 {
		c.Remember = 7 * 24 * time.Hour
	}
	if c.MaxEvidence <= 0 {
		c.MaxEvidence = detect.DefaultMaxEvidence
	}
}

// Validate reports parameters that cannot work.
func (c Config) Validate() error {
	c.setDefaults()
	if c.WarnShare > 1 {
		return fmt.Errorf("heartbeat-loss: WarnShare %v is a share of nodes, at most 1", c.WarnShare)
	}
	return nil
}

// HeartbeatLoss detects waves of node heartbeat loss (DOMAIN.md, seed 004):
// many kubelets stop reaching the apiserver at the same moment while the
// rest of the cluster's audit feed goes on — a load balancer failover that
// silently dropped their connections, each kubelet's single HTTP/2
// connection hanging for ~15 minutes with no ping to notice, every node
// NotReady and pods evicted en masse.
//
// Heartbeats are as the package documentation defines them (Lease
// renewals and node status posts by the node's own kubelet, served or
// answered 409).
//
// A node's interval is learnt from the data: the median and 90th
// percentile of the gaps between its heartbeats over the window and the
// Lookback before it (Lease renewals every 10 s dominate; a node seen only
// through status updates — a policy that drops Leases — has a longer,
// irregular interval). A node is lost when no heartbeat comes for longer
// than max(IntervalFactor × median, 1.5 × p90, Floor) while the cluster's
// audit feed shows events past that time. It is not lost when it was
// deleted, or written by someone other than its kubelet and routine
// controllers within IntentBefore before its gap (a drain, a cordon, a
// scale-down).
//
// A wave is at least MinNodes lost nodes whose losses began within
// WaveWithin of the first. When the audit feed itself fell silent (no
// event at all from the cluster) for most of the gaps, the gaps prove
// nothing about the nodes: that is one information finding titled as an
// audit-feed gap, never a heartbeat-loss warning. Otherwise one finding
// per wave: its start, the nodes lost and the nodes seen heartbeating
// before (Subjects.NodesLost, NodesSeen), which nodes (Objects of resource
// nodes), how long, when each came back, and the consequences as evidence.
// Severity: critical when the wave's evictions are seen, warning when at
// least WarnShare of the nodes were lost, information otherwise.
//
// Evidence roles: "last-heartbeat" (a node's last heartbeat before its
// gap; Name is the node), "heartbeat-resumed" (its first after),
// "not-ready" (a node-lifecycle controller write of the node's status),
// "taint" (a node-lifecycle controller write of the node itself: the
// node.kubernetes.io/unreachable taint and its removal), "eviction" (a pod
// delete or pods/eviction by the node-lifecycle or taint-eviction
// controller during the wave; Namespace/Name is the pod, also among the
// Objects), "relist" (a returning kubelet's list soon after it came back).
//
// With a StateStore (see EvaluateState) a wave is remembered: a wave that
// lasts longer than the Lookback stays one finding whose nodes, returns
// and last_seen follow it across windows.
type HeartbeatLoss struct{ cfg Config }

// New returns the detector with cfg's parameters.
func New(cfg Config) *HeartbeatLoss {
	cfg.setDefaults()
	return &HeartbeatLoss{cfg: cfg}
}

// Name implements Detector.
func (d *HeartbeatLoss) Name() string { return Name }

// Config returns the parameters in effect.
func (d *HeartbeatLoss) Config() Config { return d.cfg }

// Evaluate implements Detector: one window (and its lookback), nothing
// remembered.
func (d *HeartbeatLoss) Evaluate(ctx context.Context, q detect.Querier, w detect.Window) ([]detect.Finding, error) {
	return d.EvaluateState(ctx, q, nil, w)
}

// EvaluateState implements Stateful: the window, with the waves earlier
// evaluations remembered in st (nil: none).
func (d *HeartbeatLoss) EvaluateState(ctx context.Context, q detect.Querier, st detect.StateStore, w detect.Window) ([]detect.Finding, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	mem, err := d.loadWaves(ctx, st, w)
	if err != nil {
		return nil, err
	}
	span := detect.Window{Since: w.Since.Add(-d.cfg.Lookback), Until: w.Until, Clusters: w.Clusters}
	nodes, err := d.selectNodes(ctx, q, span)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 && len(mem) == 0 {
		return nil, nil
	}
	// The feed's head matters only from where a node could be silent
	// long enough (or a remembered wave was last seen): in the usual case,
	// every node heartbeating up to the end, the engine reads little.
	from := w.Until.UnixMicro()
	for _, n := range nodes {
		if n.N >= d.cfg.MinHeartbeats {
			from = min(from, n.LastT+n.Thr+usIn(d.cfg.Settle))
		}
	}
	for _, wv := range mem {
		if wv.open() {
			from = min(from, wv.Last)
		}
	}
	heads := map[string]int64{}
	if from < w.Until.UnixMicro() {
		hw := w
		hw.Since = later(w.Since, detect.Micros(from))
		if heads, err = selectHeads(ctx, q, hw); err != nil {
			return nil, err
		}
	}
	ev := &hbEval{d: d, q: q, w: w, span: span, nodes: nodes, heads: heads, mem: mem}
	return ev.run(ctx, st)
}

// usIn converts a duration to microseconds.
func usIn(d time.Duration) int64 { return d.Microseconds() }
