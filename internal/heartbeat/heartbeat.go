// Package heartbeat says once what a node heartbeat is in stored audit
// events, for the heartbeat-loss detector (package detect) and the
// heartbeats the finding page draws (heartbeatloss.NodeHeartbeats), so that the
// evidence shows exactly the heartbeats the detector counted.
//
// A heartbeat is a kubelet proving to the control plane that its node is
// alive, in one of the two ways the node-lifecycle controller watches:
//
//   - the node's Lease in kube-node-lease renewed: created by the kubelet
//     when it finds none (at its first start), then updated every renew
//     interval (10 s by default); a patch counts the same;
//   - the node's status posted: a patch (or an update) of
//     nodes/<node>/status.
//
// Both written by that node's kubelet, system:node:<node>: the identity
// the NodeRestriction admission plugin lets write only its own Node and
// Lease. Another user's write of a Lease or a node status is no heartbeat
// (the node-lifecycle controller marking a node NotReady, the attach/detach
// controller's volumesAttached), nor is a kubelet's write of another
// node's; reads (get, list, watch) are none either.
//
// A request counts once, whatever stages the audit policy recorded: they
// share its time (TimeSQL). It counts when the apiserver served it (its
// code, the highest of its stages' — CountsSQL): 2xx; 409 Conflict (the
// kubelet reached the apiserver with a stale resourceVersion, re-reads the
// Lease and retries at once, as after an etcd restore); or 0, when no
// response stage was stored. 401, 403, 429 and 5xx answers are no
// heartbeat: the Lease was not renewed and the node-lifecycle controller
// saw nothing.
package heartbeat

import (
	"fmt"

	"github.com/auditlens/auditlens/internal/auditsql"
)

// UserPrefix starts the user name of every kubelet: system:node:<node>.
const UserPrefix = "system:node:"

// FilterSQL selects the stages of heartbeat requests of audit_events
// (their codes are judged per request, with CountsSQL). The leading
// conditions are on the sort key's and low-cardinality columns; the
// object's name is compared last, on the few rows left.
const FilterSQL = `resource IN ('leases', 'nodes') AND verb IN ('create', 'update', 'patch')
          AND ((resource = 'leases' AND namespace = 'kube-node-lease' AND subresource = '')
            OR (resource = 'nodes' AND subresource = 'status'))
          AND startsWith(user, 'system:node:') AND user = concat('system:node:', name)`

// NodeSQL is the node of a kubelet's request: its user's name after
// system:node: (for a heartbeat, FilterSQL makes it the object's name).
// It is read from user, a low-cardinality column, so that grouping by
// node stays cheap.
const NodeSQL = `substring(user, 13)`

// TimeSQL is when a heartbeat was made, in microseconds: its request's
// received time (auditsql.RequestTime), which every stage of it carries,
// so that grouping by node and TimeSQL counts a request once.
const TimeSQL = auditsql.RequestTime

// CountsSQL is the condition that a heartbeat request whose code (the
// highest of its stages') is the SQL expression code counts: 2xx, 409 or
// 0 (no response stage stored).
func CountsSQL(code string) string {
	return fmt.Sprintf(`((%[1]s) = 0 OR ((%[1]s) >= 200 AND (%[1]s) < 300) OR (%[1]s) = 409)`, code)
}

// User is the user name of node's kubelet.
func User(node string) string { return UserPrefix + node }
