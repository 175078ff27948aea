package watchloop_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"
)

// TestRegressionOrder pins how watch-rv-regression orders one reflector's
// requests, on small hand-written logs on the real engine: its cheap pass
// (which reflectors to look at) and its exact one must agree on what a
// step back is, or a regression is never looked at.
func TestRegressionOrder(t *testing.T) {
	st := detecttest.Engine(t)
	const ua = "ingress-nginx/v1.12.0 (linux/amd64) ingress-nginx/abc"
	const user = "system:serviceaccount:ingress-nginx:ingress-nginx"
	watch := func(l *loopLog, at time.Duration, rv string) { l.watch(at, user, ua, "10.0.0.7", rv, 200) }
	list := func(l *loopLog, at time.Duration) {
		l.add(req{at: at, user: user, ua: ua, ip: "10.0.0.7", verb: "list", resource: "services", code: 200,
			uri: "/api/v1/services?limit=500&resourceVersion=0"})
	}
	for i, tc := range []struct {
		name  string
		build func(l *loopLog)
		want  string // the regressed resourceVersion, "" for none
	}{
		{name: "a watch from below the one before", build: func(l *loopLog) {
			watch(l, 0, "1000")
			watch(l, time.Minute, "500")
		}, want: "500"},
		{name: "watches that only go up", build: func(l *loopLog) {
			watch(l, 0, "500")
			watch(l, time.Minute, "1000")
		}},
		{name: "a list in between starts over", build: func(l *loopLog) {
			watch(l, 0, "1000")
			list(l, 30*time.Second)
			watch(l, time.Minute, "500")
		}},
		{name: "a resourceVersion that is not an integer in between", build: func(l *loopLog) {
			watch(l, 0, "1000")
			watch(l, 30*time.Second, "opaque")
			watch(l, time.Minute, "500")
		}, want: "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
			l := &loopLog{cluster: fmt.Sprintf("regression-order-%d", i), t0: t0}
			tc.build(l)
			if err := st.Insert(context.Background(), l.rows); err != nil {
				t.Fatal(err)
			}
			w := detect.Window{Since: t0.Add(-time.Minute), Until: t0.Add(time.Hour), Clusters: []string{l.cluster}}
			fs := detecttest.Evaluate(t, watchloop.NewRegression(watchloop.RegressionConfig{}), st, w)
			got := ""
			for _, f := range fs {
				got += f.Subjects.ResourceVersion
			}
			if got != tc.want {
				t.Errorf("regressed from %q, want %q (%d findings)", got, tc.want, len(fs))
			}
		})
	}
}
