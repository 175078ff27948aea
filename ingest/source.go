package ingest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/auditlens/auditlens/store"
)

// Source names the sender of events, which the events themselves do not
// say: the cluster and, on an HA control plane that runs several
// kube-apiservers, which of them (APIServer, "" when not said). The
// webhook learns it from the request (URL path, bearer token or client
// certificate), import from its flags.
type Source struct {
	Cluster   string
	APIServer string
}

// String returns "cluster", or "cluster/apiserver" when the apiserver is
// named: the form ParseSource reads.
func (s Source) String() string {
	if s.APIServer == "" {
		return s.Cluster
	}
	return s.Cluster + "/" + s.APIServer
}

// nameRE is what a cluster or apiserver name may be: 1-63 letters, digits,
// '.', '_' or '-', starting with a letter or digit. No '/', so that
// "cluster/apiserver" is unambiguous in URL paths, token flags and spool
// records.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// NameRule describes valid names, for error messages.
const NameRule = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"

// ValidName reports whether s may name a cluster or an apiserver.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ParseSource reads "CLUSTER" or "CLUSTER/APISERVER", both names valid
// (ValidName).
func ParseSource(s string) (Source, error) {
	cluster, apiserver, hasAPIServer := strings.Cut(s, "/")
	if !ValidName(cluster) {
		return Source{}, fmt.Errorf("cluster name %q must be %s", cluster, NameRule)
	}
	if hasAPIServer && !ValidName(apiserver) {
		return Source{}, fmt.Errorf("apiserver name %q must be %s", apiserver, NameRule)
	}
	return Source{Cluster: cluster, APIServer: apiserver}, nil
}

// tag sets the apiserver of rows decoded for s.Cluster.
func (s Source) tag(rows []store.Row) {
	if s.APIServer == "" {
		return
	}
	for i := range rows {
		rows[i].APIServer = s.APIServer
	}
}
