package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// manifestsDir is deploy/kubernetes: a kustomize base and its overlays.
const manifestsDir = "../kubernetes"

// overlays are rendered and checked by TestManifestsDryRun.
var overlays = []string{"embedded", "scaled"}

// TestManifestsDryRun renders each overlay of deploy/kubernetes with
// kustomize (the library kubectl -k runs), with the secrets an operator
// would make, and sends every object to a real kube-apiserver as a
// server-side dry run (?dryRun=All): the apiserver decodes, defaults,
// validates and admits each one (PodSecurity "restricted" included, through
// the namespace's labels) without storing it. The namespace itself is
// created for real first, since dry-run objects in it need it to exist.
// It also checks what the apiserver cannot: that every Secret and
// ConfigMap a pod template names is among the rendered objects, and that
// every flag given to auditlens serve is one `auditlens serve -h` lists.
func TestManifestsDryRun(t *testing.T) {
	prepare(t)
	dir := filepath.Join(tempRoot, "manifests")
	ca := newCA(t, dir)
	c := startCluster(t, ca, filepath.Join(dir, "cluster"), "manifests", sink{}, nil)
	defer c.stop(t)
	admin := c.actor(adminID)
	serveFlags := serveFlagNames(t)

	tree := filepath.Join(dir, "kubernetes")
	if err := os.CopyFS(tree, os.DirFS(manifestsDir)); err != nil {
		t.Fatal(err)
	}
	var created bool // the namespace, for real
	rendered := map[string][]k8sObject{}
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := renderOverlay(t, ca, filepath.Join(tree, "overlays", overlay))
			rendered[overlay] = objs
			checkReferences(t, objs)
			checkServeFlags(t, objs, serveFlags)
			// Namespaces first: the rest is created in them.
			sort.SliceStable(objs, func(i, j int) bool { return objs[i].kind() == "Namespace" && objs[j].kind() != "Namespace" })
			for _, o := range objs {
				path := resourcePath(t, admin, o)
				method, target := "POST", path
				code := dryRun(t, admin, method, target, o)
				if o.kind() == "Namespace" && code == http.StatusConflict && created {
					// Made for real by the previous overlay: dry-run an update.
					method, target = "PUT", path+"/"+o.name()
					code = dryRun(t, admin, method, target, o)
				}
				t.Logf("%s %s/%s (%s %s?dryRun=All): %d", o.kind(), o.namespace(), o.name(), method, target, code)
				if code != http.StatusCreated && code != http.StatusOK {
					continue // dryRun reported it
				}
				if o.kind() == "Namespace" && !created {
					body, _ := json.Marshal(o)
					if _, err := admin.call("POST", path, json.RawMessage(body), http.StatusCreated); err != nil {
						t.Fatalf("creating namespace %s for real: %v", o.name(), err)
					}
					created = true
				}
			}
		})
	}
	// The Helm chart in each mode: linted, rendered into the namespace
	// above (Helm makes no namespace), the same objects as the overlay
	// of that name, and admitted by the apiserver.
	for _, mode := range overlays {
		t.Run("helm-"+mode, func(t *testing.T) {
			if !created {
				t.Skip("the overlays made no namespace")
			}
			objs := renderChart(t, ca, filepath.Join(dir, "helm-"+mode), mode)
			checkReferences(t, objs)
			checkServeFlags(t, objs, serveFlags)
			checkSameAs(t, objs, rendered[mode])
			for _, o := range objs {
				path := resourcePath(t, admin, o)
				code := dryRun(t, admin, "POST", path, o)
				t.Logf("%s %s/%s (POST %s?dryRun=All): %d", o.kind(), o.namespace(), o.name(), path, code)
			}
		})
	}
}

// renderChart lints deploy/helm/auditlens with the values an operator
// gives for mode (the certificate and tokens inline) and renders it with
// helm template into the namespace auditlens.
func renderChart(t *testing.T, ca *testCA, dir, mode string) []k8sObject {
	t.Helper()
	crt, key := ca.issue(t, dir, "tls", "auditlens.auditlens.svc", true)
	pem := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	values := map[string]any{
		"mode":    mode,
		"tls":     map[string]any{"cert": pem(crt), "key": pem(key)},
		"webhook": map[string]any{"token": "e2e-helm-token=manifests"},
		"api":     map[string]any{"tokens": []string{"e2e-helm-read-token"}},
	}
	if mode == "scaled" {
		values["store"] = map[string]any{"url": "clickhouse://auditlens:e2e@clickhouse.clickhouse.svc:9000/auditlens"}
	}
	vb, _ := json.Marshal(values) // JSON is YAML
	vf := writeFile(t, dir, "values.yaml", vb)
	chart := filepath.Join("..", "helm", "auditlens")
	env := append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"))
	// Without a certificate and tokens the chart refuses, saying what.
	bare := exec.Command(helmBin, "template", "auditlens", chart, "--set", "mode="+mode)
	bare.Env = env
	if out, err := bare.CombinedOutput(); err == nil || !strings.Contains(string(out), "tls: set existingSecret") {
		t.Errorf("helm template %s without values: %v\n%s", mode, err, out)
	}
	lint := exec.Command(helmBin, "lint", "--strict", chart, "-f", vf)
	lint.Env = env
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("helm lint %s: %v\n%s", mode, err, out)
	}
	tpl := exec.Command(helmBin, "template", "auditlens", chart, "--namespace", "auditlens", "-f", vf)
	tpl.Env = env
	var stderr bytes.Buffer
	tpl.Stderr = &stderr
	out, err := tpl.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", mode, err, stderr.Bytes())
	}
	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var y map[string]any
		if err := dec.Decode(&y); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("helm template %s: %v", mode, err)
		}
		if y == nil {
			continue
		}
		// Through JSON, as the overlays' objects come: numbers as float64.
		var o k8sObject
		b, err := json.Marshal(y)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		// helm template leaves the namespace to the install; name it.
		if md, ok := o["metadata"].(map[string]any); ok && md["namespace"] == nil && o.kind() != "Namespace" {
			md["namespace"] = "auditlens"
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		t.Fatalf("helm template %s rendered nothing", mode)
	}
	return objs
}

// checkSameAs fails t unless the chart renders what the overlay does: the
// same kinds of objects (but the Namespace, which Helm leaves to the
// install), and for each workload's component the same serve flags,
// probes, volumes and security settings.
func checkSameAs(t *testing.T, chart, overlay []k8sObject) {
	t.Helper()
	kinds := func(objs []k8sObject) string {
		var ks []string
		for _, o := range objs {
			if o.kind() != "Namespace" {
				ks = append(ks, o.kind())
			}
		}
		sort.Strings(ks)
		return strings.Join(ks, " ")
	}
	if a, b := kinds(chart), kinds(overlay); a != b {
		t.Errorf("the chart renders %s; the overlay %s", a, b)
	}
	type workload struct {
		flags, probes, mounts string
		security              string
	}
	workloads := func(objs []k8sObject) map[string]workload {
		out := map[string]workload{}
		for _, o := range objs {
			ps := podSpec(o)
			if ps == nil {
				continue
			}
			meta, _ := o["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			key := o.kind() + "/" + fmt.Sprint(labels["app.kubernetes.io/component"])
			containers, _ := ps["containers"].([]any)
			c, _ := containers[0].(map[string]any)
			var flags []string
			args, _ := c["args"].([]any)
			for _, a := range args {
				if m := flagRE.FindStringSubmatch(fmt.Sprint(a)); m != nil {
					flags = append(flags, m[1])
				}
			}
			sort.Strings(flags)
			var probes []string
			for _, p := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
				if pr, ok := c[p].(map[string]any); ok {
					hg, _ := pr["httpGet"].(map[string]any)
					probes = append(probes, fmt.Sprintf("%s %v %v/%v", p, hg["path"], pr["periodSeconds"], pr["failureThreshold"]))
				}
			}
			var mounts []string
			vms, _ := c["volumeMounts"].([]any)
			for _, vm := range vms {
				m, _ := vm.(map[string]any)
				mounts = append(mounts, fmt.Sprint(m["mountPath"]))
			}
			sort.Strings(mounts)
			sec, _ := json.Marshal([]any{ps["securityContext"], c["securityContext"], c["resources"], ps["automountServiceAccountToken"]})
			out[key] = workload{strings.Join(flags, " "), strings.Join(probes, "; "), strings.Join(mounts, " "), string(sec)}
		}
		return out
	}
	cw, ow := workloads(chart), workloads(overlay)
	if len(cw) != len(ow) {
		t.Errorf("the chart has workloads %v; the overlay %v", cw, ow)
	}
	for k, o := range ow {
		c, ok := cw[k]
		if !ok {
			t.Errorf("the chart has no %s", k)
			continue
		}
		if c != o {
			t.Errorf("%s differs:\n chart:   %+v\n overlay: %+v", k, c, o)
		}
	}
}

// k8sObject is one rendered object.
type k8sObject map[string]any

func (o k8sObject) str(keys ...string) string {
	var v any = map[string]any(o)
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

func (o k8sObject) kind() string      { return o.str("kind") }
func (o k8sObject) name() string      { return o.str("metadata", "name") }
func (o k8sObject) namespace() string { return o.str("metadata", "namespace") }

// renderOverlay writes the git-ignored secrets an operator makes (README,
// Deploy) into the overlay's secrets/ and renders it.
func renderOverlay(t *testing.T, ca *testCA, overlay string) []k8sObject {
	t.Helper()
	secrets := filepath.Join(overlay, "secrets")
	crt, key := ca.issue(t, secrets, "tls", "auditlens.auditlens.svc", true)
	if filepath.Base(crt) != "tls.crt" || filepath.Base(key) != "tls.key" {
		t.Fatalf("issued %s and %s, want tls.crt and tls.key", crt, key)
	}
	writeFile(t, secrets, "webhook-token", []byte("e2e-manifests-token=manifests"))
	writeFile(t, secrets, "api-tokens", []byte("e2e-manifests-read-token\n"))
	if filepath.Base(overlay) == "scaled" {
		writeFile(t, secrets, "store-url", []byte("clickhouse://auditlens:e2e@clickhouse.clickhouse.svc:9000/auditlens"))
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	var out []k8sObject
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var o k8sObject
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		t.Fatalf("kustomize build %s rendered nothing", overlay)
	}
	return out
}

// podSpec returns the pod template's spec of a workload, nil for others.
func podSpec(o k8sObject) map[string]any {
	spec, _ := o["spec"].(map[string]any)
	tpl, _ := spec["template"].(map[string]any)
	ps, _ := tpl["spec"].(map[string]any)
	return ps
}

// checkReferences fails t when a pod template names a Secret or ConfigMap
// the overlay does not render (a dry run accepts dangling names; the pod
// would never start).
func checkReferences(t *testing.T, objs []k8sObject) {
	t.Helper()
	have := map[string]bool{}
	for _, o := range objs {
		have[o.kind()+"/"+o.name()] = true
	}
	var walk func(v any)
	check := func(kind, name string) {
		if name != "" && !have[kind+"/"+name] {
			t.Errorf("a pod template names %s %q, which the overlay does not render", kind, name)
		}
	}
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v["secret"].(map[string]any); ok {
				check("Secret", fmt.Sprint(s["secretName"]))
			}
			if s, ok := v["secretKeyRef"].(map[string]any); ok {
				check("Secret", fmt.Sprint(s["name"]))
			}
			if s, ok := v["configMap"].(map[string]any); ok {
				check("ConfigMap", fmt.Sprint(s["name"]))
			}
			if s, ok := v["configMapKeyRef"].(map[string]any); ok {
				check("ConfigMap", fmt.Sprint(s["name"]))
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, o := range objs {
		if ps := podSpec(o); ps != nil {
			walk(ps)
		}
	}
}

var flagRE = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)(=|$)`)

// serveFlagNames lists the flags `auditlens serve -h` documents.
func serveFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command(auditlensBin, "serve", "-h")
	out, _ := cmd.CombinedOutput() // -h exits 0; the text is what matters
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		names[m[1]] = true
	}
	if !names["listen"] || !names["store"] {
		t.Fatalf("auditlens serve -h lists no --listen or --store:\n%s", out)
	}
	return names
}

// checkServeFlags fails t when a container running auditlens serve is
// given a flag serve does not have.
func checkServeFlags(t *testing.T, objs []k8sObject, known map[string]bool) {
	t.Helper()
	for _, o := range objs {
		ps := podSpec(o)
		containers, _ := ps["containers"].([]any)
		for _, c := range containers {
			cm, _ := c.(map[string]any)
			args, _ := cm["args"].([]any)
			if len(args) == 0 || args[0] != "serve" {
				continue
			}
			for _, a := range args[1:] {
				s := fmt.Sprint(a)
				m := flagRE.FindStringSubmatch(s)
				if m == nil {
					t.Errorf("%s %s: argument %q is not a --flag=value", o.kind(), o.name(), s)
					continue
				}
				if !known[m[1]] {
					t.Errorf("%s %s: auditlens serve has no flag --%s", o.kind(), o.name(), m[1])
				}
			}
		}
	}
}

// resourcePath finds o's collection through the apiserver's discovery
// documents: /api/v1/namespaces/NS/services, /apis/apps/v1/....
func resourcePath(t *testing.T, a *actor, o k8sObject) string {
	t.Helper()
	gv := o.str("apiVersion")
	root := "/apis/" + gv
	if gv == "v1" {
		root = "/api/v1"
	}
	res, ok := discovery[gv]
	if !ok {
		code, body, err := a.raw("GET", root, nil)
		if err != nil || code != 200 {
			t.Fatalf("discovery GET %s: %d %v %s", root, code, err, bytes.TrimSpace(body))
		}
		var list struct {
			Resources []struct {
				Name       string `json:"name"`
				Kind       string `json:"kind"`
				Namespaced bool   `json:"namespaced"`
			} `json:"resources"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		res = map[string]apiResource{}
		for _, r := range list.Resources {
			if !strings.Contains(r.Name, "/") { // not a subresource
				res[r.Kind] = apiResource{r.Name, r.Namespaced}
			}
		}
		discovery[gv] = res
	}
	r, ok := res[o.kind()]
	if !ok {
		t.Fatalf("the apiserver serves no %s in %s", o.kind(), gv)
	}
	if r.namespaced {
		if o.namespace() == "" {
			t.Fatalf("%s %s is namespaced but the overlay gives it no namespace", o.kind(), o.name())
		}
		return root + "/namespaces/" + o.namespace() + "/" + r.name
	}
	return root + "/" + r.name
}

type apiResource struct {
	name       string
	namespaced bool
}

// discovery caches the apiserver's resources by group/version.
var discovery = map[string]map[string]apiResource{}

// dryRun sends o to path with ?dryRun=All and fails t unless the apiserver
// answers 200 or 201 without warnings (PodSecurity reports violations of
// workloads' pod templates as warnings). A 409 for a Namespace is returned
// to the caller to handle.
func dryRun(t *testing.T, a *actor, method, path string, o k8sObject) int {
	t.Helper()
	body, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.request(ctx, method, path+"?dryRun=All&fieldValidation=Strict", body, "application/json")
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusConflict && o.kind() == "Namespace":
	case resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK:
		t.Errorf("%s %s %s (dry run): %d %s", o.kind(), o.namespace(), o.name(), resp.StatusCode, bytes.TrimSpace(b))
	default:
		if w := resp.Header.Values("Warning"); len(w) > 0 {
			t.Errorf("%s %s/%s (dry run): warnings %q", o.kind(), o.namespace(), o.name(), w)
		}
	}
	return resp.StatusCode
}
