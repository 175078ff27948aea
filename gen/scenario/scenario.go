// Package scenario generates audit logs of the situations the watch
// detectors must tell apart: the incident of seeds 000/001 (a
// kube-controller-manager re-watching Services from a stale
// resourceVersion, each restart followed by Endpoints deleted and
// re-created), and the look-alikes that must stay silent — an idle
// resource watched from a constant resourceVersion, a user deleting and
// re-creating a Service, clients whose resourceVersion advances, an
// apiserver starting up, a healthy kube-controller-manager — plus a
// watch resourceVersion regression.
//
// A scenario is a small simulation of a cluster's API traffic (see sim):
// objects with resourceVersions, reflectors that watch back to back and
// resume from the resourceVersion of the last event they received, writes
// by users and controllers, and healthy background traffic (node status,
// pods, Endpoints updates, events). Events are built with the upstream
// audit.k8s.io/v1 types and encoded with encoding/json, as kube-apiserver's
// log backend writes them. Every trace carries its ground truth (Want):
// the loops and regressions the simulation put in it, for tests to hold
// detectors to.
//
// Each scenario runs at two time scales: Real (watches restart every
// 5–10 minutes, client-go's default) and Compressed (every 10–20 s, as in
// tests and end-to-end runs).
package scenario

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Scale sets how fast the scenario's clients restart their watches and
// how fast the controllers react.
type Scale struct {
	Name string
	// RestartMin and RestartMax bound a reflector's watch timeout: the
	// time between two restarts.
	RestartMin, RestartMax time.Duration
	// RecreateMin and RecreateMax bound the time between an Endpoints
	// object's delete and its re-creation in the loop.
	RecreateMin, RecreateMax time.Duration
	// Step spaces a user's successive commands.
	Step time.Duration
}

// The two scales.
var (
	Real       = Scale{Name: "real", RestartMin: 5 * time.Minute, RestartMax: 10 * time.Minute, RecreateMin: 5 * time.Second, RecreateMax: 90 * time.Second, Step: 20 * time.Second}
	Compressed = Scale{Name: "compressed", RestartMin: 10 * time.Second, RestartMax: 20 * time.Second, RecreateMin: 500 * time.Millisecond, RecreateMax: 4 * time.Second, Step: 1500 * time.Millisecond}
	Scales     = []Scale{Compressed, Real}
)

// ScaleByName returns the scale called name.
func ScaleByName(name string) (Scale, bool) {
	for _, s := range Scales {
		if s.Name == name {
			return s, true
		}
	}
	return Scale{}, false
}

// Want is a trace's ground truth: what the simulation put in it.
type Want struct {
	// Loops are the static-resourceVersion watch loops with their churn.
	Loops []Loop
	// Regressions are the watches that resumed from a resourceVersion
	// lower than one the same reflector had used since its last list.
	Regressions []Regression
	// HeartbeatWaves are the waves of node heartbeat loss (seed 004), and
	// the silences of the whole audit feed that look like one (FeedGap).
	HeartbeatWaves []HeartbeatWave
	// Restores are the etcd restores (see Restore).
	Restores []Restore
	// RelistLoops and RelistHerds are the clients stuck relisting and the
	// many clients relisting at once (see relist.go).
	RelistLoops []RelistLoop
	RelistHerds []RelistHerd
}

// Loop is one client stuck re-watching from a static resourceVersion.
type Loop struct {
	Client   Client
	Resource string
	// ResourceVersion is the first stale resourceVersion the loop
	// resumed from; StaleRVs, when set, all of them by first use (the
	// resume point drifts when other Services are deleted during the
	// loop).
	ResourceVersion string
	StaleRVs        []string
	// Objects are the churned Endpoints, "namespace/name", sorted.
	Objects []string
	// Iterations counts the restarts followed by churn: Endpoints
	// deleted (and usually re-created) right after them.
	Iterations int
	// ChurnAfter maps the audit ID of each churned Endpoints delete, and
	// of its re-create when the trace holds it, to the audit ID of the
	// watch restart that caused it.
	ChurnAfter map[string]string
}

// Regression is one reflector that went back to a lower resourceVersion.
type Regression struct {
	Client          Client
	Resource        string
	Namespace       string
	ResourceVersion string // the lower one
	Previous        string // the highest used before
}

func (r Regression) same(o Regression) bool {
	return r.Client.key() == o.Client.key() && r.Resource == o.Resource && r.Namespace == o.Namespace && r.ResourceVersion == o.ResourceVersion
}

// Trace is a generated audit log and its truth.
type Trace struct {
	Scenario string
	Scale    Scale
	Start    time.Time
	End      time.Time
	// Events are ordered by stage time, as the log backend writes them.
	Events []auditv1.Event
	Want   Want
	// Format is the audit format the log is written in: "" for
	// audit.k8s.io/v1, or Kubernetes 1.8's v1beta1 or 1.7's v1alpha1
	// (see Format).
	Format Format
	// APIServers names, by audit ID, the kube-apiserver of an HA control
	// plane that served each request; nil when the cluster has one. Each
	// apiserver writes its own log (see ByAPIServer).
	APIServers map[string]string
}

// Scenario is one situation.
type Scenario struct {
	Name string
	// Doc says what the scenario holds and what the detectors must say.
	Doc   string
	build func(s *sim)
	// version, commit and buggy set up the simulated apiserver.
	version, commit string
	buggy           bool
	bookmarks       bool
	// format is the audit format the cluster writes.
	format Format
	// salted: the scenario's name is mixed into the seed, so that
	// variants of one story given the same seed draw differently.
	salted bool
}

// Start is the default start time of generated traces.
var Start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// Generate builds the scenario's trace at scale from start; the same
// seed gives the same events.
func (sc Scenario) Generate(scale Scale, start time.Time, seed int64) Trace {
	s := newSim(seed, scale, start, sc.version, sc.commit)
	if sc.salted {
		h := fnv.New64a()
		h.Write([]byte(sc.Name))
		s.rng = rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	}
	s.buggy = sc.buggy
	s.bookmarksOn = sc.bookmarks
	sc.build(s)
	s.sortEvents()
	for i := range s.want.Loops {
		slices.Sort(s.want.Loops[i].Objects)
		s.want.Loops[i].Objects = slices.Compact(s.want.Loops[i].Objects)
	}
	if sc.format.noUserAgent() {
		// The log does not say which program sent a request.
		for i := range s.want.Loops {
			s.want.Loops[i].Client.UserAgent = ""
		}
		for i := range s.want.Regressions {
			s.want.Regressions[i].Client.UserAgent = ""
		}
	}
	return Trace{Scenario: sc.Name, Scale: scale, Start: s.t0, End: s.end, Events: s.events, Want: s.want,
		Format: sc.format, APIServers: s.servers}
}

// ByAPIServer splits the trace of an HA control plane into the logs of
// its kube-apiservers, by name; each part has the whole trace's truth.
// A trace of one apiserver is returned as the part named "".
func (t Trace) ByAPIServer() map[string]Trace {
	if t.APIServers == nil {
		return map[string]Trace{"": t}
	}
	out := map[string]Trace{}
	for _, ev := range t.Events {
		name := t.APIServers[string(ev.AuditID)]
		p, ok := out[name]
		if !ok {
			p = t
			p.Events = nil
			p.APIServers = nil
		}
		p.Events = append(p.Events, ev)
		out[name] = p
	}
	return out
}

// All returns every scenario the detectors are held to.
func All() []Scenario { return slices.Clone(all) }

// ByName returns the scenario called name.
func ByName(name string) (Scenario, bool) {
	for _, sc := range all {
		if sc.Name == name {
			return sc, true
		}
	}
	return Scenario{}, false
}

// Names lists the scenarios' names.
func Names() []string {
	var out []string
	for _, sc := range all {
		out = append(out, sc.Name)
	}
	return out
}

// WriteLog writes the trace as kube-apiserver's log backend writes an
// audit log: one JSON Event per line, with kind and apiVersion.
func (t Trace) WriteLog(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range t.Events {
		ev := t.Events[i]
		ev.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: auditv1.SchemeGroupVersion.String()}
		var v any = &ev
		if t.Format != V1 {
			v = t.Format.legacy(&ev)
		}
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("writing audit log line: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing audit log: %w", err)
	}
	return nil
}

// String describes the trace in one line.
func (t Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s scale: %d events from %s to %s, %d loops, %d regressions", t.Scenario, t.Scale.Name,
		len(t.Events), t.Start.Format(time.RFC3339), t.End.Format(time.RFC3339), len(t.Want.Loops), len(t.Want.Regressions))
	return b.String()
}
