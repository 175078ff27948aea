// Package report builds anomaly reports from the store: the findings of a
// window grouped by detector and severity, what changed since the previous
// report of the same name, event volume by verb, top talkers and the health
// of the audit feed. A Report renders as self-contained HTML (inline SVG,
// nothing loaded from elsewhere), Markdown or JSON, and is kept in the
// reports table (migration 0002) so the next report can compare with it.
package report
