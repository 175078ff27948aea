package auth

import (
	"errors"
	"slices"
	"strings"
)

// Per-cluster read access. Every read is answered for the clusters the
// client may read and nothing else: a filter naming another cluster
// selects nothing (as for a cluster that does not exist), a finding or
// report of another cluster is "not found", and a histogram or value list
// counts only the allowed clusters. So a client allowed cluster A learns
// nothing of cluster B, not even that it exists.

// Principal is what an authenticated client may read: every cluster, or
// the listed ones (none: nothing).
type Principal struct {
	All      bool
	Clusters []string
}

// EveryCluster reads every cluster.
var EveryCluster = Principal{All: true}

// NoCluster names no stored cluster (cluster names are ingest.ValidName:
// no control characters), so a filter on it selects nothing.
const NoCluster = "\x00"

// Allows reports whether p may read cluster.
func (p Principal) Allows(cluster string) bool {
	return p.All || slices.Contains(p.Clusters, cluster)
}

// None reports whether p may read no cluster at all.
func (p Principal) None() bool { return !p.All && len(p.Clusters) == 0 }

// Scope narrows a list of requested clusters (empty: all) to those p may
// read. It never returns an empty list for a restricted principal (that
// would mean every cluster).
func (p Principal) Scope(requested []string) []string {
	if p.All {
		return requested
	}
	if len(requested) == 0 {
		return slices.Clone(p.Clusters)
	}
	var out []string
	for _, c := range requested {
		if p.Allows(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return []string{NoCluster}
	}
	return out
}

// ScopeOne narrows a single requested cluster: one p may not read becomes
// NoCluster; none requested becomes p's only cluster, or an error when p
// may read several.
func (p Principal) ScopeOne(requested string) (string, error) {
	switch {
	case p.All:
		return requested, nil
	case requested == "" && len(p.Clusters) == 1:
		return p.Clusters[0], nil
	case requested == "":
		return "", errors.New("name the cluster (cluster=NAME): this client reads several")
	case p.Allows(requested):
		return requested, nil
	}
	return NoCluster, nil
}

// Within reports whether a stored thing that covers clusters (empty:
// every cluster) may be shown to p whole.
func (p Principal) Within(clusters []string) bool {
	if p.All {
		return true
	}
	if len(clusters) == 0 {
		return false
	}
	for _, c := range clusters {
		if !p.Allows(c) {
			return false
		}
	}
	return true
}

// GroupsPrincipal is what a member of groups may read under a mapping of
// group to clusters (an empty list: every cluster). Group names are
// trimmed; a group the mapping does not name adds nothing.
func GroupsPrincipal(mapping map[string][]string, groups []string) Principal {
	var pr Principal
	for _, g := range groups {
		cl, ok := mapping[strings.TrimSpace(g)]
		switch {
		case !ok:
		case len(cl) == 0:
			return EveryCluster
		default:
			for _, c := range cl {
				if !slices.Contains(pr.Clusters, c) {
					pr.Clusters = append(pr.Clusters, c)
				}
			}
		}
	}
	return pr
}
