// Package storetest opens a fresh embedded store with the schema applied,
// for tests that run SQL on the real engine.
package storetest

import (
	"context"
	"testing"

	"github.com/auditlens/auditlens/migrations"
	"github.com/auditlens/auditlens/store"
)

// Open returns an embedded store in a temporary directory with every
// migration applied; it is closed when the test ends. Tests run with -short
// skip, since starting the engine takes a moment.
func Open(t testing.TB) store.Store {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatalf("opening the embedded engine: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the embedded engine: %v", err)
		}
	})
	if _, err := migrations.Apply(ctx, st, migrations.Config{}); err != nil {
		t.Fatalf("creating the schema: %v", err)
	}
	return st
}
