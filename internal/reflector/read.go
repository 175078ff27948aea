package reflector

import "github.com/auditlens/auditlens/internal/auditsql"

// Reads and relists, once, for the relist detectors and their evidence.
//
// A read (ReadSQL) reads a collection or an object from its start: a
// list's first page, a watch-list, or a get. A list (ListSQL) is the
// first two: a full list of a collection the apiserver serves.
//
// A relist is a read by a client (ClientSQL) of a target (TargetSQL) the
// same client had already requested before — read, paged through or
// watched: a client watches from the resourceVersion of an earlier read —
// within the rows judged, which reach a look-back before the time whose
// reads are judged. A client's first read of a target is no relist: a
// node or a controller starting, or a kubelet reading, for a pod it was
// just given, the pod's ConfigMaps and Secrets (one field-selected read
// per object). A kubelet reading an object again after it stopped
// watching it (the last pod using it was gone) is a relist, as it is.
// But what a namespace held ends with the namespace: once it is deleted,
// a read of the same names in it (the namespace created again under the
// same name, its kube-root-ca.crt and the new Pods' ConfigMaps and
// Secrets read by every kubelet the Pods land on) reads new objects, a
// first read. And what a client may no longer read it no longer holds: a
// request of the target refused with 403 Forbidden ends what the client
// had read of it, and its next read is a first read. That is the Node
// authorizer at work when a kubelet is given a new Pod that uses a
// Secret or ConfigMap the kubelet had read for an earlier Pod: the
// kubelet's access went with the earlier Pod, its first request for the
// new one races the authorizer's graph and is refused, and the read that
// follows is for the new Pod. Clients that relist because their watches
// broke (a herd) still may read what they held, and are not refused.
//
// The rule is RelistSQL, over one row per request (grouped by audit ID)
// that carries the columns r_client (ClientSQL), r_target (TargetSQL),
// r_start (the request's start: min(StartSQL) of its stages), r_read
// (which requests are judged: ReadSQL, or ListSQL for lists only) and
// r_epoch (when the request's namespace was last deleted, or the client
// last refused the target, before it; 0 if never: EpochSQL), the rows
// being the client's successful requests of SeenSQL.

// StartSQL is when a request was received, in microseconds
// (auditsql.RequestTime). min() over a request's stages is its start.
const StartSQL = auditsql.RequestTime

// ListSQL is true for a list of a collection from its start: a list
// without a continue token (the further pages of a paginated list are
// part of it) or a watch-list (a watch with sendInitialEvents=true, how
// reflectors list since 1.32). The apiserver accepts sendInitialEvents
// only with resourceVersionMatch=NotOlderThan, and resourceVersionMatch
// on a watch only with sendInitialEvents, so the small req_rv_match
// column tells a watch-list without reading request URIs.
const ListSQL = `((verb = 'list' AND req_continue = '') OR (verb = 'watch' AND req_rv_match = 'NotOlderThan'))`

// ReadSQL is true for a read: a list (ListSQL) or a get of an object.
const ReadSQL = `(verb = 'get' OR ` + ListSQL + `)`

// SeenSQL is true for a request after which its client holds the target:
// a get, any page of a list, or a watch. Reads are judged against the
// client's earlier requests of these.
const SeenSQL = `verb IN ('get', 'list', 'watch')`

// TargetSQL hashes what a request reads (a UInt64): the resource and its
// API group, subresource and namespace, the object's name, and the label
// and field selectors — the same collection or object. A field selector
// that only names the object (metadata.name=<name>, which the apiserver
// also puts in objectRef.name) counts as the name, so a get of an object
// and a list or watch of it by field selector read the same target.
const TargetSQL = `cityHash64(api_group, resource, subresource, namespace, name, label_selector,
    if(name != '' AND field_selector = concat('metadata.name=', name), '', field_selector))`

// ClientSQL hashes who reads (a UInt64): a program instance — the user,
// the user agent's product (ProgramSQL), the address, and for the
// apiservers' loopback informers which apiserver runs them. The pods of a
// Deployment, or the kube-proxies of different nodes, are different
// clients; one program's many informers are one. A node's own user
// (system:node:<name>: one kubelet) is one client whatever its address,
// which a load balancer's source NAT may change when it reconnects.
const ClientSQL = `cityHash64(user, ` + ProgramSQL + `, if(startsWith(user, 'system:node:'), '', toString(source_ip)), ` + InstanceSQL + `)`

// EpochSQL gives each row of requests (a query of one row per request
// with cluster, r_namespace, r_client, r_target and r_start) its r_epoch,
// among the events where selects (the rows judged): the later of the
// start of the last successful deletion of its namespace before it and
// the start of the last request of the same client for the same target
// refused with 403 before it; 0 when there was neither.
func EpochSQL(requests, where string) string {
	return `SELECT r.*, greatest(g.gone_at, f.refused_at) AS r_epoch
FROM (` + requests + `) AS r
ASOF LEFT JOIN (
    SELECT cluster AS gone_cluster, name AS gone_namespace, toUnixTimestamp64Micro(ts) AS gone_at
    FROM audit_events
    WHERE ` + where + ` AND verb = 'delete' AND resource = 'namespaces' AND api_group = '' AND subresource = ''
          AND name != '' AND stage = 'ResponseComplete' AND code >= 200 AND code < 300
) AS g
ON r.cluster = g.gone_cluster AND r.r_namespace = g.gone_namespace AND r.r_start > g.gone_at
ASOF LEFT JOIN (
    SELECT cluster AS refused_cluster, ` + ClientSQL + ` AS refused_client, ` + TargetSQL + ` AS refused_target,
           ` + StartSQL + ` AS refused_at
    FROM audit_events
    WHERE ` + where + ` AND ` + SeenSQL + ` AND code = 403
) AS f
ON r.cluster = f.refused_cluster AND r.r_client = f.refused_client AND r.r_target = f.refused_target AND r.r_start > f.refused_at`
}

// FirstSQL is, over rows as RelistSQL reads them, the start of the
// client's first request of the target among the rows since its
// namespace was last deleted (a window function).
const FirstSQL = `min(r_start) OVER (PARTITION BY cluster, r_client, r_target, r_epoch)`

// RelistSQL is true for a relist, over rows as the package comment
// describes: a judged read (r_read) that started after the same client's
// first request of the same target among the rows.
const RelistSQL = `(r_read AND r_start > ` + FirstSQL + `)`
