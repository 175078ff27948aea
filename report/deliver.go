package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Delivery is the outcome of delivering a report to one target.
type Delivery struct {
	// Target is the file written or the webhook URL (without its query,
	// which often holds a secret).
	Target   string    `json:"target"`
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
	OK       bool      `json:"ok"`
	// Status is the webhook's last HTTP status (0 for files and for
	// requests that got no answer).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// WriteFiles writes one file per format into dir (created if missing),
// named by FileName, and returns a delivery per file.
func WriteFiles(dir string, formats []string, r Report, now time.Time) []Delivery {
	var out []Delivery
	for _, f := range formats {
		path := filepath.Join(dir, FileName(r, f))
		d := Delivery{Target: path, At: now, Attempts: 1}
		var buf bytes.Buffer
		err := Render(&buf, f, r)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = writeFileAtomic(path, buf.Bytes())
		}
		if err != nil {
			d.Error = err.Error()
		} else {
			d.OK = true
		}
		out = append(out, d)
	}
	return out
}

// writeFileAtomic writes through a temporary file and a rename, so a
// reader never sees half a report.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing report file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing report file: %w", err)
	}
	return nil
}

// Webhook is an HTTP target of scheduled reports.
type Webhook struct {
	URL string `json:"url"`
	// Slack sends a Slack-compatible incoming-webhook body ({"text": …}, a
	// Markdown-ish summary) instead of the report's JSON.
	Slack bool `json:"slack,omitempty"`
	// Retries is how many times a failed post is retried (default 3).
	Retries int `json:"retries,omitempty"`
	// Backoff is the wait before the first retry, doubled before each
	// next one (default 2s).
	Backoff Duration `json:"backoff,omitempty"`
	// Timeout bounds each attempt (default 10s).
	Timeout Duration `json:"timeout,omitempty"`
}

func (w Webhook) withDefaults() Webhook {
	if w.Retries == 0 {
		w.Retries = 3
	}
	if w.Backoff == 0 {
		w.Backoff = Duration(2 * time.Second)
	}
	if w.Timeout == 0 {
		w.Timeout = Duration(10 * time.Second)
	}
	return w
}

// Validate checks the webhook's settings.
func (w Webhook) Validate() error {
	if !strings.HasPrefix(w.URL, "http://") && !strings.HasPrefix(w.URL, "https://") {
		return fmt.Errorf("webhook url %q: want http:// or https://", redact(w.URL))
	}
	if w.Retries < 0 || w.Retries > 20 || w.Backoff < 0 || w.Timeout < 0 {
		return fmt.Errorf("webhook %s: retries want 0 to 20, backoff and timeout not negative", redact(w.URL))
	}
	return nil
}

// Clock is the time source of deliveries and of the scheduler.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Post delivers r to a webhook: a POST answered with 2xx succeeds; other
// answers and transport errors are retried with backoff on clock. A 4xx
// other than 408 and 429 is not retried: the request itself is wrong.
func Post(ctx context.Context, client *http.Client, clock Clock, w Webhook, r Report) Delivery {
	body, ctype, err := webhookBody(w, r)
	if err != nil {
		return Delivery{Target: redact(w.URL), At: clock.Now(), Error: err.Error()}
	}
	return PostBody(ctx, client, clock, w, body, ctype)
}

// PostBody delivers body (of content type ctype) to w's URL, retrying as
// Post does; w.Slack is not looked at. Other senders (alerts) share the
// retries, backoff and recorded outcome of report deliveries through it.
func PostBody(ctx context.Context, client *http.Client, clock Clock, w Webhook, body []byte, ctype string) Delivery {
	w = w.withDefaults()
	d := Delivery{Target: redact(w.URL)}
	var err error
	wait := time.Duration(w.Backoff)
	for {
		d.Attempts++
		d.Status, err = postOnce(ctx, client, w, body, ctype)
		d.At = clock.Now()
		if err == nil {
			d.OK, d.Error = true, ""
			return d
		}
		d.Error = err.Error()
		permanent := d.Status >= 400 && d.Status < 500 && d.Status != http.StatusRequestTimeout && d.Status != http.StatusTooManyRequests
		if permanent || d.Attempts > w.Retries || ctx.Err() != nil {
			return d
		}
		select {
		case <-ctx.Done():
			d.Error = fmt.Sprintf("%s; gave up retrying: %v", d.Error, ctx.Err())
			return d
		case <-clock.After(wait):
		}
		wait *= 2
	}
}

func postOnce(ctx context.Context, client *http.Client, w Webhook, body []byte, ctype string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("posting to %s: %w", redact(w.URL), err)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := client.Do(req)
	if err != nil {
		var uerr interface{ Unwrap() error }
		if errors.As(err, &uerr) {
			err = uerr.Unwrap() // drop the URL (and any secret in it) from the message
		}
		return 0, fmt.Errorf("posting to %s: %w", redact(w.URL), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("posting to %s: %s: %s", redact(w.URL), resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp.StatusCode, nil
}

// redact drops the query and user info of a URL: they often hold secrets.
func redact(u string) string {
	u, _, _ = strings.Cut(u, "?")
	if scheme, rest, ok := strings.Cut(u, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 && at < strings.IndexByte(rest+"/", '/') {
			rest = rest[at+1:]
		}
		return scheme + "://" + rest
	}
	return u
}

func webhookBody(w Webhook, r Report) ([]byte, string, error) {
	if !w.Slack {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, "", fmt.Errorf("encoding report %s: %w", r.ID, err)
		}
		return b, "application/json", nil
	}
	b, err := json.Marshal(map[string]string{"text": SlackText(r)})
	return b, "application/json", err
}

// SlackText is the short summary of a report sent to Slack-compatible
// webhooks: the window, counts of findings by severity and of changes,
// and the titles of new findings.
func SlackText(r Report) string {
	var b strings.Builder
	count := map[string]int{}
	total := 0
	for _, g := range r.Findings {
		count[string(g.Severity)] += len(g.Findings)
		total += len(g.Findings)
	}
	fmt.Fprintf(&b, "*auditlens report %s* — %s to %s\n", slackEscape(r.Name), stamp(r.WindowStart), stamp(r.WindowEnd))
	fmt.Fprintf(&b, "%d findings (%d critical, %d warning, %d info); %d new, %d ongoing, %d resolved\n",
		total, count["critical"], count["warning"], count["info"], len(r.Changes.New), len(r.Changes.Ongoing), len(r.Changes.Resolved))
	for i, c := range r.Changes.New {
		if i == 10 {
			fmt.Fprintf(&b, "… and %d more\n", len(r.Changes.New)-i)
			break
		}
		fmt.Fprintf(&b, "• new %s: %s\n", c.Severity, slackEscape(c.Title))
	}
	return b.String()
}

// slackEscape escapes the three characters Slack's mrkdwn reads as markup.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
