package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// What the kubelets, the scheduler and the observer share: informers over
// the REST API in the manner of client-go's reflector, and the part of a
// Pod or a Node they read.

// informOptions tune inform.
type informOptions struct {
	// timeout is the timeout each watch asks for.
	timeout func() time.Duration
	// retry decides about a transport error: nil retries after a second.
	retry func(error) error
	// gate, when set, is called before every request; false ends inform.
	gate func(context.Context) bool
}

// inform lists path with fieldSelector sel as a, hands every item to handle
// and then watches from the list's resourceVersion until ctx ends,
// re-watching when a watch ends and relisting after 410 Gone, as
// client-go's reflector does.
func inform(ctx context.Context, a *actor, path, sel string, o informOptions, handle func(typ string, p kubeObject) error) error {
	gate := func() bool { return ctx.Err() == nil && (o.gate == nil || o.gate(ctx)) }
	retry := o.retry
	for gate() {
		q := url.Values{"limit": {"500"}, "resourceVersion": {"0"}}
		if sel != "" {
			q.Set("fieldSelector", sel)
		}
		code, body, err := sendJSON(ctx, a, 30*time.Second, http.MethodGet, path+"?"+q.Encode(), "", nil)
		if err != nil {
			if err := retry(err); err != nil {
				return err
			}
			sleepCtx(ctx, time.Second)
			continue
		}
		if code != http.StatusOK {
			return fmt.Errorf("listing %s?fieldSelector=%s as %s: %d %s", path, sel, a.id.user, code, bytes.TrimSpace(body))
		}
		var list struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []kubeObject `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return fmt.Errorf("listing %s: %w", path, err)
		}
		for _, p := range list.Items {
			if err := handle("ADDED", p); err != nil {
				return err
			}
		}
		rv := list.Metadata.ResourceVersion
		for gate() {
			next, err := watchOnce(ctx, a, path, sel, rv, o.timeout(), handle)
			if errors.Is(err, errGone) {
				break
			}
			if err != nil {
				if err := retry(err); err != nil {
					return err
				}
				sleepCtx(ctx, time.Second)
			}
			rv = next
		}
	}
	return nil
}

func watchOnce(ctx context.Context, a *actor, path, sel, rv string, timeout time.Duration, handle func(string, kubeObject) error) (string, error) {
	q := url.Values{"resourceVersion": {rv}, "watch": {"true"},
		"allowWatchBookmarks": {"true"}, "timeoutSeconds": {strconv.Itoa(int(timeout.Seconds()))}}
	if sel != "" {
		q.Set("fieldSelector", sel)
	}
	resp, err := a.request(ctx, http.MethodGet, path+"?"+q.Encode(), nil, "")
	if err != nil {
		return rv, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return rv, fmt.Errorf("watching %s?fieldSelector=%s as %s: %d %s", path, sel, a.id.user, resp.StatusCode, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string     `json:"type"`
			Object kubeObject `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, err
		}
		switch ev.Type {
		case "ERROR":
			if ev.Object.Code == http.StatusGone {
				return rv, errGone
			}
			return rv, fmt.Errorf("watch %s: error event %d", path, ev.Object.Code)
		case "BOOKMARK":
		default:
			if err := handle(ev.Type, ev.Object); err != nil {
				return rv, err
			}
		}
		if v := ev.Object.Metadata.ResourceVersion; v != "" {
			rv = v
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// transient: the request timed out, which a frozen apiserver makes every
// request do.
func transient(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// fail records an error of a goroutine of the scenario: stop reports it.
func (d *driver) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

// sendJSON sends one request as a with the given timeout and returns the
// status and body; body is encoded as JSON unless it is nil.
func sendJSON(ctx context.Context, a *actor, timeout time.Duration, method, path, contentType string, body any) (int, []byte, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	if contentType == "" {
		contentType = "application/json"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := a.request(ctx, method, path, b, contentType)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, rb, err
}

// kubeObject is the part of a Pod or a Node the kubelets, the scheduler
// and the observer read.
type kubeObject struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
		Labels            map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
		Taints   []struct {
			Key    string `json:"key"`
			Effect string `json:"effect"`
		} `json:"taints"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
	Code int `json:"code"` // of a Status in an ERROR event
}

// ready is a Node's Ready condition status ("" when it has none).
func (p kubeObject) ready() string {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status
		}
	}
	return ""
}

func (p kubeObject) hasTaint(key, effect string) bool {
	return slices.ContainsFunc(p.Spec.Taints, func(t struct {
		Key    string `json:"key"`
		Effect string `json:"effect"`
	}) bool {
		return t.Key == key && t.Effect == effect
	})
}
