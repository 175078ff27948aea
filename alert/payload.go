package alert

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// amAlert is one alert of Alertmanager's v2 API (POST /api/v2/alerts
// takes a JSON array of them).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// alertmanagerAlerts renders evs for Alertmanager. An active finding's
// endsAt is three repeats ahead, so that Alertmanager resolves it by itself
// if auditlens stops re-sending; a resolved one's is now.
func (n *Notifier) alertmanagerAlerts(evs []routed, now time.Time) []amAlert {
	out := make([]amAlert, 0, len(evs))
	for _, e := range evs {
		f := e.f
		a := amAlert{
			Labels: map[string]string{
				"alertname":  f.Detector,
				"cluster":    f.Cluster,
				"severity":   string(f.Severity),
				"finding_id": f.ID,
			},
			Annotations: map[string]string{
				"summary":     f.Title,
				"description": f.Summary,
				"remediation": f.Remediation,
			},
			StartsAt:     f.FirstSeen.UTC(),
			EndsAt:       now.Add(3 * n.cfg.Repeat).UTC(),
			GeneratorURL: n.Link(f.ID),
		}
		if link := n.Link(f.ID); link != "" {
			a.Annotations["finding_url"] = link
		}
		if e.ev == Resolved {
			a.EndsAt = now.UTC()
		}
		if a.StartsAt.IsZero() || a.StartsAt.After(a.EndsAt) {
			a.StartsAt = a.EndsAt
		}
		out = append(out, a)
		if e.ev == Escalated && e.prev != "" {
			// The severity is a label, so the escalated finding is a new
			// alert to Alertmanager: end the one of the old severity.
			old := a
			old.Labels = maps.Clone(a.Labels)
			old.Labels["severity"] = string(e.prev)
			old.EndsAt = now.UTC()
			if old.StartsAt.After(old.EndsAt) {
				old.StartsAt = old.EndsAt
			}
			out = append(out, old)
		}
	}
	return out
}

// WebhookMessage is the JSON body of a generic alerts webhook: one per
// new, escalated or resolved finding.
type WebhookMessage struct {
	// Event is new, escalated or resolved; Status firing or resolved.
	Event  Event     `json:"event"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
	// URL is the finding's page in the UI (alerts.ui_url), when set.
	URL     string         `json:"url,omitempty"`
	Finding FindingSummary `json:"finding"`
}

// FindingSummary is the part of a finding an alert carries (the evidence
// is behind URL and the findings API).
type FindingSummary struct {
	ID          string          `json:"id"`
	Detector    string          `json:"detector"`
	Cluster     string          `json:"cluster"`
	Severity    detect.Severity `json:"severity"`
	Title       string          `json:"title"`
	Summary     string          `json:"summary"`
	Remediation string          `json:"remediation"`
	FirstSeen   time.Time       `json:"first_seen"`
	LastSeen    time.Time       `json:"last_seen"`
}

func (n *Notifier) webhookBody(r Route, e routed, now time.Time) ([]byte, error) {
	f := e.f
	status := "firing"
	if e.ev == Resolved {
		status = "resolved"
	}
	if r.Format == "slack" {
		return json.Marshal(map[string]string{"text": slackText(e, n.Link(f.ID))})
	}
	return json.Marshal(WebhookMessage{Event: e.ev, Status: status, At: now.UTC(), URL: n.Link(f.ID), Finding: FindingSummary{
		ID: f.ID, Detector: f.Detector, Cluster: f.Cluster, Severity: f.Severity, Title: f.Title,
		Summary: f.Summary, Remediation: f.Remediation, FirstSeen: f.FirstSeen.UTC(), LastSeen: f.LastSeen.UTC(),
	}})
}

// slackText is the one-message text of a Slack-compatible webhook.
func slackText(e routed, link string) string {
	f := e.f
	var b strings.Builder
	verb := map[Event]string{New: "new", Escalated: "escalated to " + string(f.Severity), Resolved: "resolved"}[e.ev]
	title := slackEscape(f.Title)
	if link != "" {
		title = "<" + link + "|" + title + ">"
	}
	fmt.Fprintf(&b, "*%s* %s %s in %s: %s\n", strings.ToUpper(string(f.Severity)), f.Detector, verb, slackEscape(f.Cluster), title)
	if e.ev != Resolved && f.Remediation != "" {
		fmt.Fprintf(&b, "Remediation: %s\n", slackEscape(f.Remediation))
	}
	return b.String()
}

var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
