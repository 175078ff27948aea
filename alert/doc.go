// Package alert pushes findings to Alertmanager and webhooks as they
// happen. A Notifier looks at the findings every interval: a finding last
// seen within resolve_after is active; each route (selected by minimum
// severity, clusters and detectors) is sent the findings that are new to
// it, that escalated, and — Alertmanager only — those still active every
// repeat, so that Alertmanager keeps them firing; a finding that stops
// being seen is sent once more as resolved (endsAt now). Webhooks reuse the
// report deliveries' retries and backoff (report.PostBody). The gauge
// auditlens_findings_active counts the active findings for alert rules.
//
// The configuration is the alerts: section of serve's --config file (see
// Config); its errors name the line at fault.
package alert
