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
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := renderOverlay(t, ca, filepath.Join(tree, "overlays", overlay))
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
