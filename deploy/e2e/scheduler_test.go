package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The scheduler and the observer of the fake kubelets' scenarios.
//
// No kube-scheduler is built for the tests (build.sh can, in minutes): the
// driver plays it, binding each unscheduled Pod to the schedulable Node
// with the fewest Pods bound so far, as system:kube-scheduler. The
// observer is an admin client watching Nodes and Pods, which tells the
// scenario what the real controller-manager did (NotReady, taints,
// evictions) without reading the audit log.

// schedulerID is the scheduler's identity, with the user agent of a real
// 1.37.2 kube-scheduler.
var schedulerID = identity{token: "scheduler-token", user: "system:kube-scheduler", uid: "uid-scheduler",
	groups: []string{"system:masters"}, userAgent: "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/unknown/scheduler",
	sourceIP: "127.0.0.8"}

// scheduler binds Pods to Nodes.
type scheduler struct {
	d *driver
	a *actor

	mu      sync.Mutex
	nodes   map[string]kubeObject // by name, from its Nodes informer
	pending map[string]kubeObject // unscheduled Pods by namespace/name
	bound   map[string]int        // Pods bound per Node
}

// startScheduler runs the scheduler until the scenario stops.
func startScheduler(d *driver) *scheduler {
	s := &scheduler{d: d, a: d.c.actor(schedulerID), nodes: map[string]kubeObject{}, pending: map[string]kubeObject{}, bound: map[string]int{}}
	opts := informOptions{timeout: func() time.Duration { return 5 * time.Minute }, retry: func(err error) error {
		if d.ctx.Err() != nil || transient(err) {
			return nil
		}
		return err
	}}
	d.background("scheduler nodes informer", func(ctx context.Context) error {
		return inform(ctx, s.a, "/api/v1/nodes", "", opts, func(typ string, n kubeObject) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if typ == "DELETED" {
				delete(s.nodes, n.Metadata.Name)
			} else {
				s.nodes[n.Metadata.Name] = n
			}
			return nil
		})
	})
	d.background("scheduler pods informer", func(ctx context.Context) error {
		return inform(ctx, s.a, "/api/v1/pods", "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed", opts, func(typ string, p kubeObject) error {
			key := p.Metadata.Namespace + "/" + p.Metadata.Name
			s.mu.Lock()
			defer s.mu.Unlock()
			if typ == "DELETED" || p.Metadata.DeletionTimestamp != "" || p.Spec.NodeName != "" {
				delete(s.pending, key)
			} else {
				s.pending[key] = p
			}
			return nil
		})
	})
	d.background("scheduler", func(ctx context.Context) error {
		for ctx.Err() == nil {
			if err := s.schedule(ctx); err != nil {
				return err
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
		return nil
	})
	return s
}

// schedulable: Ready and without a NoSchedule or NoExecute taint.
func schedulable(n kubeObject) bool {
	if n.ready() != "True" {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == "NoSchedule" || t.Effect == "NoExecute" {
			return false
		}
	}
	return true
}

func (s *scheduler) schedule(ctx context.Context) error {
	s.mu.Lock()
	var pods []kubeObject
	for _, p := range s.pending {
		pods = append(pods, p)
	}
	var nodes []string
	for name, n := range s.nodes {
		if schedulable(n) {
			nodes = append(nodes, name)
		}
	}
	s.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].Metadata.Name < pods[j].Metadata.Name })
	sort.Strings(nodes)
	for _, p := range pods {
		if len(nodes) == 0 || ctx.Err() != nil {
			return nil
		}
		s.mu.Lock()
		node := slices.MinFunc(nodes, func(a, b string) int { return s.bound[a] - s.bound[b] })
		s.mu.Unlock()
		binding := map[string]any{"apiVersion": "v1", "kind": "Binding",
			"metadata": map[string]any{"name": p.Metadata.Name, "namespace": p.Metadata.Namespace, "uid": p.Metadata.UID},
			"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": node}}
		code, body, err := sendJSON(ctx, s.a, 10*time.Second, http.MethodPost,
			"/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name+"/binding", "", binding)
		if err != nil {
			return nil // a timeout or the end of the scenario: retried next round
		}
		key := p.Metadata.Namespace + "/" + p.Metadata.Name
		s.mu.Lock()
		switch code {
		case http.StatusCreated:
			s.bound[node]++
			delete(s.pending, key)
		case http.StatusConflict, http.StatusNotFound: // bound or gone meanwhile
			delete(s.pending, key)
		default:
			s.mu.Unlock()
			return fmt.Errorf("binding pod %s to %s: %d %s", key, node, code, body)
		}
		s.mu.Unlock()
	}
	return nil
}

// observer watches Nodes and Pods as admin and records what happened to
// them.
type observer struct {
	mu sync.Mutex
	// nodes is each Node as last seen; notReady and tainted record every
	// time a Node's Ready condition left True, and every time it gained
	// the node.kubernetes.io/unreachable:NoExecute taint; ready records
	// every return to Ready.
	nodes             map[string]kubeObject
	notReady, tainted map[string][]time.Time
	ready             map[string][]time.Time
	// pods is each live Pod as last seen; deleting records when each Pod
	// was first seen with a deletionTimestamp, and on which Node (by
	// namespace/name and UID).
	pods     map[string]kubeObject
	deleting map[string]deletion
}

type deletion struct {
	At   time.Time `json:"at"`
	Node string    `json:"node"`
}

func startObserver(d *driver) *observer {
	o := &observer{nodes: map[string]kubeObject{}, notReady: map[string][]time.Time{}, tainted: map[string][]time.Time{},
		ready: map[string][]time.Time{}, pods: map[string]kubeObject{}, deleting: map[string]deletion{}}
	a := d.c.actor(adminID)
	// The observer retries every transport error: it must see the end of
	// every freeze.
	opts := informOptions{timeout: func() time.Duration { return 10 * time.Minute }, retry: func(error) error { return nil }}
	d.background("observer of nodes", func(ctx context.Context) error {
		return inform(ctx, a, "/api/v1/nodes", "", opts, o.node)
	})
	d.background("observer of pods", func(ctx context.Context) error {
		return inform(ctx, a, "/api/v1/pods", "", opts, o.pod)
	})
	return o
}

func (o *observer) node(typ string, n kubeObject) error {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	name := n.Metadata.Name
	prev, seen := o.nodes[name]
	o.nodes[name] = n
	const unreachable = "node.kubernetes.io/unreachable"
	wasReady := seen && prev.ready() == "True"
	switch {
	case wasReady && n.ready() != "True":
		o.notReady[name] = append(o.notReady[name], now)
	case seen && !wasReady && n.ready() == "True":
		o.ready[name] = append(o.ready[name], now)
	}
	if n.hasTaint(unreachable, "NoExecute") && !prev.hasTaint(unreachable, "NoExecute") {
		o.tainted[name] = append(o.tainted[name], now)
	}
	return nil
}

func (o *observer) pod(typ string, p kubeObject) error {
	now := time.Now()
	key := p.Metadata.Namespace + "/" + p.Metadata.Name
	o.mu.Lock()
	defer o.mu.Unlock()
	if typ == "DELETED" {
		delete(o.pods, key)
		return nil
	}
	o.pods[key] = p
	if p.Metadata.DeletionTimestamp != "" {
		// By UID: a StatefulSet's Pod comes back under the same name,
		// and the new one may be deleted too.
		if _, ok := o.deleting[key+"\x00"+p.Metadata.UID]; !ok {
			o.deleting[key+"\x00"+p.Metadata.UID] = deletion{At: now, Node: p.Spec.NodeName}
		}
	}
	return nil
}

// nodeReady tells whether the Node is Ready as last seen.
func (o *observer) nodeReady(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodes[name].ready() == "True"
}

// allSchedulable tells whether every Node seen is Ready and untainted
// (a new Node carries node.kubernetes.io/not-ready:NoSchedule until the
// controller-manager sees it Ready), and how many there are.
func (o *observer) allSchedulable() (bool, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.nodes {
		if !schedulable(n) || len(n.Spec.Taints) > 0 {
			return false, len(o.nodes)
		}
	}
	return true, len(o.nodes)
}

// podsOn lists the live Pods bound to node, and how many of them are
// being deleted.
func (o *observer) podsOn(node string) (pods []string, deleting int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, p := range o.pods {
		if p.Spec.NodeName == node {
			pods = append(pods, key)
			if p.Metadata.DeletionTimestamp != "" {
				deleting++
			}
		}
	}
	sort.Strings(pods)
	return pods, deleting
}

// runningPods counts the live Pods bound to a Node and not being deleted.
func (o *observer) runningPods() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.pods {
		if p.Spec.NodeName != "" && p.Metadata.DeletionTimestamp == "" && p.Status.Phase == "Running" {
			n++
		}
	}
	return n
}

// since returns the first time in ts at or after t.
func since(ts []time.Time, t time.Time) (time.Time, bool) {
	for _, x := range ts {
		if !x.Before(t) {
			return x, true
		}
	}
	return time.Time{}, false
}

// firstAfter reports when the Node went NotReady, gained the unreachable
// NoExecute taint and came back Ready, each first at or after t.
func (o *observer) firstAfter(node string, t time.Time) (notReady, tainted, ready time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	notReady, _ = since(o.notReady[node], t)
	tainted, _ = since(o.tainted[node], t)
	ready, _ = since(o.ready[node], t)
	return notReady, tainted, ready
}

// evictedAfter lists the Pods of nodes first seen being deleted at or after t.
func (o *observer) evictedAfter(t time.Time, nodes []string) map[string]deletion {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]deletion{}
	for k, del := range o.deleting {
		if key, _, _ := strings.Cut(k, "\x00"); !del.At.Before(t) && slices.Contains(nodes, del.Node) {
			out[key] = del
		}
	}
	return out
}
