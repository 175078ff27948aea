package reflector_test

import (
	"slices"
	"testing"
	"time"

	refl "github.com/auditlens/auditlens/internal/reflector"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/store"
)

// TestRelistSQL holds the definition of a relist to its rule on the real
// engine: a client's first read of a target is none, a read of a target
// it requested before is one; another object's name, another client, a
// Deployment's other pod are other reads; a list's continue pages and
// plain watches are no reads; a get of an object and a list of it by
// field selector read the same target; a kubelet is one client whatever
// its address; a request's stages are one request.
func TestRelistSQL(t *testing.T) {
	st := storetest.Open(t)
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	const cluster = "relist-sql"
	var rows []store.Row
	type req struct {
		id, verb, user, ip, res, ns, name, fields, cont, rvMatch string
		at                                                       time.Duration
		relist, read                                             bool
		refused                                                  bool // 403: no row of its own
	}
	kubelet1, kubelet2, op := "system:node:node-1", "system:node:node-2", "system:serviceaccount:shop:cart-operator"
	reqs := []req{
		// node-1's first read of ConfigMap a, then its watch of it.
		{id: "01-first-a", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "a", fields: "metadata.name=a", read: true},
		{id: "02-watch-a", verb: "watch", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "a", fields: "metadata.name=a", at: time.Second},
		// Another ConfigMap: a first read.
		{id: "03-first-b", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "b", fields: "metadata.name=b", at: 10 * time.Second, read: true},
		// A get of a: the object it listed by field selector.
		{id: "04-get-a", verb: "get", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "a", at: 20 * time.Second, read: true, relist: true},
		// A list of a again, its continue page no read.
		{id: "05-again-a", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "a", fields: "metadata.name=a", at: 30 * time.Second, read: true, relist: true},
		{id: "06-page-a", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "a", fields: "metadata.name=a", cont: "tok", at: 31 * time.Second},
		// Another kubelet's first read of a.
		{id: "07-node2-a", verb: "list", user: kubelet2, ip: "10.0.1.3", res: "configmaps", ns: "shop", name: "a", fields: "metadata.name=a", at: 40 * time.Second, read: true},
		// node-1 from another address (a load balancer's source NAT): the same kubelet.
		{id: "08-natted-b", verb: "list", user: kubelet1, ip: "10.9.9.9", res: "configmaps", ns: "shop", name: "b", fields: "metadata.name=b", at: 50 * time.Second, read: true, relist: true},
		// Two pods of a Deployment (one service account, two addresses):
		// two clients; the first pod's second list is a relist.
		{id: "09-pod1-list", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "shop", at: 0, read: true},
		{id: "10-pod2-list", verb: "list", user: op, ip: "10.244.2.17", res: "pods", ns: "shop", at: 5 * time.Second, read: true},
		{id: "11-pod1-page", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "shop", cont: "tok", at: 6 * time.Second},
		{id: "12-pod1-relist", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "shop", at: 60 * time.Second, read: true, relist: true},
		// The first pod's pods of another namespace: another target.
		{id: "13-pod1-other-ns", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "web", at: 61 * time.Second, read: true},
		// A plain watch, then a watch-list of the same collection: a relist.
		{id: "14-pod2-watch", verb: "watch", user: op, ip: "10.244.2.17", res: "services", at: 70 * time.Second},
		{id: "15-pod2-watch-list", verb: "watch", user: op, ip: "10.244.2.17", res: "services", rvMatch: "NotOlderThan", at: 80 * time.Second, read: true, relist: true},
		// Namespace web is deleted at 85 s (and created again): the first
		// pod's next list of its pods reads new objects, the one after
		// that is a relist again; a cluster-wide list is no namespace's.
		{id: "16-pod1-web-again", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "web", at: 90 * time.Second, read: true},
		{id: "17-pod1-web-relist", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "web", at: 95 * time.Second, read: true, relist: true},
		{id: "18-pod1-shop-relist", verb: "list", user: op, ip: "10.244.1.31", res: "pods", ns: "shop", at: 96 * time.Second, read: true, relist: true},
		// node-1 reads and watches ConfigMap c for a pod; the pod goes, a
		// new one using c comes, and node-1's first request for it is
		// refused (the Node authorizer's graph lags): the read after the
		// refusal is for the new pod, a first read; the one after that a
		// relist again. node-2, not refused, relists c.
		{id: "19-first-c", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 100 * time.Second, read: true},
		{id: "20-watch-c", verb: "watch", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 101 * time.Second},
		{id: "21-node2-first-c", verb: "list", user: kubelet2, ip: "10.0.1.3", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 102 * time.Second, read: true},
		{id: "22-refused-c", verb: "watch", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", rvMatch: "NotOlderThan", at: 130 * time.Second, read: true, refused: true},
		{id: "23-granted-c", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 130*time.Second + 50*time.Millisecond, read: true},
		{id: "24-node2-again-c", verb: "list", user: kubelet2, ip: "10.0.1.3", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 131 * time.Second, read: true, relist: true},
		{id: "25-again-c", verb: "list", user: kubelet1, ip: "10.0.1.2", res: "configmaps", ns: "shop", name: "c", fields: "metadata.name=c", at: 140 * time.Second, read: true, relist: true},
	}
	gone := t0.Add(85 * time.Second)
	rows = append(rows, store.Row{Cluster: cluster, AuditID: "ns-web-deleted", Stage: "ResponseComplete", Level: "Metadata", Verb: "delete",
		RequestURI: "/api/v1/namespaces/web", Time: gone, ReceivedAt: gone, User: "load-driver", Resource: "namespaces", APIVersion: "v1",
		Name: "web", Code: 200})
	for _, r := range reqs {
		ua := "kubelet/v1.37.2 (linux/amd64) kubernetes/abc1234"
		if r.user == op {
			ua = "cart-operator/0.9.2 (linux/amd64) kubernetes/0f3e1d2"
		}
		at := t0.Add(r.at)
		row := store.Row{Cluster: cluster, AuditID: r.id, Stage: "ResponseComplete", Level: "Metadata", Verb: r.verb,
			RequestURI: "/x", Time: at.Add(5 * time.Millisecond), ReceivedAt: at, User: r.user, UserAgent: ua, SourceIP: r.ip,
			Resource: r.res, APIVersion: "v1", Namespace: r.ns, Name: r.name, Code: 200, Watch: r.verb == "watch",
			FieldSelector: r.fields, Continue: r.cont, RVMatch: r.rvMatch}
		if r.refused {
			row.Code = 403
		}
		if r.id == "01-first-a" {
			// A log without requestReceivedTimestamp (1.8's v1beta1): its
			// two stages are one request, the later no relist.
			row.ReceivedAt = time.Time{}
			early := row
			early.Stage, early.Time = "RequestReceived", at
			rows = append(rows, early)
		}
		rows = append(rows, row)
	}
	if err := st.Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	sql := `SELECT audit_id, toBool(` + refl.RelistSQL + `) AS relist, toBool(r_read) AS read FROM (` + refl.EpochSQL(`
    SELECT cluster, audit_id, any(namespace) AS r_namespace, any(g_client) AS r_client, any(g_target) AS r_target,
           min(g_start) AS r_start, max(g_read) AS r_read
    FROM (
        SELECT cluster, audit_id, namespace, code, `+refl.ClientSQL+` AS g_client, `+refl.TargetSQL+` AS g_target,
               `+refl.StartSQL+` AS g_start, `+refl.ReadSQL+` AS g_read
        FROM audit_events WHERE cluster = {cluster:String} AND `+refl.SeenSQL+`
    )
    GROUP BY cluster, audit_id
    HAVING max(code) < 300`, "cluster = {cluster:String}") + `
)
ORDER BY audit_id`
	got := map[string][2]bool{}
	err := store.Each(t.Context(), st, sql, store.Params{"cluster": cluster}, func(r struct {
		ID     string `ch:"audit_id"`
		Relist bool   `ch:"relist"`
		Read   bool   `ch:"read"`
	}) error {
		got[r.ID] = [2]bool{r.Read, r.Relist}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	judged := slices.DeleteFunc(slices.Clone(reqs), func(r req) bool { return r.refused })
	if len(got) != len(judged) {
		t.Errorf("%d requests, want %d: %v", len(got), len(judged), got)
	}
	for _, r := range judged {
		if g := got[r.id]; g != [2]bool{r.read, r.relist} {
			t.Errorf("%s: read %v relist %v, want read %v relist %v", r.id, g[0], g[1], r.read, r.relist)
		}
	}

	// ListSQL: lists' first pages and watch-lists, no gets, pages or
	// plain watches.
	var lists []string
	err = store.Each(t.Context(), st, `SELECT DISTINCT audit_id FROM audit_events WHERE cluster = {cluster:String} AND `+refl.ListSQL+` ORDER BY audit_id`,
		store.Params{"cluster": cluster}, func(id string) error {
			lists = append(lists, id)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range reqs {
		if r.read && r.verb != "get" {
			want = append(want, r.id)
		}
	}
	if !slices.Equal(lists, want) {
		t.Errorf("lists %v, want %v", lists, want)
	}
}
