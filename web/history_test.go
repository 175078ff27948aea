package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/internal/testkit/storetest"
	"github.com/auditlens/auditlens/query"
	"github.com/auditlens/auditlens/store"
)

// What the object page asks for, over the real engine: the watch-loop
// finding that names the object, and the object's history with the
// watchers of the resource that finding says was watched from a static
// resourceVersion, each restart with its resourceVersion.
func TestObjectPageAPI(t *testing.T) {
	st := storetest.Open(t)
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	var rows []store.Row
	for i := range 4 {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		id := string(rune('a' + i))
		for _, stage := range []string{"RequestReceived", "ResponseComplete"} {
			r := store.Row{Cluster: "web", AuditID: "w-" + id, Stage: stage, Verb: "watch", Time: at, User: "system:kube-controller-manager",
				UserAgent: "kube-controller-manager/v1.9.2", Resource: "services", Watch: true, RequestedRV: "281", Raw: []byte(`{}`)}
			if stage == "ResponseComplete" {
				r.Time, r.Code = at.Add(10*time.Second-time.Millisecond), 200
			}
			rows = append(rows, r)
		}
		for j, verb := range []string{"delete", "create"} {
			rows = append(rows, store.Row{Cluster: "web", AuditID: verb + "-" + id, Stage: "ResponseComplete", Verb: verb,
				Time: at.Add(time.Duration(20+j*5) * time.Millisecond), User: "system:serviceaccount:kube-system:endpoint-controller",
				Resource: "endpoints", Namespace: "default", Name: "cart", Code: 200, Raw: []byte(`{}`)})
		}
	}
	if err := st.Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	repo := detect.NewRepository(st, nil)
	loop := detect.Finding{ID: "watch-loop-web", Detector: "watch-loop", Cluster: "web", Severity: detect.Critical, Title: "loop <b>title</b>",
		FirstSeen: t0, LastSeen: t0.Add(30 * time.Second), Subjects: detect.Subjects{User: "system:kube-controller-manager", Resource: "services", ResourceVersion: "281"},
		Objects: []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "cart"}}}
	other := loop
	other.ID, other.Objects = "watch-loop-other", []detect.Object{{Resource: "endpoints", Namespace: "default", Name: "shop"}}
	if err := repo.Upsert(t.Context(), []detect.Finding{loop, other}); err != nil {
		t.Fatal(err)
	}
	h := NewRouter(Config{Store: st, Findings: repo, Now: func() time.Time { return t0.Add(time.Hour) }})
	get := func(path string, v any) int {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code == 200 {
			if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return rec.Code
	}

	q := url.Values{"detector": {"watch-loop"}, "cluster": {"web"}, "object": {"endpoints/default/cart"}}
	for since, want := range map[string]int{"2026-03-04T09:00:00Z": 1, "2026-03-04T10:00:31Z": 0} {
		q.Set("since", since)
		var fs []detect.Finding
		if code := get("/api/v1/findings?"+q.Encode(), &fs); code != 200 || len(fs) != want || (want == 1 && fs[0].ID != "watch-loop-web") {
			t.Errorf("findings since %s naming endpoints default/cart: %d %+v, want %d", since, code, fs, want)
		}
	}

	var hist query.History
	code := get("/api/v1/objects/history?cluster=web&resource=endpoints&namespace=default&name=cart&watch_resource=services", &hist)
	if code != 200 || len(hist.Events) != 8 || len(hist.Watchers) != 1 || len(hist.Watches) != 4 {
		t.Fatalf("history: %d, %d events, %d watches, %d watchers", code, len(hist.Events), len(hist.Watches), len(hist.Watchers))
	}
	w := hist.Watchers[0]
	var rvs []string
	for _, r := range w.Restarts {
		rvs = append(rvs, r.ResourceVersion)
	}
	if w.Program != "kube-controller-manager" || w.Resource != "services" || w.Watches != 4 || w.ResourceVersions != 1 || strings.Join(rvs, ",") != "281,281,281,281" {
		t.Errorf("watcher %+v", w)
	}
	// Without watch_resource: only the object's own resource, none here.
	if code := get("/api/v1/objects/history?cluster=web&resource=endpoints&namespace=default&name=cart", &hist); code != 200 || len(hist.Watchers) != 0 {
		t.Errorf("history without services: %d, %d watchers", code, len(hist.Watchers))
	}
	if code := get("/api/v1/objects/history?cluster=web&resource=endpoints&namespace=default&name=cart&watch_resource=a,b,c,d,e,f,g,h", &hist); code != http.StatusBadRequest {
		t.Errorf("nine watched resources: %d, want 400", code)
	}
}
