// Package reflector says what identifies a Kubernetes reflector (one
// program's watch of one resource) in stored audit events, once, for the
// watch detectors and the object history: the user, the program (the
// user agent's product), the resource, namespace and selectors, and for
// the kube-apiservers' own loopback informers which apiserver runs them.
// Not the address: a load balancer's source NAT or a leader change alters
// it while the program stays the same.
//
// It also says what a read and a relist are (read.go): which requests
// read a collection or an object, who reads (the client) and what (the
// target), and the rule that makes a read a relist — the same client
// reading the same target again.
package reflector

import "strings"

// ProgramSQL is Program over the audit_events columns.
const ProgramSQL = `multiIf(position(user_agent, '/') > 1, substring(user_agent, 1, position(user_agent, '/') - 1), user_agent != '', toString(user_agent), toString(user))`

// InstanceSQL tells apart reflectors that share all the rest: the
// loopback informers of several kube-apiservers (system:apiserver, all
// from 127.0.0.1) are one per apiserver.
const InstanceSQL = `if(user = 'system:apiserver', concat(toString(apiserver), '|', toString(source_ip)), '')`

// IdentSQL hashes a reflector's identity (a UInt64).
const IdentSQL = `cityHash64(user, ` + ProgramSQL + `, api_group, resource, namespace, label_selector, field_selector, ` + InstanceSQL + `)`

// Program is the product of a user agent ("kube-controller-manager" of
// "kube-controller-manager/v1.9.2 (linux/amd64) kubernetes/…"), the whole
// user agent when it has no product, or the user when there is no user
// agent (audit logs before Kubernetes 1.12 have none).
func Program(userAgent, user string) string {
	if p, _, ok := strings.Cut(userAgent, "/"); ok && p != "" {
		return p
	}
	if userAgent != "" {
		return userAgent
	}
	return user
}
