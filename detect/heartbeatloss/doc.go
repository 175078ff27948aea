// Package heartbeatloss holds the "heartbeat-loss" detector.
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
// ([detect.Stateful]): nodes lost of nodes seen, returns, NotReady marks, taints,
// evictions (critical) and relists. Parameters: [Config].
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
// heartbeats a finding page draws ([NodeHeartbeats]) are exactly
// these; internal/heartbeat holds the SQL both read them with.
package heartbeatloss
