package query

import (
	"fmt"
	"strings"

	"github.com/auditlens/auditlens/internal/chunks"
	"github.com/auditlens/auditlens/store"
	"github.com/auditlens/auditlens/store/residual"
)

// eventColumns are the columns Events selects (store.Store.SelectRows
// decodes them by name into a store.Row): the key, the raw event of rows
// stored before residuals (empty since), and what Rebuild needs to restore
// an event stored as its residual: the residual and the typed columns of
// the skeleton (residual.Skeleton).
var eventColumns = strings.Join([]string{
	"cluster", "audit_id", "stage", "raw", "residual", "level", "verb", "request_uri", "ts", "received_at",
	"user", "user_groups", "impersonated_user", "user_agent", "source_ip", "resource", "subresource", "api_group",
	"api_version", "namespace", "name", "object_rv", "object_uid", "code", "annotations",
}, ", ")

// eventKey identifies a stored event: a copy of it stored twice has the
// same key.
type eventKey struct{ Cluster, AuditID, Stage string }

func keyOf(r *store.Row) eventKey { return eventKey{r.Cluster, r.AuditID, r.Stage} }

// keyString names the event of a held item in error messages.
func keyString(k chunks.Key) string {
	return eventKey{Cluster: string(k.Cluster), AuditID: string(k.AuditID), Stage: string(k.Stage)}.String()
}

// String names the event in error messages.
func (k eventKey) String() string {
	return fmt.Sprintf("%q (cluster %q, stage %s)", k.AuditID, k.Cluster, k.Stage)
}

// rebuilder restores stored events, reusing its buffer from event to
// event.
type rebuilder struct{ buf []byte }

// event returns the stored event of r: its raw column when set (a row
// stored before residuals), else the event rebuilt from its columns and
// residual. It is valid until the next call (and r's Raw until the next
// row).
func (rb *rebuilder) event(r *store.Row) ([]byte, error) {
	if len(r.Raw) > 0 {
		return r.Raw, nil
	}
	var err error
	rb.buf, err = appendEvent(rb.buf[:0], r)
	return rb.buf, err
}

// appendEvent appends the stored event of r to dst, as rebuilder.event
// returns it.
func appendEvent(dst []byte, r *store.Row) ([]byte, error) {
	if len(r.Raw) > 0 {
		return append(dst, r.Raw...), nil
	}
	out, err := residual.AppendRebuild(dst, r, r.Residual)
	if err != nil {
		return dst, fmt.Errorf("rebuilding the stored event: %w", err)
	}
	return out, nil
}
