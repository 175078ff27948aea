package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// The real-controllers scenario runs the real kube-controller-manager of
// the pinned Kubernetes over fake Nodes whose "kubelets" only renew their
// Leases: realistic background traffic (informers of every resource,
// ReplicaSets and Pods from Deployments, Endpoints and EndpointSlices,
// service accounts, node lifecycle) on which the detectors must stay
// silent, including when the real endpoints controller follows a user
// deleting and re-creating a Service.

// controllersPrelude creates, before auditing starts, the fake Nodes and,
// in namespace default, a Deployment behind each live Service. The
// Endpoints are left to the real endpoints controller.
func controllersPrelude(d *driver) {
	d.t.Helper()
	_, err := d.admin.create("", "namespaces", namespace("apps"))
	d.must(err)
	_, err = d.writer.create("apps", "configmaps", configMap("app-config", map[string]string{"generation": "0"}))
	d.must(err)
	for _, id := range nodeIDs {
		name := id.user[len("system:node:"):]
		_, err := d.admin.call(http.MethodPost, "/api/v1/nodes", fakeNode(name), http.StatusCreated)
		d.must(err)
		kubelet := d.c.actor(id)
		_, err = kubelet.call(http.MethodPatch, "/api/v1/nodes/"+name+"/status", nodeStatus(), http.StatusOK)
		d.must(err)
		_, err = kubelet.call(http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", nodeLease(name), http.StatusCreated)
		d.must(err)
	}
	for _, name := range liveServices {
		_, err := d.alice.create("default", "services", service(name))
		d.must(err)
		_, err = d.alice.call(http.MethodPost, "/apis/apps/v1/namespaces/default/deployments", deployment(name, 1), http.StatusCreated)
		d.must(err)
	}
}

func realControllers(d *driver) expectation {
	kcm := startControllerManager(d, d.c.base)
	// Kubelets: each renews its Lease every 2 s (every 10 s in a real
	// cluster), which keeps the node lifecycle controller content.
	for _, id := range nodeIDs {
		kubelet := d.c.actor(id)
		name := id.user[len("system:node:"):]
		d.background(id.user, func(ctx context.Context) error {
			for ctx.Err() == nil {
				_, err := kubelet.call(http.MethodPatch, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+name,
					map[string]any{"spec": map[string]any{"renewTime": microTime(time.Now())}}, http.StatusOK)
				if err != nil {
					return err
				}
				select {
				case <-time.After(2 * time.Second):
				case <-ctx.Done():
				}
			}
			return nil
		})
	}
	d.configWriter()
	// The controllers are at work once the endpoints controller has
	// written the Endpoints of every Service.
	d.waitFor("the endpoints controller to write Endpoints of every Service", 2*time.Minute, func() bool {
		for _, name := range liveServices {
			if _, err := d.admin.get("default", "endpoints", name); err != nil {
				return false
			}
		}
		return true
	})
	d.sleep(5 * time.Second)

	// A user deletes and re-creates Service cart; the real endpoints
	// controller deletes its Endpoints and creates them again.
	d.must(d.alice.delete("default", "services", "cart"))
	d.waitFor("the endpoints controller to delete Endpoints cart", time.Minute, func() bool {
		_, err := d.admin.get("default", "endpoints", "cart")
		return err != nil
	})
	d.sleep(2 * time.Second)
	_, err := d.alice.create("default", "services", service("cart"))
	d.must(err)
	d.waitFor("the endpoints controller to re-create Endpoints cart", time.Minute, func() bool {
		_, err := d.admin.get("default", "endpoints", "cart")
		return err == nil
	})
	// Scaling makes the ReplicaSet controller create Pods.
	_, err = d.alice.call(http.MethodPatch, "/apis/apps/v1/namespaces/default/deployments/frontend",
		map[string]any{"spec": map[string]any{"replicas": 3}}, http.StatusOK)
	d.must(err)
	d.sleep(15 * time.Second)

	// Stop the controllers while the apiserver still sends to auditlens,
	// so that their watches' ends are delivered too.
	d.stop()
	if err := kcm.stop(30 * time.Second); err != nil {
		d.t.Errorf("kube-controller-manager: %v\n%s", err, kcm.logTail(30))
	}
	return expectation{
		Description: "the real kube-controller-manager over three fake Nodes renewing their Leases, Deployments behind " +
			"the Services; alice deletes and re-creates Service cart and the real endpoints controller follows",
		Silent: []string{"watch-loop", "watch-rv-regression"},
	}
}

// startControllerManager starts the real kube-controller-manager as
// system:kube-controller-manager, serving nothing, against server: the
// driver's apiserver or a proxy in front of it whose certificate the
// cluster's CA signed. extra flags are appended.
func startControllerManager(d *driver, server string, extra ...string) *proc {
	d.t.Helper()
	kubeconfig := writeFile(d.t, d.c.dir, "kcm.kubeconfig", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kcm
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: kcm
current-context: e2e
`, server, d.c.caPath, kcmID.token)))
	return startProc(d.t, d.c.dir, "kube-controller-manager", kubeControllerManagerBin, append([]string{
		"--kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + d.c.saKeyPath,
		"--root-ca-file=" + d.c.caPath,
		"--cluster-name=e2e",
		"--cert-dir=" + filepath.Join(d.c.dir, "kcm-certs"),
	}, extra...)...)
}

// waitFor polls cond until it holds, failing the test after timeout.
func (d *driver) waitFor(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	if !poll(timeout, 250*time.Millisecond, cond) {
		d.t.Fatalf("timed out waiting for %s", what)
	}
}

func microTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func fakeNode(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": name, "labels": map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
	}
}

func nodeStatus() map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	resources := map[string]string{"cpu": "4", "memory": "16Gi", "pods": "110"}
	return map[string]any{"status": map[string]any{
		"capacity": resources, "allocatable": resources,
		"conditions": []map[string]any{{
			"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
			"lastHeartbeatTime": now, "lastTransitionTime": now,
		}},
	}}
}

func nodeLease(name string) map[string]any {
	return map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": name, "namespace": "kube-node-lease"},
		"spec": map[string]any{"holderIdentity": name, "leaseDurationSeconds": 40,
			"renewTime": microTime(time.Now())},
	}
}

func deployment(name string, replicas int) map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app": name}},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]string{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]string{"app": name}},
				"spec": map[string]any{"containers": []map[string]any{{
					"name": "app", "image": "registry.k8s.io/pause:3.10",
					"ports": []map[string]any{{"containerPort": 8080}},
				}}},
			},
		},
	}
}
