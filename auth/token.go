package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// APIToken is a bearer token of the read API and the clusters it may
// read (none: every cluster).
type APIToken struct {
	Token    string
	Clusters []string
}

// Principal is what the token may read.
func (t APIToken) Principal() Principal {
	if len(t.Clusters) == 0 {
		return EveryCluster
	}
	return Principal{Clusters: t.Clusters}
}

// ParseAPIToken reads "TOKEN" (every cluster) or "TOKEN=CLUSTER[,CLUSTER…]",
// as serve's --api-token and the lines of --api-token-file give them.
// valid checks each cluster name.
func ParseAPIToken(s string, valid func(string) bool) (APIToken, error) {
	tok, clusters, scoped := strings.Cut(s, "=")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return APIToken{}, errors.New("an empty read token")
	}
	t := APIToken{Token: tok}
	if !scoped {
		return t, nil
	}
	for c := range strings.SplitSeq(clusters, ",") {
		c = strings.TrimSpace(c)
		if !valid(c) {
			return APIToken{}, fmt.Errorf("read token …=%s: cluster name %q is not valid", clusters, c)
		}
		if !slices.Contains(t.Clusters, c) {
			t.Clusters = append(t.Clusters, c)
		}
	}
	return t, nil
}
