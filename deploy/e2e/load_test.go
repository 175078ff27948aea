package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The busy cluster's workload, after SIG Scalability's "load" test
// (clusterloader2 testing/load): namespaces holding Deployments of three
// sizes, StatefulSets, Jobs and a DaemonSet, each Deployment with its
// ConfigMap and Secret mounted into its Pods and a Service in front of
// it (a headless one for each StatefulSet), driven in waves by one user
// at a bounded rate: create everything, scale each Deployment and
// StatefulSet to a random 50-150 % of its size, roll out a new Pod
// template everywhere (and a new ConfigMap generation), delete
// everything, delete the namespaces. After each wave the driver waits
// until the cluster has settled (every Pod of the wave Running on a
// hollow node, nothing terminating), as clusterloader2's
// WaitForControlledPodsRunning does, from the observer's Pod informer.

// loadID is the user running the workload, as clusterloader2 runs it.
var loadID = identity{token: "load-token", user: "load-driver", uid: "uid-load",
	groups: []string{"system:masters"}, userAgent: "clusterloader/v2 (linux/amd64) kubernetes/e2e", sourceIP: "127.0.0.9"}

// loadConfig sizes the workload. Counts are per namespace.
type loadConfig struct {
	Namespaces int
	// Deployments of each size and their replicas.
	Small, Medium, Big                         int
	SmallReplicas, MediumReplicas, BigReplicas int
	StatefulSets, StatefulSetReplicas          int
	Jobs, JobParallelism                       int
	// DaemonSet: one DaemonSet in the first namespace.
	DaemonSet bool
	// OpsPerSecond bounds the driver's writes (clusterloader2's
	// throughput: Pods or objects per second).
	OpsPerSecond float64
	// EvictAfter, when set, is the tolerationSeconds of the Pods of
	// Deployments, StatefulSets and Jobs for unreachable and not-ready
	// Nodes (otherwise the apiserver's default, 300 s).
	EvictAfter int64
	// Seed seeds the random scale factors.
	Seed uint64
}

// busyLoad is the workload of the busy scenarios: 163 Pods after the
// create wave on 10 hollow nodes, about as many after the scale wave, up
// to 225 at once while the rollouts surge (measured).
var busyLoad = loadConfig{
	Namespaces: 3,
	Small:      3, SmallReplicas: 3,
	Medium: 2, MediumReplicas: 8,
	Big: 1, BigReplicas: 20,
	StatefulSets: 1, StatefulSetReplicas: 3,
	Jobs: 1, JobParallelism: 3,
	DaemonSet:    true,
	OpsPerSecond: 10,
}

// workload is one Deployment, StatefulSet, Job or DaemonSet of the load.
type workload struct {
	kind      string // deployments, statefulsets, jobs, daemonsets
	namespace string
	name      string
	replicas  int // the Pods it should run
	size      int // the Pods it was created to run
	rev       int // the Pod template's revision (label rev)
	service   bool
	configs   bool // it mounts ConfigMap <name>-config and Secret <name>-secret
	created   bool
	gone      bool // deleted
}

func (w *workload) String() string { return w.kind + " " + w.namespace + "/" + w.name }

func (w *workload) path() string {
	group := "/apis/apps/v1"
	if w.kind == "jobs" {
		group = "/apis/batch/v1"
	}
	return fmt.Sprintf("%s/namespaces/%s/%s/%s", group, w.namespace, w.kind, w.name)
}

// load drives the workload as loadID.
type load struct {
	d     *driver
	a     *actor
	obs   *observer
	cfg   loadConfig
	nodes int
	rng   *rand.Rand

	namespaces []string
	workloads  []*workload
	next       time.Time // when the next write may go
	ops        int
	peak       int // the most Pods of the load seen at once
}

func newLoad(d *driver, obs *observer, cfg loadConfig, nodes int) *load {
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	l := &load{d: d, a: d.c.actor(loadID), obs: obs, cfg: cfg, nodes: nodes, rng: rand.New(rand.NewPCG(cfg.Seed, 3))}
	for i := 1; i <= cfg.Namespaces; i++ {
		ns := fmt.Sprintf("load-%d", i)
		l.namespaces = append(l.namespaces, ns)
		add := func(kind, prefix string, n, replicas int, service, configs bool) {
			for j := 1; j <= n; j++ {
				l.workloads = append(l.workloads, &workload{kind: kind, namespace: ns, name: fmt.Sprintf("%s-%d", prefix, j),
					replicas: replicas, size: replicas, rev: 1, service: service, configs: configs})
			}
		}
		add("deployments", "small", cfg.Small, cfg.SmallReplicas, true, true)
		add("deployments", "medium", cfg.Medium, cfg.MediumReplicas, true, true)
		add("deployments", "big", cfg.Big, cfg.BigReplicas, true, true)
		add("statefulsets", "sts", cfg.StatefulSets, cfg.StatefulSetReplicas, true, false)
		add("jobs", "job", cfg.Jobs, cfg.JobParallelism, false, false)
		if i == 1 && cfg.DaemonSet {
			add("daemonsets", "daemon", 1, nodes, false, false)
		}
	}
	pods := 0
	for _, w := range l.workloads {
		pods += w.replicas
	}
	d.t.Logf("load (seed %d): %d namespaces, %d workloads, %d Pods", cfg.Seed, len(l.namespaces), len(l.workloads), pods)
	return l
}

// pods is how many Pods the live workloads should run.
func (l *load) pods() int {
	n := 0
	for _, w := range l.workloads {
		if w.created && !w.gone {
			n += w.replicas
		}
	}
	return n
}

// write sends one write as loadID, no sooner than the rate allows, and
// fails the test unless the answer is one of want.
func (l *load) write(method, path string, body any, want ...int) object {
	l.d.t.Helper()
	ct := ""
	if method == http.MethodPatch {
		// kubectl's patches of built-in objects: lists of containers
		// and env vars merge by name.
		ct = "application/strategic-merge-patch+json"
	}
	if wait := time.Until(l.next); wait > 0 {
		l.d.sleep(wait)
	}
	l.next = time.Now().Add(time.Duration(float64(time.Second) / l.cfg.OpsPerSecond))
	l.ops++
	code, resp, err := sendJSON(l.d.ctx, l.a, 30*time.Second, method, path, ct, body)
	if err != nil {
		l.d.t.Fatalf("%s %s as %s: %v", method, path, l.a.id.user, err)
	}
	if !slices.Contains(want, code) {
		l.d.t.Fatalf("%s %s as %s: %d %s", method, path, l.a.id.user, code, bytes.TrimSpace(resp))
	}
	var o object
	_ = json.Unmarshal(resp, &o)
	return o
}

// workloadsOf returns the live workloads of the given kinds (all when none).
func (l *load) workloadsOf(kinds ...string) []*workload {
	var out []*workload
	for _, w := range l.workloads {
		if w.created && !w.gone && (len(kinds) == 0 || slices.Contains(kinds, w.kind)) {
			out = append(out, w)
		}
	}
	return out
}

// create is the create wave: each namespace, its workloads' ConfigMaps,
// Secrets and Services, then its workloads; then it waits until every Pod
// runs. Without arguments it creates every namespace of the load.
func (l *load) create(timeout time.Duration, namespaces ...string) {
	l.d.t.Helper()
	start := time.Now()
	if len(namespaces) == 0 {
		namespaces = l.namespaces
	}
	for _, ns := range namespaces {
		l.write(http.MethodPost, "/api/v1/namespaces", namespace(ns), http.StatusCreated)
		var ws []*workload
		for _, w := range l.workloads {
			if w.namespace == ns {
				ws = append(ws, w)
			}
		}
		for _, w := range ws {
			if w.configs {
				l.write(http.MethodPost, collection(w.namespace, "configmaps"), loadConfigMap(w, 1), http.StatusCreated)
				l.write(http.MethodPost, collection(w.namespace, "secrets"), loadSecret(w), http.StatusCreated)
			}
			if w.service {
				l.write(http.MethodPost, collection(w.namespace, "services"), loadService(w), http.StatusCreated)
			}
		}
		for _, w := range ws {
			l.write(http.MethodPost, strings.TrimSuffix(w.path(), "/"+w.name), l.object(w), http.StatusCreated)
			w.created = true
		}
	}
	l.waitSettled(fmt.Sprintf("create %v", namespaces), start, timeout)
}

// scale is the scale wave: each Deployment and StatefulSet to a random
// 50-150 % of its size, through the scale subresource as kubectl scale
// does.
func (l *load) scale(timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	l.scaleBy(func() float64 { return 0.5 + l.rng.Float64() })
	l.waitSettled("scale", start, timeout)
}

// scaleBy scales each Deployment and StatefulSet by a factor drawn from
// factor, and does not wait.
func (l *load) scaleBy(factor func() float64) {
	l.d.t.Helper()
	for _, w := range l.workloadsOf("deployments", "statefulsets") {
		w.replicas = max(1, int(math.Round(float64(w.replicas)*factor())))
		l.write(http.MethodPatch, w.path()+"/scale", map[string]any{"spec": map[string]any{"replicas": w.replicas}}, http.StatusOK)
	}
}

// rescale is the scale wave of a load whose namespaces stay: each
// Deployment and StatefulSet to a random 50-150 % of the size it was
// created with (of its current size, round after round, the sizes would
// wander off).
func (l *load) rescale(timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	for _, w := range l.workloadsOf("deployments", "statefulsets") {
		w.replicas = max(1, int(math.Round(float64(w.size)*(0.5+l.rng.Float64()))))
		l.write(http.MethodPatch, w.path()+"/scale", map[string]any{"spec": map[string]any{"replicas": w.replicas}}, http.StatusOK)
	}
	l.waitSettled("scale", start, timeout)
}

// recreate creates again removed workloads of namespaces that stay, with
// their ConfigMaps and Secrets but without a Service (a Service created
// anew would be a write the caller decides on), and waits until their
// Pods run.
func (l *load) recreate(ws []*workload, timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	for _, w := range ws {
		if w.configs {
			l.write(http.MethodPost, collection(w.namespace, "configmaps"), loadConfigMap(w, 1), http.StatusCreated)
			l.write(http.MethodPost, collection(w.namespace, "secrets"), loadSecret(w), http.StatusCreated)
		}
		w.service = false
		w.replicas, w.rev, w.gone = w.size, 1, false
		l.write(http.MethodPost, strings.TrimSuffix(w.path(), "/"+w.name), l.object(w), http.StatusCreated)
	}
	l.waitSettled(fmt.Sprintf("re-create %d workloads", len(ws)), start, timeout)
}

// updateConfigs writes a new generation of every ConfigMap, and does not
// wait.
func (l *load) updateConfigs() {
	l.d.t.Helper()
	for _, w := range l.workloadsOf() {
		if w.configs {
			l.write(http.MethodPut, collection(w.namespace, "configmaps")+"/"+w.name+"-config", loadConfigMap(w, w.rev+1), http.StatusOK)
		}
	}
}

// update is the update wave: a new generation of every ConfigMap, then a
// new Pod template (label rev, env CONFIG_GENERATION) for every
// Deployment, StatefulSet and DaemonSet, which rolls each out.
func (l *load) update(timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	for _, w := range l.workloadsOf() {
		if w.configs {
			l.write(http.MethodPut, collection(w.namespace, "configmaps")+"/"+w.name+"-config", loadConfigMap(w, w.rev+1), http.StatusOK)
		}
	}
	for _, w := range l.workloadsOf("deployments", "statefulsets", "daemonsets") {
		w.rev++
		tpl := map[string]any{"metadata": map[string]any{"labels": map[string]string{"rev": strconv.Itoa(w.rev)}},
			"spec": map[string]any{"containers": []map[string]any{{"name": "app",
				"env": []map[string]any{{"name": "CONFIG_GENERATION", "value": strconv.Itoa(w.rev)}}}}}}
		l.write(http.MethodPatch, w.path(), map[string]any{"spec": map[string]any{"template": tpl}}, http.StatusOK)
	}
	l.waitSettled("update", start, timeout)
}

// remove deletes ws (their Pods go with them, in the background) and
// their Services, ConfigMaps and Secrets, and waits until their Pods are
// gone.
func (l *load) remove(ws []*workload, timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	background := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
	for _, w := range ws {
		l.write(http.MethodDelete, w.path(), background, http.StatusOK, http.StatusAccepted)
		w.gone = true
	}
	for _, w := range ws {
		l.removeService(w)
		if w.configs {
			l.write(http.MethodDelete, collection(w.namespace, "configmaps")+"/"+w.name+"-config", nil, http.StatusOK)
			l.write(http.MethodDelete, collection(w.namespace, "secrets")+"/"+w.name+"-secret", nil, http.StatusOK)
		}
	}
	l.waitSettled(fmt.Sprintf("delete %d workloads", len(ws)), start, timeout)
}

// removeService deletes w's Service, if it has one.
func (l *load) removeService(w *workload) {
	l.d.t.Helper()
	if w.service {
		l.write(http.MethodDelete, collection(w.namespace, "services")+"/"+w.name, nil, http.StatusOK)
		w.service = false
	}
}

// deleteService and createService delete and re-create w's Service, as a
// user who re-applies a chart with --force does; createService returns the
// new resourceVersion.
func (l *load) deleteService(w *workload) {
	l.d.t.Helper()
	l.write(http.MethodDelete, collection(w.namespace, "services")+"/"+w.name, nil, http.StatusOK)
}

func (l *load) createService(w *workload) string {
	l.d.t.Helper()
	o := l.write(http.MethodPost, collection(w.namespace, "services"), loadService(w), http.StatusCreated)
	return o.Metadata.ResourceVersion
}

// deleteNamespaces is the last wave: what is left goes with the
// namespaces, which the namespace controller empties and removes.
func (l *load) deleteNamespaces(timeout time.Duration) {
	l.d.t.Helper()
	start := time.Now()
	for _, w := range l.workloads {
		w.gone = true
	}
	for _, ns := range l.namespaces {
		l.write(http.MethodDelete, "/api/v1/namespaces/"+ns, nil, http.StatusOK)
	}
	l.waitSettled("delete", start, timeout)
	admin := l.d.c.actor(adminID)
	if !poll(timeout-time.Since(start), time.Second, func() bool {
		for _, ns := range l.namespaces {
			if code, _, err := admin.raw(http.MethodGet, "/api/v1/namespaces/"+ns, nil); err != nil || code != http.StatusNotFound {
				return false
			}
		}
		return true
	}) {
		l.d.t.Fatalf("namespaces %v not gone %s after their deletion", l.namespaces, timeout)
	}
	l.d.t.Logf("load: namespaces %v gone %.1fs after their deletion; at most %d Pods at once", l.namespaces, time.Since(start).Seconds(), l.peak)
}

// waitSettled waits until every live workload runs exactly its Pods, of
// its current template, and no Pod of a deleted workload is left.
func (l *load) waitSettled(wave string, start time.Time, timeout time.Duration) {
	l.d.t.Helper()
	var behind []string
	ok := poll(timeout-time.Since(start), 500*time.Millisecond, func() bool {
		behind = l.behind()
		return len(behind) == 0
	})
	if !ok {
		l.d.t.Fatalf("load: %s wave not settled after %s: %s", wave, timeout, strings.Join(behind, "; "))
	}
	l.d.t.Logf("load: %s wave settled in %.1fs (%d writes so far, %d Pods running)", wave, time.Since(start).Seconds(), l.ops, l.pods())
}

// behind describes the workloads whose Pods are not what they should be.
func (l *load) behind() []string {
	type count struct{ current, all int }
	counts := map[string]*count{}
	l.obs.mu.Lock()
	for _, p := range l.obs.pods {
		key := p.Metadata.Namespace + "/" + p.Metadata.Labels["app"]
		c := counts[key]
		if c == nil {
			c = &count{}
			counts[key] = c
		}
		c.all++
		w := l.find(p.Metadata.Namespace, p.Metadata.Labels["app"])
		if w != nil && p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == "" && p.Metadata.Labels["rev"] == strconv.Itoa(w.rev) {
			c.current++
		}
	}
	l.obs.mu.Unlock()
	all := 0
	for _, c := range counts {
		all += c.all
	}
	l.peak = max(l.peak, all)
	var out []string
	for _, w := range l.workloads {
		if !w.created {
			continue
		}
		c := counts[w.namespace+"/"+w.name]
		if c == nil {
			c = &count{}
		}
		want := w.replicas
		if w.gone {
			want = 0
		}
		if c.all != want || c.current != want {
			out = append(out, fmt.Sprintf("%s: %d of %d Pods running at rev %d, %d in all", w, c.current, want, w.rev, c.all))
		}
	}
	sort.Strings(out)
	return out
}

func (l *load) find(ns, name string) *workload {
	for _, w := range l.workloads {
		if w.namespace == ns && w.name == name {
			return w
		}
	}
	return nil
}

// Object bodies.

func (l *load) object(w *workload) any {
	meta := metav1.ObjectMeta{Name: w.name, Namespace: w.namespace, Labels: map[string]string{"app": w.name, "group": "load"}}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}
	tpl := l.podTemplate(w)
	replicas := int32(w.replicas)
	switch w.kind {
	case "deployments":
		return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: selector, Template: tpl}}
	case "statefulsets":
		return &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, ObjectMeta: meta,
			Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: selector, Template: tpl, ServiceName: w.name,
				PodManagementPolicy: appsv1.ParallelPodManagement}}
	case "jobs":
		// A Job's Pods run until it is deleted: the fake runtime's
		// containers do not exit.
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta,
			Spec: batchv1.JobSpec{Parallelism: &replicas, Completions: &replicas, Template: tpl}}
	case "daemonsets":
		maxUnavailable := intstr.FromString("30%")
		return &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}, ObjectMeta: meta,
			Spec: appsv1.DaemonSetSpec{Selector: selector, Template: tpl,
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable}}}}
	}
	panic("unknown workload kind " + w.kind)
}

func (l *load) podTemplate(w *workload) corev1.PodTemplateSpec {
	c := corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10",
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		Env:   []corev1.EnvVar{{Name: "CONFIG_GENERATION", Value: strconv.Itoa(w.rev)}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("8Mi")}}}
	spec := corev1.PodSpec{Containers: []corev1.Container{c}}
	if w.configs {
		spec.Volumes = []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: w.name + "-config"}}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: w.name + "-secret"}}},
		}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/config"}, {Name: "secret", MountPath: "/etc/secret"}}
	}
	if l.cfg.EvictAfter > 0 && w.kind != "daemonsets" {
		for _, key := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &l.cfg.EvictAfter})
		}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"app": w.name, "group": "load", "rev": strconv.Itoa(w.rev)}}, Spec: spec}
}

func loadService(w *workload) *corev1.Service {
	s := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.namespace, Labels: map[string]string{"app": w.name, "group": "load"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": w.name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if w.kind == "statefulsets" {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return s
}

func loadConfigMap(w *workload, generation int) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: w.name + "-config", Namespace: w.namespace, Labels: map[string]string{"app": w.name}},
		Data:       map[string]string{"generation": strconv.Itoa(generation), "app.properties": "replicas=" + strconv.Itoa(w.replicas)}}
}

func loadSecret(w *workload) *corev1.Secret {
	return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: w.name + "-secret", Namespace: w.namespace, Labels: map[string]string{"app": w.name}},
		StringData: map[string]string{"password": "load-" + w.name}}
}
