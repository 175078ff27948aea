//go:build linux && (amd64 || arm64)

package chdb

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startSignals is the process's signal table before libchdb was loaded.
var startSignals *signalSet

func snapshotSignals() { startSignals = saveSignals() }

// TestSignalHandlersSurvive proves the save/restore around chdb_connect:
// the Go runtime's handlers are the ones in place after connecting, and
// what depends on them still works.
func TestSignalHandlersSurvive(t *testing.T) {
	engine.mu.Lock()
	restored, adopted := slices.Clone(engine.restored), slices.Clone(engine.adopted)
	engine.mu.Unlock()
	t.Logf("libchdb changed handlers: restored %v, kept (with SA_ONSTACK) %v", restored, adopted)

	t.Run("handlers are Go's", func(t *testing.T) {
		now := saveSignals()
		for sig := 1; sig <= maxSignal; sig++ {
			if glibcInternal(sig) || startSignals.act[sig].handler == sigDFL {
				continue
			}
			if now.act[sig] != startSignals.act[sig] {
				t.Errorf("signal %d (%v): handler %+v, want Go's %+v",
					sig, syscall.Signal(sig), now.act[sig], startSignals.act[sig])
			}
		}
		for _, sig := range adopted {
			if now.act[sig].flags&saOnStack == 0 {
				t.Errorf("signal %d (%v): libchdb's handler lacks SA_ONSTACK", sig, sig)
			}
		}
	})

	t.Run("nil dereference panics and recovers", func(t *testing.T) {
		// Concurrently with engine work, so faults land while libchdb
		// threads are busy.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := testDB.Query(context.Background(), "SELECT sum(number) FROM numbers(200000)", "", nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
		for range 100 {
			if err := nilDeref(); err == nil {
				t.Fatal("nil dereference did not panic")
			}
		}
		close(stop)
		wg.Wait()
	})

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run("os/signal receives "+sig.String(), func(t *testing.T) {
			ctx, stop := signal.NotifyContext(context.Background(), sig)
			defer stop()
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%v did not cancel the NotifyContext context", sig)
			}
		})
	}

	t.Run("engine's own signal still works", func(t *testing.T) {
		// system.stack_trace signals every thread (Go's included) with
		// SIGRTMIN; were SIG_DFL put back there, the process would die.
		if got := query(t, testDB, "SELECT count() > 0 FROM system.stack_trace", nil); got != "1" {
			t.Errorf("system.stack_trace: %q", got)
		}
	})
}

//go:noinline
func nilDeref() (err any) {
	defer func() { err = recover() }()
	var p *[1 << 10]int
	return p[len(p)-1] // a hardware fault (SIGSEGV) that the runtime turns into a panic
}
