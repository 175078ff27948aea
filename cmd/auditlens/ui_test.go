package main

// The explorer UI in a real browser: Debian's Chromium, headless, driven
// over the DevTools protocol by chromedp, against a serve child over the
// end-to-end fixtures (events a real kube-apiserver sent). `make test`
// installs Chromium (scripts/chromium.sh) and sets AUDITLENS_REQUIRE_BROWSER
// so that a missing browser fails the run instead of skipping it.
//
// AUDITLENS_UI_SCREENSHOTS=DIR keeps the screenshots (the README's come
// from `make screenshots`).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// chromiumPath finds the browser, or skips (fails under `make test`).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("AUDITLENS_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium: run scripts/chromium.sh (apt-get install chromium) or set CHROMIUM")
	}
	t.Skip("no Chromium (scripts/chromium.sh installs it; make test requires it)")
	return ""
}

// browser is one headless Chromium tab. Every JavaScript dialog (an
// alert() an injected script would open), uncaught exception and
// console.error fails the test.
type browser struct {
	t        testing.TB
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t testing.TB, width, height int, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch e := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.problem("a JavaScript dialog opened: %q", e.Message)
		case *runtime.EventExceptionThrown:
			b.problem("uncaught exception: %s %s", e.ExceptionDetails.Text, exceptionText(e.ExceptionDetails))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.problem("console.error: %s", strings.Join(args, " "))
			}
		}
	}))
	b.ctx = ctx
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // kills the browser and waits for it
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	// A dialog blocks the page: dismiss it (the listener has failed the test).
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return b
}

func (b *browser) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// checkClean fails the test for every problem the page reported.
func (b *browser) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Error(p)
	}
	b.problems = nil
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\n%s", err, b.state())
	}
}

// state describes the page for a failure message.
func (b *browser) state() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " view=" + document.body.dataset.view + " state=" + document.body.dataset.state + " error=" + (document.querySelector("#error")?.textContent ?? "")`))
	return s
}

// eval evaluates a JavaScript expression into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr))
	if err != nil {
		b.t.Fatalf("evaluating %.80q: %v\n%s", expr, err, b.state())
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("evaluating %.80q: %v", expr, err)
	}
}

// waitReady waits until the view is rendered: body[data-view=view] in the
// ready state, and cond (a JavaScript expression) true.
func (b *browser) waitReady(view, cond string) {
	b.t.Helper()
	if cond == "" {
		cond = "true"
	}
	// document.body is null while a page loads.
	expr := fmt.Sprintf(`document.body?.dataset.view === %q && document.body?.dataset.state === "ready" && (%s)`, view, cond)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		b.eval(expr, &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("view %s never ready with %s\n%s", view, cond, b.state())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the viewport as NAME.png; full takes the whole page.
func (b *browser) screenshot(name string, full bool) {
	b.t.Helper()
	dir := os.Getenv("AUDITLENS_UI_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 1000 {
		b.t.Fatalf("screenshot %s: %d bytes", name, len(png))
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// fixtureSpan returns the first and last stageTimestamp of an audit log.
func fixtureSpan(t *testing.T, path string) (first, last time.Time) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if first.IsZero() || e.StageTimestamp.Before(first) {
			first = e.StageTimestamp
		}
		if e.StageTimestamp.After(last) {
			last = e.StageTimestamp
		}
	}
	return first, last
}

const xssAgent = `<img src=x onerror=alert(1)>`
const xssUser = `<script>alert(2)</script>`

func TestUIInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	chromiumPath(t) // skip before the setup when there is no browser
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	storeURL := "chdb://" + filepath.Join(data, "clickhouse")
	seed := filepath.Join("..", "..", "deploy", "e2e", "fixtures", "seed-incident.log")
	regr := filepath.Join("..", "..", "deploy", "e2e", "fixtures", "rv-regression.log")
	for _, imp := range [][]string{{"seed", seed}, {"regr", regr}} {
		if stdout, stderr, code := runCLI(t, "import", "--store", storeURL, "--cluster", imp[0], "--progress", "never", imp[1]); code != 0 {
			t.Fatalf("import %s: exit %d\n%s\n%s", imp[1], code, stdout, stderr)
		}
	}
	first, last := fixtureSpan(t, seed)
	s := startServe(t, "--data", data, "--detect=false") // import ran the detectors
	// A hostile client: markup in its user agent and user name.
	hostile := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"xss-1","stage":"ResponseComplete",`+
		`"requestURI":"/api/v1/namespaces/default/pods","verb":"create","user":{"username":%q},"sourceIPs":["10.9.9.9"],"userAgent":%q,`+
		`"objectRef":{"resource":"pods","namespace":"default","name":"x\"><svg onload=alert(3)>","apiVersion":"v1"},"responseStatus":{"code":201},`+
		`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, xssUser, xssAgent, last.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	if code, resp := s.post("/audit/xss", list("audit.k8s.io/v1", hostile)); code != 200 {
		t.Fatalf("posting the hostile event: %d %v", code, resp)
	}
	s.waitEvents("/api/v1/events?cluster=xss", 1)

	window := url.Values{
		"since": {first.Add(-time.Minute).UTC().Format(time.RFC3339)},
		"until": {last.Add(time.Minute).UTC().Format(time.RFC3339)},
	}
	b := newBrowser(t, 1280, 900)

	t.Run("timeline", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(s.base + "/?" + window.Encode()))
		b.waitReady("timeline", `document.querySelectorAll("#events tbody tr[data-audit-id]").length > 0`)
		var got struct {
			Findings []string
			Bars     int
			Rows     int
			Legend   string
		}
		b.eval(`({
			findings: [...document.querySelectorAll("#findings a.finding[data-id]")].map(a => a.textContent),
			bars: document.querySelectorAll("#histogram svg rect.bar[data-series]").length,
			rows: document.querySelectorAll("#events tbody tr[data-audit-id]").length,
		})`, &got)
		if got.Bars == 0 || got.Rows == 0 {
			t.Errorf("timeline: %d bars, %d rows", got.Bars, got.Rows)
		}
		if !strings.Contains(strings.Join(got.Findings, "\n"), "watch-loop") {
			t.Errorf("findings listed: %q; want the seed's watch-loop", got.Findings)
		}
		b.screenshot("timeline", false)
		b.checkClean()
	})

	t.Run("drag to zoom", func(t *testing.T) {
		b.t = t
		// The middle fifth of the chart, dragged with the mouse.
		var box struct{ Left, Right, Top, Bottom float64 }
		b.eval(`(() => { const r = document.querySelector("#histogram svg").getBoundingClientRect();
			return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })()`, &box)
		y := (box.Top + box.Bottom) / 2
		x0, x1 := box.Left+(box.Right-box.Left)*0.4, box.Left+(box.Right-box.Left)*0.6
		b.run(
			chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x0, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, (x0+x1)/2, y, chromedp.ButtonLeft),
			chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x1, y, chromedp.ButtonLeft),
			chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x1, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		)
		b.waitReady("timeline", `new URLSearchParams(location.search).get("since") !== `+fmt.Sprintf("%q", window.Get("since")))
		var q struct{ Since, Until string }
		b.eval(`(() => { const p = new URLSearchParams(location.search); return {since: p.get("since"), until: p.get("until")}; })()`, &q)
		since, err1 := time.Parse(time.RFC3339Nano, q.Since)
		until, err2 := time.Parse(time.RFC3339Nano, q.Until)
		w0, _ := time.Parse(time.RFC3339, window.Get("since"))
		w1, _ := time.Parse(time.RFC3339, window.Get("until"))
		if err1 != nil || err2 != nil || !since.After(w0) || !until.Before(w1) || until.Sub(since) > w1.Sub(w0)/3 {
			t.Errorf("after dragging across the middle fifth: since %q until %q (window %s – %s)", q.Since, q.Until, w0, w1)
		}
		// Back returns to the window before the zoom.
		b.run(chromedp.NavigateBack())
		b.waitReady("timeline", `new URLSearchParams(location.search).get("since") === `+fmt.Sprintf("%q", window.Get("since")))
		b.checkClean()
	})

	t.Run("filter", func(t *testing.T) {
		b.t = t
		b.run(
			chromedp.SetValue(chromedp.CSS(`#filters input[name="verb"]`), "delete"),
			chromedp.SetValue(chromedp.CSS(`#filters input[name="resource"]`), "endpoints"),
		)
		var submitted bool // as pressing Enter or the button does
		b.eval(`document.querySelector("#filters").requestSubmit(), true`, &submitted)
		b.waitReady("timeline", `new URLSearchParams(location.search).get("verb") === "delete"`)
		var verbs, resources []string
		b.eval(`[...document.querySelectorAll("#events tbody tr .c-verb")].map(td => td.textContent.trim())`, &verbs)
		b.eval(`[...document.querySelectorAll("#events tbody tr .c-resource")].map(td => td.textContent.trim())`, &resources)
		if len(verbs) == 0 {
			t.Fatal("no endpoints deletes listed; the seed incident has them")
		}
		for i := range verbs {
			if verbs[i] != "delete" || resources[i] != "endpoints" {
				t.Errorf("row %d: %s %s after filtering on delete endpoints", i, verbs[i], resources[i])
			}
		}
		// HA control planes: the apiserver is a filter and a stacking.
		var hasAPIServer bool
		b.eval(`!!document.querySelector('#filters input[name="apiserver"][list="dl-apiserver"]') && !!document.querySelector('#by option[value="apiserver"]')`, &hasAPIServer)
		if !hasAPIServer {
			t.Error("no apiserver filter field or stacking option")
		}
		// The filters are in the URL: reloading shows the same view.
		b.run(chromedp.Reload())
		b.waitReady("timeline", `document.querySelectorAll("#events tbody tr").length === `+fmt.Sprint(len(verbs)))
		b.checkClean()
	})

	t.Run("event detail", func(t *testing.T) {
		b.t = t
		var id string
		b.eval(`document.querySelector("#events tbody tr[data-audit-id]").dataset.auditId`, &id)
		b.run(chromedp.Click(chromedp.CSS(`#events tbody tr[data-audit-id]`)))
		b.waitReady("timeline", `document.querySelector("#detail")?.open === true`)
		var text, href string
		b.eval(`document.querySelector("#detail-json").textContent`, &text)
		b.eval(`document.querySelector("#detail-object")?.getAttribute("href") ?? ""`, &href)
		var ev struct {
			AuditID string `json:"auditID"`
			Verb    string `json:"verb"`
		}
		if err := json.Unmarshal([]byte(text), &ev); err != nil || ev.AuditID != id || ev.Verb != "delete" {
			t.Errorf("detail of %s shows %.200q (%v)", id, text, err)
		}
		if !strings.HasPrefix(href, "/objects?") || !strings.Contains(href, "resource=endpoints") {
			t.Errorf("detail object link %q", href)
		}
		b.screenshot("event", false)
		b.run(chromedp.KeyEvent(kb.Escape)) // Escape closes it
		b.waitReady("timeline", `!document.querySelector("#detail").open`)
		b.checkClean()
	})

	t.Run("finding evidence", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(s.base + "/?" + window.Encode()))
		b.waitReady("timeline", `document.querySelector("#findings a.finding[data-id^='watch-loop']") !== null`)
		b.run(chromedp.Click(chromedp.CSS(`#findings a.finding[data-id^='watch-loop']`)))
		b.waitReady("finding", `document.querySelectorAll("#evidence svg circle.static-watch").length > 0`)
		var got struct {
			Title       string
			Static      []float64 // cy of the static watches
			StaticX     []float64
			Advanced    []float64 // cy of the rising resourceVersions, by time
			AdvancedX   []float64
			Lanes       []string
			Deletes     int
			Creates     int
			Remediation string
			Objects     []string
		}
		b.eval(`(() => {
			const cs = sel => [...document.querySelectorAll(sel)];
			const num = (sel, a) => cs(sel).map(c => parseFloat(c.getAttribute(a)));
			return {
				title: document.querySelector("#finding-title").textContent,
				static: num("#evidence svg circle.static-watch", "cy"),
				staticX: num("#evidence svg circle.static-watch", "cx"),
				advanced: num("#evidence svg circle.rv-advanced, #evidence svg circle.rv-observed", "cy"),
				advancedX: num("#evidence svg circle.rv-advanced, #evidence svg circle.rv-observed", "cx"),
				lanes: cs("#evidence svg g.lane[data-object]").map(g => g.dataset.object),
				deletes: cs("#evidence svg g.lane .marker.delete").length,
				creates: cs("#evidence svg g.lane .marker.create").length,
				remediation: document.querySelector("#remediation").textContent,
				objects: cs("#objects a").map(a => a.getAttribute("href")),
			};
		})()`, &got)
		if !strings.Contains(got.Title, "services") {
			t.Errorf("title %q", got.Title)
		}
		// The culprit's watches restart from one resourceVersion: a flat
		// line; the cluster's resourceVersion, as other clients and the
		// writes show it, rises (SVG y grows downwards).
		if len(got.Static) < 2 {
			t.Fatalf("%d static watches drawn", len(got.Static))
		}
		for _, y := range got.Static {
			if y != got.Static[0] {
				t.Errorf("static watches at y %v: not flat", got.Static)
				break
			}
		}
		if len(got.Advanced) < 2 {
			t.Fatalf("%d advanced resourceVersions drawn", len(got.Advanced))
		}
		lo, hi := 0, 0 // the earliest and the latest point
		for i, x := range got.AdvancedX {
			if x < got.AdvancedX[lo] {
				lo = i
			}
			if x > got.AdvancedX[hi] {
				hi = i
			}
		}
		if !(got.Advanced[hi] < got.Advanced[lo]) || !(got.Advanced[hi] < got.Static[0]) {
			t.Errorf("advanced RVs y %v (x %v) do not rise above the static line at y %v", got.Advanced, got.AdvancedX, got.Static[0])
		}
		if len(got.Lanes) == 0 || got.Deletes == 0 || got.Creates == 0 {
			t.Errorf("lanes %v with %d deletes and %d creates", got.Lanes, got.Deletes, got.Creates)
		}
		if strings.TrimSpace(got.Remediation) == "" || len(got.Objects) == 0 {
			t.Errorf("remediation %q, object links %v", got.Remediation, got.Objects)
		}
		b.screenshot("finding", true)
		b.checkClean()
	})

	t.Run("object history", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Click(chromedp.CSS(`#objects a`)))
		b.waitReady("object", `document.querySelectorAll("#history tbody tr").length > 0`)
		var got struct {
			History, Watches int
			Link             string
			LinkText         string
			Culprits         int
			StaticMarks      []string // the resourceVersions of the culprit's restart marks
			StaticTitles     []string
			RVLabels         []string
			Summary          []string
			OtherMarks       int
		}
		b.eval(`(() => {
			const cs = sel => [...document.querySelectorAll(sel)];
			const a = document.querySelector("#object-findings a.finding-link[data-id]");
			return {
				history: cs("#history tbody tr").length, watches: cs("#watches tbody tr").length,
				link: a ? a.getAttribute("href") : "", linkText: a ? a.textContent : "",
				culprits: cs("#strip svg g.watcher.culprit").length,
				staticMarks: cs("#strip svg g.watcher.culprit .restart[data-rv]").map(g => g.dataset.rv),
				staticTitles: cs("#strip svg g.watcher.culprit .restart title").map(t => t.textContent),
				rvLabels: cs("#strip svg g.watcher.culprit text.restart-rv").map(t => t.textContent),
				summary: cs("#watcher-summary li").map(li => li.textContent),
				otherMarks: cs("#strip svg g.watcher:not(.culprit) .restart[data-rv]").length,
			};
		})()`, &got)
		// The endpoints were deleted and re-created while services were
		// watched, the culprit's watch among them.
		if got.History < 2 || got.Watches == 0 {
			t.Errorf("object history: %d events, %d watches", got.History, got.Watches)
		}
		// The finding that explains the churn, linked prominently.
		var f struct {
			ID, Title string
			Subjects  struct {
				User            string
				Resource        string
				ResourceVersion string `json:"resource_version"`
			}
		}
		var fs []json.RawMessage
		if code, lines := s.get("/api/v1/findings?detector=watch-loop&cluster=seed"); code != 200 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &fs) != nil || len(fs) != 1 {
			t.Fatalf("the seed's watch-loop findings: %d %.300q", code, lines)
		}
		if err := json.Unmarshal(fs[0], &f); err != nil || f.ID == "" || f.Subjects.ResourceVersion == "" {
			t.Fatalf("the seed's watch-loop finding: %+v", f)
		}
		if got.Link != "/findings/"+url.PathEscape(f.ID) || got.LinkText != f.Title {
			t.Errorf("finding link %q %q, want /findings/%s %q", got.Link, got.LinkText, f.ID, f.Title)
		}
		// The culprit's watcher: a mark at each restart, each from the
		// static resourceVersion, next to the object's deletes and creates.
		if got.Culprits != 1 || len(got.StaticMarks) < 2 {
			t.Fatalf("%d culprit lanes with restart marks %v", got.Culprits, got.StaticMarks)
		}
		for i, rv := range got.StaticMarks {
			if rv != f.Subjects.ResourceVersion || !strings.Contains(got.StaticTitles[i], "resourceVersion "+f.Subjects.ResourceVersion) {
				t.Errorf("culprit restart %d from %q (%q), want the static %s", i, rv, got.StaticTitles[i], f.Subjects.ResourceVersion)
			}
		}
		if len(got.RVLabels) == 0 || !slices.Contains(got.RVLabels, f.Subjects.ResourceVersion) {
			t.Errorf("resourceVersion labels %v, want %s", got.RVLabels, f.Subjects.ResourceVersion)
		}
		// The text alternative says it too, and the other watchers (kube-proxy's
		// endpoints watches) are marked as well.
		if !strings.Contains(strings.Join(got.Summary, "\n"), "from resourceVersion "+f.Subjects.ResourceVersion) || got.OtherMarks == 0 {
			t.Errorf("watcher summary %q, %d marks of other watchers", got.Summary, got.OtherMarks)
		}
		b.screenshot("object", false)
		// The link opens the finding.
		b.run(chromedp.Click(chromedp.CSS(`#object-findings a.finding-link`)))
		b.waitReady("finding", `document.querySelector("#finding-title")?.textContent.length > 0`)
		var path string
		b.eval(`location.pathname`, &path)
		if path != got.Link {
			t.Errorf("the finding link led to %s", path)
		}
		b.checkClean()
	})

	t.Run("markup in events is text", func(t *testing.T) {
		b.t = t
		w := url.Values{"cluster": {"xss"}, "since": window["since"], "until": window["until"]}
		b.run(chromedp.Navigate(s.base + "/?" + w.Encode()))
		b.waitReady("timeline", `document.querySelectorAll("#events tbody tr[data-audit-id]").length === 1`)
		var got struct {
			UA, User, Name string
			Injected       int
		}
		b.eval(`({
			ua: document.querySelector("#events tbody tr .c-ua").textContent,
			user: document.querySelector("#events tbody tr .c-user").textContent,
			name: document.querySelector("#events tbody tr .c-name").textContent,
			injected: document.querySelectorAll("body img, #events script, #events svg").length,
		})`, &got)
		if !strings.Contains(got.UA, xssAgent) || !strings.Contains(got.User, xssUser) || !strings.Contains(got.Name, `<svg onload=alert(3)>`) {
			t.Errorf("hostile strings not shown as text: %+v", got)
		}
		if got.Injected != 0 {
			t.Errorf("%d elements injected by event data", got.Injected)
		}
		b.run(chromedp.Click(chromedp.CSS(`#events tbody tr[data-audit-id]`)))
		b.waitReady("timeline", `document.querySelector("#detail")?.open === true`)
		b.eval(`document.querySelectorAll("#detail img, #detail svg, #detail script").length`, &got.Injected)
		if got.Injected != 0 {
			t.Errorf("%d elements injected into the detail", got.Injected)
		}
		time.Sleep(300 * time.Millisecond) // an onerror would have fired by now
		b.checkClean()
	})

	t.Run("jq console", func(t *testing.T) {
		b.t = t
		q := url.Values{"cluster": {"seed"}, "since": window["since"], "until": window["until"], "verb": {"delete"}}
		b.run(chromedp.Navigate(s.base + "/jq?" + q.Encode()))
		b.waitReady("jq", "")
		b.run(
			chromedp.SetValue(chromedp.CSS(`#jq-program`), `.objectRef.resource`),
			chromedp.Click(chromedp.CSS(`#jq-run`)),
		)
		b.waitReady("jq", `document.querySelector("#jq-output").textContent.includes("endpoints")`)
		b.screenshot("jq", false)
		b.run(
			chromedp.SetValue(chromedp.CSS(`#jq-program`), `.verb | error`),
			chromedp.Click(chromedp.CSS(`#jq-run`)),
		)
		b.waitReady("jq", `document.querySelector("#jq-error").textContent.includes("delete")`)
		b.checkClean()
	})

	t.Run("dark theme and reports", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(s.base + "/?" + window.Encode()))
		b.waitReady("timeline", "")
		var before, after string
		b.eval(`document.documentElement.dataset.theme`, &before)
		b.run(chromedp.Click(chromedp.CSS(`#theme`)))
		b.eval(`document.documentElement.dataset.theme`, &after)
		if before == after || (after != "dark" && after != "light") {
			t.Errorf("theme %q → %q", before, after)
		}
		if after != "dark" {
			b.run(chromedp.Click(chromedp.CSS(`#theme`)))
		}
		b.waitReady("timeline", `document.querySelectorAll("#events tbody tr").length > 0`)
		b.screenshot("timeline-dark", false)
		// The choice is remembered.
		b.run(chromedp.Navigate(s.base + "/reports"))
		b.waitReady("reports", `document.documentElement.dataset.theme === "dark"`)
		b.checkClean()
	})

	t.Run("keyboard", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Navigate(s.base + "/?" + window.Encode()))
		b.waitReady("timeline", `document.querySelectorAll("#events tbody tr").length > 1`)
		b.run(chromedp.KeyEvent("j"), chromedp.KeyEvent("j"))
		var focused string
		b.eval(`document.activeElement?.dataset?.auditId ?? ""`, &focused)
		var second string
		b.eval(`document.querySelectorAll("#events tbody tr[data-audit-id]")[1].dataset.auditId`, &second)
		if focused != second {
			t.Errorf("j j focused %q, want the second row %q", focused, second)
		}
		b.run(chromedp.KeyEvent(kb.Enter))
		b.waitReady("timeline", `document.querySelector("#detail")?.open === true`)
		b.run(chromedp.KeyEvent(kb.Escape))
		b.run(chromedp.KeyEvent("/"))
		var tag string
		b.eval(`document.activeElement.tagName + ":" + (document.activeElement.closest("#filters") ? "filters" : "")`, &tag)
		if tag != "INPUT:filters" {
			t.Errorf("/ focused %q, want a filter input", tag)
		}
		b.checkClean()
	})
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return ""
}
