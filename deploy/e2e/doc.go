// Package e2e runs auditlens against the real producer of audit events: a
// kube-apiserver (with etcd, and in three scenarios the real
// kube-controller-manager) built from the Go module proxy at the versions
// pinned in versions.env, sending to an `auditlens serve` over its audit
// webhook while a scenario driver plays the cluster's actors through the
// REST API. In the kcm-watch-loop scenarios a fault-injecting proxy
// (faultproxy_test.go) between the controller-manager and the apiserver
// re-creates the 1.7–1.9 watch-cache bug, so that the incident's loop is the
// real controller-manager's own. In the heartbeat scenarios
// (heartbeat_test.go, run side by side by TestHeartbeatLoss for about four
// minutes of real time) fake kubelets (kubelet_test.go) heartbeat under the
// real controller-manager and most of them lose the apiserver at once.
//
// TestHAWatchLoop (ha_test.go) runs the kcm-watch-loop story on an HA
// control plane: two kube-apiservers on one etcd, each with its own webhook
// token and audit log, and between the fault proxy and them a TCP load
// balancer that fails over from one to the other in the middle of the loop.
// auditlens must keep one finding for the looping reflector, with evidence
// from both apiservers, over the webhook and from scan over both logs.
//
// TestBusyCluster (busy_test.go) runs a workload instead of a script: the
// real kube-controller-manager and kube-scheduler over ten kubemark hollow
// nodes (hollow_test.go: the real kubelet and kube-proxy over a fake
// container runtime, each kubelet authenticated as system:node:<name> and
// authorized by the Node authorizer), and a load driver (load_test.go)
// after SIG Scalability's load test: namespaces of Deployments,
// StatefulSets, Jobs and a DaemonSet with their Services, ConfigMaps and
// Secrets, created, scaled, rolled out and deleted in waves, up to 225
// Pods at the peak. Three runs, each on its own cluster: healthy, where
// every detector must stay silent; a heartbeat wave, where four hollow
// nodes hang (SIGSTOP) for 90 s amid the load and heartbeat-loss must name
// exactly them and the Pods evicted from them; and the watch loop, where
// the fault proxy stands in front of the controller-manager, a user
// re-creates a few Services and the load's delete wave removes the
// Service created first, and watch-loop must report one loop naming every
// victim.
//
// TestOTelCollector (otel_test.go) ships the apiserver's audit log file to
// auditlens with a real OpenTelemetry Collector (otelcol/, its own module)
// and compares what arrived by OTLP with what arrived by the webhook.
//
// The package holds only tests. build.sh builds the binaries into the user
// cache (${XDG_CACHE_HOME:-$HOME/.cache}/auditlens/e2e/<kubernetes version>/);
// the first test that needs them runs it, and a cached machine never
// rebuilds. Each scenario starts its own etcd and kube-apiserver on free
// 127.0.0.1 ports, runs for up to two minutes of compressed cluster time, stops the apiserver (which
// flushes its audit webhook) and checks that auditlens stored exactly the
// events of the apiserver's own audit log file, then checks the findings.
//
// Run with `make e2e`; `go test -short` skips it, and so does
// AUDITLENS_E2E=skip. AUDITLENS_E2E_UPDATE=1 (`make e2e-fixtures`) rewrites
// the committed audit logs in fixtures/, which fast unit tests elsewhere
// read as real apiserver output.
package e2e
