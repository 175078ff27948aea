package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// actor is one of the cluster's clients: an identity talking to the real
// REST API with plain net/http, its bearer token and its user agent.
type actor struct {
	id     identity
	base   string
	client *http.Client
}

func (c *cluster) actor(id identity) *actor {
	return &actor{id: id, base: c.base, client: httpClient(c.tls, id.sourceIP)}
}

type clientKey struct {
	tls *tls.Config
	ip  string
}

var (
	clientMu sync.Mutex
	clients  = map[clientKey]*http.Client{}
)

// httpClient returns the client for connections from sourceIP, shared by
// the actors at that address; every watch is a request of its own on an
// HTTP/1.1 connection, as client-go's watches of that era were.
func httpClient(tlsCfg *tls.Config, sourceIP string) *http.Client {
	clientMu.Lock()
	defer clientMu.Unlock()
	k := clientKey{tlsCfg, sourceIP}
	if hc, ok := clients[k]; ok {
		return hc
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if sourceIP != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(sourceIP)}
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext:     dialer.DialContext,
		TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second,
	}}
	clients[k] = hc
	return hc
}

func (a *actor) request(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.id.token)
	req.Header.Set("User-Agent", a.id.userAgent)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	return a.client.Do(req)
}

// raw sends one request and returns the status and body.
func (a *actor) raw(method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct := "application/json"
	if method == http.MethodPatch {
		ct = "application/merge-patch+json"
	}
	resp, err := a.request(ctx, method, path, body, ct)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// object is the part of a Kubernetes object or list the driver reads.
type object struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Code int `json:"code"` // of a Status
}

// call sends a request expecting one of the given codes and returns the
// object answered.
func (a *actor) call(method, path string, body any, want ...int) (object, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return object{}, err
		}
	}
	code, resp, err := a.raw(method, path, b)
	if err != nil {
		return object{}, fmt.Errorf("%s %s as %s: %w", method, path, a.id.user, err)
	}
	for _, w := range want {
		if code == w {
			var o object
			err := json.Unmarshal(resp, &o)
			return o, err
		}
	}
	return object{}, fmt.Errorf("%s %s as %s: %d %s", method, path, a.id.user, code, bytes.TrimSpace(resp))
}

func collection(ns, resource string) string {
	if ns == "" {
		return "/api/v1/" + resource
	}
	return "/api/v1/namespaces/" + ns + "/" + resource
}

// create creates obj and returns its resourceVersion.
func (a *actor) create(ns, resource string, obj any) (string, error) {
	o, err := a.call(http.MethodPost, collection(ns, resource), obj, http.StatusCreated)
	return o.Metadata.ResourceVersion, err
}

func (a *actor) delete(ns, resource, name string) error {
	_, err := a.call(http.MethodDelete, collection(ns, resource)+"/"+name, nil, http.StatusOK, http.StatusAccepted)
	return err
}

// patch merge-patches an object and returns its new resourceVersion.
func (a *actor) patch(ns, resource, name string, patch any) (string, error) {
	o, err := a.call(http.MethodPatch, collection(ns, resource)+"/"+name, patch, http.StatusOK)
	return o.Metadata.ResourceVersion, err
}

func (a *actor) get(ns, resource, name string) (object, error) {
	return a.call(http.MethodGet, collection(ns, resource)+"/"+name, nil, http.StatusOK)
}

// list lists a collection as a reflector does and returns the list's
// resourceVersion.
func (a *actor) list(ctx context.Context, path string) (string, error) {
	resp, err := a.request(ctx, http.MethodGet, path+"?limit=500&resourceVersion=0", nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var o object
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != 200 {
		return "", fmt.Errorf("listing %s as %s: %d %v", path, a.id.user, resp.StatusCode, err)
	}
	return o.Metadata.ResourceVersion, nil
}

// errGone is a watch ended by a 410 "too old resource version" inside its
// stream (the HTTP status of a watch is 200 either way).
var errGone = errors.New("watch: too old resource version")

type watchEvent struct {
	Type   string `json:"type"`
	Object object `json:"object"`
}

// watch runs one watch of path from rv that the server ends after timeout
// seconds, calling started once the response headers arrive. It returns the
// resourceVersion of the last event received (rv when none came).
func (a *actor) watch(ctx context.Context, path, rv string, timeout int, bookmarks bool, started func()) (string, error) {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("resourceVersion", rv)
	q.Set("timeoutSeconds", strconv.Itoa(timeout))
	if bookmarks {
		q.Set("allowWatchBookmarks", "true")
	}
	resp, err := a.request(ctx, http.MethodGet, path+"?"+q.Encode(), nil, "")
	if err != nil {
		return rv, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return rv, fmt.Errorf("watch %s from %s as %s: %d %s", path, rv, a.id.user, resp.StatusCode, bytes.TrimSpace(b))
	}
	if started != nil {
		started()
	}
	dec := json.NewDecoder(resp.Body)
	last := rv
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return last, nil
			}
			return last, fmt.Errorf("reading watch %s as %s: %w", path, a.id.user, err)
		}
		if ev.Type == "ERROR" {
			if ev.Object.Code == http.StatusGone {
				return last, errGone
			}
			return last, fmt.Errorf("watch %s as %s: error event %d", path, a.id.user, ev.Object.Code)
		}
		if v := ev.Object.Metadata.ResourceVersion; v != "" {
			last = v
		}
	}
}

// reflector lists and watches a collection the way client-go's reflector
// does: each watch resumes from the resourceVersion of the last event
// received, and a 410 makes it list again.
type reflector struct {
	a         *actor
	path      string
	timeout   int  // timeoutSeconds of each watch
	bookmarks bool // allowWatchBookmarks

	mu  sync.Mutex
	rvs []string // the resourceVersion of every watch started
}

func (r *reflector) run(ctx context.Context) error {
	for ctx.Err() == nil {
		rv, err := r.a.list(ctx, r.path)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for ctx.Err() == nil {
			r.mu.Lock()
			r.rvs = append(r.rvs, rv)
			r.mu.Unlock()
			next, err := r.a.watch(ctx, r.path, rv, r.timeout, r.bookmarks, nil)
			if errors.Is(err, errGone) {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			rv = next
		}
	}
	return nil
}

func (r *reflector) watchRVs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.rvs...)
}

// Object bodies.

func service(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app": name}},
		"spec": map[string]any{
			"selector": map[string]string{"app": name},
			"ports":    []map[string]any{{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}},
		},
	}
}

func endpoints(name string, n int) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Endpoints",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app": name}},
		"subsets": []map[string]any{{
			"addresses": []map[string]any{{"ip": fmt.Sprintf("10.244.%d.%d", 1+n/200, 2+n%200)}},
			"ports":     []map[string]any{{"name": "http", "port": 8080, "protocol": "TCP"}},
		}},
	}
}

func configMap(name string, data map[string]string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name},
		"data":     data,
	}
}

func namespace(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
}
