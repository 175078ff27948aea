package query

import (
	"context"
	"fmt"

	"github.com/auditlens/auditlens/store"
)

// Clusters lists the cluster names events were stored for, in order. It
// reads the cluster column of every stored event (the sort key's first
// column, so in order of the parts' marks, but still all of them): callers
// that ask often keep the answer for a while.
func Clusters(ctx context.Context, st Selecter) ([]string, error) {
	out := []string{}
	err := store.Each(ctx, st, "SELECT DISTINCT cluster AS c FROM audit_events ORDER BY c", nil, func(r struct {
		C string `json:"c"`
	}) error {
		out = append(out, r.C)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the stored clusters: %w", err)
	}
	return out, nil
}
