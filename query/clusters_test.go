package query

import (
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/internal/testkit/storetest"
)

// TestClusters: an empty store lists no cluster (an empty list, not nil);
// after events of three clusters, each once and in order, however many
// events each has.
func TestClusters(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	got, err := Clusters(ctx, st)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: Clusters = %q (nil %v), %v; want an empty list", got, got == nil, err)
	}
	rows := rollupRows(time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC), 300)
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range rows {
		if !slices.Contains(want, r.Cluster) {
			want = append(want, r.Cluster)
		}
	}
	slices.Sort(want)
	if len(want) < 2 {
		t.Fatalf("the rows name %q: the test needs several clusters", want)
	}
	if got, err = Clusters(ctx, st); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Clusters = %q, %v; want %q", got, err, want)
	}
}
