package watchloop_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/watchloop"
	"github.com/auditlens/auditlens/internal/testkit/detecttest"

	"github.com/auditlens/auditlens/ingest"
	"github.com/auditlens/auditlens/store"
)

// The rules of the watch-loop detector that no generated scenario pins by
// itself, each on a small hand-written log on the real engine, with a
// control that differs in the one thing the rule is about.

const (
	kcmUser = "system:kube-controller-manager"
	kcmUA   = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/shared-informers"
	epcUA   = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/endpoint-controller"
)

// loopLog writes audit rows of one cluster.
type loopLog struct {
	cluster string
	t0      time.Time
	rows    []store.Row
	n       int
}

// req is one request; its stages are derived from it.
type req struct {
	at                  time.Duration
	user, ua, ip, apisv string
	verb, resource      string
	ns, name            string
	uri                 string
	code                int32
	rv                  string // the requested resourceVersion (watch, list)
	second              bool   // second-precision timestamps (1.8-era logs)
}

func (l *loopLog) add(r req) {
	l.n++
	id := fmt.Sprintf("%s-%04d", l.cluster, l.n)
	t := l.t0.Add(r.at)
	if r.second {
		t = t.Truncate(time.Second)
	}
	if r.uri == "" {
		r.uri = "/api/v1/namespaces/" + r.ns + "/" + r.resource + "/" + r.name
	}
	for i, stage := range []string{"RequestReceived", "ResponseComplete"} {
		row := store.Row{Cluster: l.cluster, APIServer: r.apisv, AuditID: id, Stage: stage, Level: "Metadata", Verb: r.verb,
			RequestURI: r.uri, Time: t.Add(time.Duration(i) * 5 * time.Millisecond), ReceivedAt: t, User: r.user,
			UserAgent: r.ua, SourceIP: r.ip, Resource: r.resource, APIVersion: "v1", Namespace: r.ns, Name: r.name,
			Watch: r.verb == "watch", RequestedRV: r.rv, RVMatch: ingest.ParseRequestURI(r.uri).ResourceVersionMatch,
			Raw: []byte(`{"auditID":"` + id + `"}`)}
		if r.second {
			row.Time = t
		}
		if stage == "ResponseComplete" {
			row.Code = r.code
		}
		l.rows = append(l.rows, row)
	}
}

// watch is a Services watch from rv.
func (l *loopLog) watch(at time.Duration, user, ua, ip, rv string, code int32) {
	l.add(req{at: at, user: user, ua: ua, ip: ip, verb: "watch", resource: "services", rv: rv, code: code,
		uri: "/api/v1/services?allowWatchBookmarks=true&resourceVersion=" + rv + "&timeout=7m&timeoutSeconds=420&watch=true"})
}

// churn is the endpoints controller deleting and re-creating Endpoints
// default/<name> right after a restart.
func (l *loopLog) churn(at time.Duration, ua, name string) {
	l.add(req{at: at + 20*time.Millisecond, user: kcmUser, ua: ua, ip: "10.0.0.10", verb: "delete", resource: "endpoints", ns: "default", name: name, code: 200})
	l.add(req{at: at + 40*time.Millisecond, user: kcmUser, ua: ua, ip: "10.0.0.10", verb: "create", resource: "endpoints", ns: "default", name: name, code: 201,
		uri: "/api/v1/namespaces/default/endpoints"})
}

// advance is a request that shows the cluster at resourceVersion 90000.
func (l *loopLog) advance(at time.Duration) {
	l.add(req{at: at, user: "system:kube-scheduler", ua: "kube-scheduler/v1.37.2", ip: "10.0.0.10", verb: "watch", resource: "pods",
		rv: "90000", code: 200, uri: "/api/v1/pods?resourceVersion=90000&watch=true"})
}

func (l *loopLog) evaluate(t *testing.T, st store.Store, cfg watchloop.Config) []detect.Finding {
	t.Helper()
	if err := st.Insert(context.Background(), l.rows); err != nil {
		t.Fatal(err)
	}
	w := detect.Window{Since: l.t0.Add(-time.Minute), Until: l.t0.Add(time.Hour), Clusters: []string{l.cluster}}
	return detecttest.Evaluate(t, watchloop.New(cfg), st, w)
}

func TestWatchLoopRules(t *testing.T) {
	t.Parallel()
	st := detecttest.Engine(t)
	t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	restarts := []time.Duration{0, 20 * time.Second, 40 * time.Second, 60 * time.Second}
	// plain is the loop as a current kube-controller-manager shows it.
	plain := func(l *loopLog) {
		for _, at := range restarts {
			l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", 200)
			l.churn(at, epcUA, "api")
		}
	}
	for _, tc := range []struct {
		name  string
		cfg   watchloop.Config
		build func(l *loopLog)
		want  int // watch-loop findings
		// creates is how many re-creates the finding pairs with its deletes
		// (when set).
		creates int
	}{
		{name: "the loop", build: func(l *loopLog) { plain(l); l.advance(30 * time.Second) }, want: 1},
		{name: "nothing shows the cluster past the static resourceVersion", build: plain},
		{name: "three restarts RetrySpacing apart are just enough", want: 1, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range []time.Duration{0, 5 * time.Second, 10 * time.Second} {
				l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", 200)
				l.churn(at, epcUA, "api")
			}
		}},
		{name: "the proof of the advance may come before the loop", build: func(l *loopLog) { l.advance(-30 * time.Second); plain(l) }, want: 1},
		{name: "failed watches are no restarts", build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for i, at := range restarts {
				code := int32(200)
				if i > 0 {
					code = 503
				}
				l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", code)
				l.churn(at, epcUA, "api")
			}
		}},
		{name: "a watch-list is a relist", build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				l.add(req{at: at, user: kcmUser, ua: kcmUA, ip: "10.0.0.10", verb: "watch", resource: "services", rv: "1200", code: 200,
					uri: "/api/v1/services?allowWatchBookmarks=true&resourceVersion=1200&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true"})
				l.churn(at, epcUA, "api")
			}
		}},
		{name: "a leader change and source NAT keep one reflector", want: 1, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for i, at := range restarts {
				ip, ua := "10.0.0.10", kcmUA
				if i%2 == 1 {
					ip, ua = "10.0.0.11", "kube-controller-manager/v1.37.3 (linux/amd64) kubernetes/def5678/shared-informers"
				}
				l.watch(at, kcmUser, ua, ip, "1200", 200)
				l.churn(at, epcUA, "api")
			}
		}},
		{name: "watches and churn through different apiservers of one cluster", want: 1, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for i, at := range restarts {
				as, other := "apiserver-a", "apiserver-b"
				if i%2 == 1 {
					as, other = other, as
				}
				l.add(req{at: at, user: kcmUser, ua: kcmUA, ip: "10.0.0.100", apisv: as, verb: "watch", resource: "services", rv: "1200",
					code: 200, uri: "/api/v1/services?resourceVersion=1200&watch=true"})
				l.add(req{at: at + 20*time.Millisecond, user: kcmUser, ua: epcUA, ip: "10.0.0.100", apisv: other, verb: "delete",
					resource: "endpoints", ns: "default", name: "api", code: 200})
			}
		}},
		{name: "loopback informers of two apiservers are two reflectors", cfg: watchloop.Config{IgnoreChurnBy: []string{}},
			build: func(l *loopLog) { loopback(l, []string{"apiserver-a", "apiserver-b"}) }},
		{name: "loopback informers of one apiserver are one reflector", cfg: watchloop.Config{IgnoreChurnBy: []string{}}, want: 1,
			build: func(l *loopLog) { loopback(l, []string{"apiserver-a", "apiserver-a"}) }},
		{name: "second-precision timestamps still pair a delete and a create", want: 1, creates: 4, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				at += 300 * time.Millisecond
				l.add(req{at: at, user: kcmUser, ua: kcmUA, ip: "10.0.0.10", verb: "watch", resource: "services", rv: "1200", code: 200,
					second: true, uri: "/api/v1/services?resourceVersion=1200&watch=true"})
				// The create is written first in the same second: order must
				// not depend on it.
				l.add(req{at: at + 40*time.Millisecond, user: kcmUser, ua: epcUA, verb: "create", resource: "endpoints", ns: "default", name: "api",
					code: 201, second: true, uri: "/api/v1/namespaces/default/endpoints"})
				l.add(req{at: at + 20*time.Millisecond, user: kcmUser, ua: epcUA, verb: "delete", resource: "endpoints", ns: "default", name: "api",
					code: 200, second: true})
			}
		}},
		{name: "logs without user agents (audit.k8s.io/v1alpha1)", want: 1, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				l.watch(at, kcmUser, "", "10.0.0.10", "1200", 200)
				l.churn(at, "", "api")
			}
		}},
		{name: "a Service write explains the Endpoints writes right after it", build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", 200)
				for _, v := range []string{"delete", "create"} {
					l.add(req{at: at + 10*time.Millisecond, user: "admin", ua: "kubectl/v1.37.2", verb: v, resource: "services", ns: "default", name: "api", code: 200})
				}
				l.churn(at+2*time.Second, epcUA, "api")
			}
		}},
		{name: "a Service created without a recorded name explains its namespace's Endpoints writes right after it", build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", 200)
				l.add(req{at: at + 10*time.Millisecond, user: "admin", ua: "kubectl/v1.37.2", verb: "create", resource: "services", ns: "default",
					code: 201, uri: "/api/v1/namespaces/default/services"})
				l.churn(at+2*time.Second, epcUA, "api")
			}
		}},
		{name: "a Service write explains nothing minutes later", want: 1, build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, v := range []string{"delete", "create"} {
				l.add(req{at: -2 * time.Minute, user: "admin", ua: "kubectl/v1.37.2", verb: v, resource: "services", ns: "default", name: "api", code: 200})
			}
			plain(l)
		}},
		{name: "a delete that failed is no churn", build: func(l *loopLog) {
			l.advance(30 * time.Second)
			for _, at := range restarts {
				l.watch(at, kcmUser, kcmUA, "10.0.0.10", "1200", 200)
				l.add(req{at: at + 20*time.Millisecond, user: kcmUser, ua: epcUA, ip: "10.0.0.10", verb: "delete", resource: "endpoints", ns: "default", name: "api", code: 404})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &loopLog{cluster: "rules-" + strings.NewReplacer(" ", "-", "(", "", ")", "", ".", "").Replace(tc.name), t0: t0}
			tc.build(l)
			got := l.evaluate(t, st, tc.cfg)
			if len(got) != tc.want {
				for _, f := range got {
					t.Logf("found: %s", f.Title)
				}
				t.Fatalf("%d findings, want %d", len(got), tc.want)
			}
			if tc.want == 1 && (got[0].Subjects.ResourceVersion != "1200" || got[0].Subjects.Iterations < 3) {
				t.Errorf("finding %s: rv %s, %d iterations", got[0].Title, got[0].Subjects.ResourceVersion, got[0].Subjects.Iterations)
			}
			if tc.creates > 0 {
				n := 0
				for _, e := range got[0].Evidence {
					if e.Role == "endpoints-create" {
						n++
					}
				}
				if n != tc.creates {
					t.Errorf("%d re-creates paired, want %d", n, tc.creates)
				}
			}
		})
	}
}

// loopback makes the loopback Services informers of the named apiservers
// restart in turn from one resourceVersion, each restart followed by
// churn from the same apiserver.
func loopback(l *loopLog, apiservers []string) {
	l.advance(30 * time.Second)
	ua := "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/abc1234"
	for i, at := range []time.Duration{0, 20 * time.Second, 40 * time.Second, 60 * time.Second} {
		as := apiservers[i%len(apiservers)]
		l.add(req{at: at, user: "system:apiserver", ua: ua, ip: "127.0.0.1", apisv: as, verb: "watch", resource: "services", rv: "1200",
			code: 200, uri: "/api/v1/services?resourceVersion=1200&watch=true"})
		l.add(req{at: at + 20*time.Millisecond, user: "system:apiserver", ua: ua, ip: "127.0.0.1", apisv: as, verb: "delete",
			resource: "endpoints", ns: "default", name: "api", code: 200})
		l.add(req{at: at + 40*time.Millisecond, user: "system:apiserver", ua: ua, ip: "127.0.0.1", apisv: as, verb: "create",
			resource: "endpoints", ns: "default", name: "api", code: 201, uri: "/api/v1/namespaces/default/endpoints"})
	}
}

// TestWatchLoopEpisodes holds the walk through a reflector's restarts to
// the mechanism: a loop is a reflector resuming, again and again, from a
// resourceVersion at or below one it already resumed from, whichever one
// (the resume point drifts when other Services are deleted); it begins
// where the reflector went back and ends when it relists or resumes from
// above; watches that merely share a number with it are not its own.
func TestWatchLoopEpisodes(t *testing.T) {
	st := detecttest.Engine(t)
	t0 := time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC)
	const loopAt = 30 * time.Minute
	type restart struct {
		at    time.Duration
		rv    string
		churn bool
	}
	for _, tc := range []struct {
		name     string
		restarts []restart
		relistAt time.Duration // a list of Services by the reflector (0: none)
		want     int
		// For the one finding: its restarts, iterations, first and last
		// restart, and stale resourceVersions.
		restarts_, iterations int
		first, last           time.Duration
		stale                 []string
	}{
		{name: "earlier watches from the same resourceVersion are not the loop's", want: 1,
			restarts: []restart{{0, "1200", false}, {7 * time.Minute, "1200", false}, {14 * time.Minute, "5000", false},
				{loopAt, "1200", true}, {loopAt + 20*time.Second, "1200", true}, {loopAt + 40*time.Second, "1200", false},
				{loopAt + 60*time.Second, "1200", true}},
			restarts_: 4, iterations: 3, first: loopAt, last: loopAt + 60*time.Second, stale: []string{"1200"}},
		{name: "a drifting resume point is one loop", want: 1,
			restarts: []restart{{0, "5000", false}, {loopAt, "1200", true}, {loopAt + 20*time.Second, "1200", true},
				{loopAt + 40*time.Second, "900", true}, {loopAt + 60*time.Second, "900", false}, {loopAt + 80*time.Second, "2300", true}},
			restarts_: 5, iterations: 4, first: loopAt, last: loopAt + 80*time.Second, stale: []string{"1200", "900", "2300"}},
		{name: "a relist ends the loop", want: 1, relistAt: loopAt + 50*time.Second,
			restarts: []restart{{0, "5000", false}, {loopAt, "1200", true}, {loopAt + 20*time.Second, "1200", true},
				{loopAt + 40*time.Second, "1200", true}, {loopAt + 60*time.Second, "6000", false}, {loopAt + 80*time.Second, "6000", false}},
			restarts_: 3, iterations: 3, first: loopAt, last: loopAt + 40*time.Second, stale: []string{"1200"}},
		{name: "a resume point above the highest ends the loop", want: 1,
			restarts: []restart{{0, "5000", false}, {loopAt, "1200", true}, {loopAt + 20*time.Second, "1200", true},
				{loopAt + 40*time.Second, "1200", true}, {loopAt + 60*time.Second, "7000", false}, {loopAt + 80*time.Second, "7000", false}},
			restarts_: 3, iterations: 3, first: loopAt, last: loopAt + 40*time.Second, stale: []string{"1200"}},
		{name: "an advancing reflector is no loop, whatever follows its restarts",
			restarts: []restart{{loopAt, "1000", true}, {loopAt + 20*time.Second, "2000", true}, {loopAt + 40*time.Second, "3000", true},
				{loopAt + 60*time.Second, "4000", true}}},
		{name: "a quiet reflector that never went back is no loop",
			restarts: []restart{{0, "5000", false}, {7 * time.Minute, "5000", false}, {14 * time.Minute, "5000", false}, {21 * time.Minute, "5000", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &loopLog{cluster: "episodes-" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name), t0: t0}
			l.advance(loopAt + 10*time.Second)
			for _, r := range tc.restarts {
				l.watch(r.at, kcmUser, kcmUA, "10.0.0.10", r.rv, 200)
				if r.churn {
					l.churn(r.at, epcUA, "api")
				}
			}
			if tc.relistAt > 0 {
				l.add(req{at: tc.relistAt, user: kcmUser, ua: kcmUA, ip: "10.0.0.10", verb: "list", resource: "services", code: 200,
					uri: "/api/v1/services?limit=500&resourceVersion=0"})
			}
			got := l.evaluate(t, st, watchloop.Config{})
			if len(got) != tc.want {
				for _, f := range got {
					t.Logf("found: %s", f.Title)
				}
				t.Fatalf("%d findings, want %d", len(got), tc.want)
			}
			if tc.want == 0 {
				return
			}
			f, s := got[0], got[0].Subjects
			var stale []string
			for _, r := range s.StaleRVs {
				stale = append(stale, r.RV)
			}
			if s.WatchRestarts != tc.restarts_ || s.Iterations != tc.iterations || !slices.Equal(stale, tc.stale) || s.ResourceVersion != tc.stale[0] {
				t.Errorf("%d restarts, %d iterations, stale %v (first %s); want %d, %d, %v", s.WatchRestarts, s.Iterations, stale,
					s.ResourceVersion, tc.restarts_, tc.iterations, tc.stale)
			}
			if !f.FirstSeen.Equal(t0.Add(tc.first)) || !f.LastSeen.Before(t0.Add(tc.last+time.Second)) || f.LastSeen.Before(t0.Add(tc.last)) {
				t.Errorf("first_seen %s, last_seen %s; want %s and %s", f.FirstSeen, f.LastSeen, t0.Add(tc.first), t0.Add(tc.last))
			}
			for _, e := range f.Evidence {
				if e.Role == watchloop.RoleStaticWatch && (e.Time.Before(t0.Add(tc.first)) || e.Time.After(t0.Add(tc.last))) {
					t.Errorf("static-watch evidence at %s, outside the loop", e.Time)
				}
			}
			if len(tc.stale) > 1 && !strings.Contains(f.Title, strings.Join(tc.stale, ", ")) {
				t.Errorf("title %q does not name the stale resourceVersions", f.Title)
			}
		})
	}
}
