package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// driver plays a cluster's actors for one scenario. Background actors run
// in goroutines until stop; the scenario's own steps run on the test's
// goroutine and fail it at once.
type driver struct {
	t      *testing.T
	c      *cluster
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error

	admin, alice, kcm, endpoints, proxy, writer, reloader *actor
	// recv is the auditlens the cluster's apiserver sends to, for
	// scenarios that check findings while they run.
	recv *receiver
}

func newDriver(t *testing.T, c *cluster) *driver {
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{t: t, c: c, ctx: ctx, cancel: cancel,
		admin: c.actor(adminID), alice: c.actor(aliceID), kcm: c.actor(kcmID),
		endpoints: c.actor(endpointsID), proxy: c.actor(proxyID),
		writer: c.actor(writerID), reloader: c.actor(reloaderID)}
	t.Cleanup(d.stop)
	return d
}

// background runs f until the scenario stops; an error fails the test.
func (d *driver) background(name string, f func(ctx context.Context) error) {
	d.backgroundCtx(d.ctx, name, f)
}

func (d *driver) backgroundCtx(ctx context.Context, name string, f func(ctx context.Context) error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			d.mu.Lock()
			d.errs = append(d.errs, fmt.Errorf("%s: %w", name, err))
			d.mu.Unlock()
		}
	}()
}

// stop ends every background actor (their watches end, so the apiserver
// logs their ResponseComplete) and reports their errors.
func (d *driver) stop() {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, err := range d.errs {
		d.t.Error(err)
	}
	d.errs = nil
}

func (d *driver) must(err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatal(err)
	}
}

// sleep waits for compressed cluster time to pass.
func (d *driver) sleep(dur time.Duration) {
	select {
	case <-time.After(dur):
	case <-d.ctx.Done():
	}
}

// createService creates a Service as alice and, as the endpoints
// controller does, its Endpoints; it returns the Service's resourceVersion.
func (d *driver) createService(name string, n int) string {
	d.t.Helper()
	rv, err := d.alice.create("default", "services", service(name))
	d.must(err)
	_, err = d.endpoints.create("default", "endpoints", endpoints(name, n))
	d.must(err)
	return rv
}

// deleteService deletes a Service as alice and its Endpoints as the
// endpoints controller.
func (d *driver) deleteService(name string) {
	d.t.Helper()
	d.must(d.alice.delete("default", "services", name))
	d.sleep(150 * time.Millisecond)
	d.must(d.endpoints.delete("default", "endpoints", name))
}

// The Services that exist before the audit log starts; the incident's had
// existed for months.
var liveServices = []string{"frontend", "cart", "checkout", "payments", "catalog"}

// prelude creates what predates the audit log: namespace apps with the
// config writer's ConfigMap, and the live Services with their Endpoints.
func prelude(d *driver) {
	d.t.Helper()
	_, err := d.admin.create("", "namespaces", namespace("apps"))
	d.must(err)
	_, err = d.writer.create("apps", "configmaps", configMap("app-config", map[string]string{"generation": "0"}))
	d.must(err)
	for i, name := range liveServices {
		d.createService(name, i+1)
	}
}

// configWriter makes unrelated writes: it patches a ConfigMap every 400 ms
// and now and then replaces a job ConfigMap, so the cluster's
// resourceVersion keeps advancing.
func (d *driver) configWriter() {
	d.background("config writer", func(ctx context.Context) error {
		for i := 1; ctx.Err() == nil; i++ {
			if _, err := d.writer.patch("apps", "configmaps", "app-config",
				map[string]any{"data": map[string]string{"generation": strconv.Itoa(i)}}); err != nil {
				return err
			}
			if i%5 == 0 {
				name := fmt.Sprintf("job-%d", i/5)
				if _, err := d.writer.create("apps", "configmaps", configMap(name, map[string]string{"run": name})); err != nil {
					return err
				}
				if i > 5 {
					if err := d.writer.delete("apps", "configmaps", fmt.Sprintf("job-%d", i/5-1)); err != nil {
						return err
					}
				}
			}
			select {
			case <-time.After(400 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return nil
	})
}

// reflect starts a reflector of path for a; cancel stops it.
func (d *driver) reflect(a *actor, path string, timeout int, bookmarks bool) (*reflector, context.CancelFunc) {
	r := &reflector{a: a, path: path, timeout: timeout, bookmarks: bookmarks}
	ctx, cancel := context.WithCancel(d.ctx)
	d.backgroundCtx(ctx, a.id.user+" reflector of "+path, r.run)
	return r, cancel
}

// endpointsChurn deletes and re-creates the Endpoints of names, as the
// endpoints controller of the incident did right after each replay: first
// every delete (the Services vanished from its cache), then every create.
func (d *driver) endpointsChurn(ctx context.Context, names []string) error {
	for _, name := range names {
		if err := d.endpoints.delete("default", "endpoints", name); err != nil {
			return err
		}
	}
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return nil
	}
	for i, name := range names {
		if _, err := d.endpoints.create("default", "endpoints", endpoints(name, 100+i)); err != nil {
			return err
		}
	}
	return nil
}
