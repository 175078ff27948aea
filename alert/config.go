package alert

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/report"
)

// Defaults of Config.
const (
	DefaultResolveAfter = 10 * time.Minute
	DefaultRepeat       = time.Minute
	DefaultInterval     = 15 * time.Second
)

// Config is the alerts section of serve's configuration file (the same
// YAML file as reports):
//
//	alerts:
//	  ui_url: https://auditlens.example.com   # links in alerts: <ui_url>/findings/<id>
//	  resolve_after: 10m   # a finding not seen for this long is resolved
//	  repeat: 1m           # active alerts are re-sent to Alertmanager this often
//	  interval: 15s        # how often findings are looked at
//	  routes:
//	  - name: oncall
//	    min_severity: warning          # default info
//	    clusters: [prod]               # default all
//	    detectors: [watch-loop]        # default all
//	    alertmanager: {url: http://alertmanager:9093}
//	  - name: chat
//	    webhook: {url: https://hooks.example.com/T000/B000, format: slack}
type Config struct {
	UIURL        string
	ResolveAfter time.Duration
	Repeat       time.Duration
	Interval     time.Duration
	Routes       []Route
}

// Route sends the findings it selects to one target: Alertmanager or a
// webhook (generic JSON or Slack-style text).
type Route struct {
	Name        string
	MinSeverity detect.Severity
	Clusters    []string
	Detectors   []string
	// Alertmanager is the base URL of an Alertmanager (its v2 API is
	// under /api/v2/alerts).
	Alertmanager string
	// Webhook, when URL is set, receives new, escalated and resolved
	// findings, with report webhooks' retries and backoff.
	Webhook report.Webhook
	// Format of the webhook body: "json" (default) or "slack".
	Format string
}

// Kind is the target's kind, a metric label: alertmanager or webhook.
func (r Route) Kind() string {
	if r.Alertmanager != "" {
		return "alertmanager"
	}
	return "webhook"
}

// selects reports whether the route wants f.
func (r Route) selects(f detect.Finding) bool {
	if r.MinSeverity != "" && !f.Severity.AtLeast(r.MinSeverity) {
		return false
	}
	return inOrAll(r.Clusters, f.Cluster) && inOrAll(r.Detectors, f.Detector)
}

func inOrAll(list []string, s string) bool { return len(list) == 0 || slices.Contains(list, s) }

func (c *Config) setDefaults() {
	if c.ResolveAfter <= 0 {
		c.ResolveAfter = DefaultResolveAfter
	}
	if c.Repeat <= 0 {
		c.Repeat = DefaultRepeat
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
}

// Decode reads the alerts section, the value of the configuration file's
// alerts key (package config reads the file). Unknown keys and bad values
// are errors that say on which line they are.
func Decode(n *yaml.Node) (Config, error) {
	var c Config
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return c, nil
	}
	err := c.decode(n)
	return c, err
}

// Parse reads the alerts section of a whole configuration document (its
// tests and fuzzing; the service reads the file with package config). Unknown
// keys and bad values are errors that say on which line they are.
func Parse(b []byte) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Config{}, err
	}
	var c Config
	if len(doc.Content) == 0 {
		return c, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return c, nil // config.Parse says what is wrong with it
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "alerts" {
			if err := c.decode(root.Content[i+1]); err != nil {
				return Config{}, err
			}
		}
	}
	return c, nil
}

// lineError is an error at a line of the file.
func lineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// fields calls set for each key of a mapping; set returns errUnknown for
// a key it does not know.
func fields(n *yaml.Node, what string, set func(key string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return lineError(n, "%s: want a mapping", what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := set(k.Value, v); err != nil {
			if errors.Is(err, errUnknown) {
				return lineError(k, "%s: unknown key %q", what, k.Value)
			}
			return err
		}
	}
	return nil
}

var errUnknown = errors.New("unknown key")

func scalar(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", lineError(n, "%s: want a single value", key)
	}
	return n.Value, nil
}

func duration(n *yaml.Node, key string) (time.Duration, error) {
	s, err := scalar(n, key)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, lineError(n, "%s %q: want a positive duration such as 30s or 10m", key, s)
	}
	return d, nil
}

func list(n *yaml.Node, key string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, lineError(n, "%s: want a list", key)
	}
	var out []string
	for _, item := range n.Content {
		s, err := scalar(item, key)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func httpURL(n *yaml.Node, key string) (string, error) {
	s, err := scalar(n, key)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", lineError(n, "%s: want an http:// or https:// URL", key)
	}
	return s, nil
}

// knownDetectors checks names against the detectors serve runs.
func knownDetectors(n *yaml.Node, names []string) error {
	var known []string
	for _, d := range detectors.Default() {
		known = append(known, d.Name())
	}
	for _, name := range names {
		if !slices.Contains(known, name) {
			return lineError(n, "detectors: unknown detector %q: want %s", name, strings.Join(known, ", "))
		}
	}
	return nil
}

func (c *Config) decode(n *yaml.Node) error {
	err := fields(n, "alerts", func(k string, v *yaml.Node) (err error) {
		switch k {
		case "ui_url":
			c.UIURL, err = httpURL(v, k)
			c.UIURL = strings.TrimRight(c.UIURL, "/")
		case "resolve_after":
			c.ResolveAfter, err = duration(v, k)
		case "repeat":
			c.Repeat, err = duration(v, k)
		case "interval":
			c.Interval, err = duration(v, k)
		case "routes":
			if v.Kind != yaml.SequenceNode {
				return lineError(v, "routes: want a list")
			}
			seen := map[string]bool{}
			for _, item := range v.Content {
				r, err := decodeRoute(item)
				if err != nil {
					return err
				}
				if seen[r.Name] {
					return lineError(item, "route %q is defined twice", r.Name)
				}
				seen[r.Name] = true
				c.Routes = append(c.Routes, r)
			}
		default:
			return errUnknown
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return lineError(n, "%v", err)
	}
	return nil
}

// Validate reports settings that cannot work, after defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.ResolveAfter < c.Interval {
		return fmt.Errorf("resolve_after %s is shorter than interval %s: findings would resolve between two looks", c.ResolveAfter, c.Interval)
	}
	return nil
}

func decodeRoute(n *yaml.Node) (Route, error) {
	var r Route
	err := fields(n, "route", func(k string, v *yaml.Node) (err error) {
		switch k {
		case "name":
			r.Name, err = scalar(v, k)
		case "min_severity":
			var s string
			if s, err = scalar(v, k); err == nil {
				if r.MinSeverity, err = detect.ParseSeverity(s); err != nil {
					err = lineError(v, "min_severity: %v", err)
				}
			}
		case "clusters":
			r.Clusters, err = list(v, k)
		case "detectors":
			if r.Detectors, err = list(v, k); err == nil {
				err = knownDetectors(v, r.Detectors)
			}
		case "alertmanager":
			err = fields(v, "alertmanager", func(k string, v *yaml.Node) (err error) {
				if k != "url" {
					return errUnknown
				}
				r.Alertmanager, err = httpURL(v, k)
				r.Alertmanager = strings.TrimRight(r.Alertmanager, "/")
				return err
			})
		case "webhook":
			err = fields(v, "webhook", func(k string, v *yaml.Node) (err error) {
				switch k {
				case "url":
					r.Webhook.URL, err = httpURL(v, k)
				case "format":
					if r.Format, err = scalar(v, k); err == nil && r.Format != "json" && r.Format != "slack" {
						err = lineError(v, "format %q: want json or slack", r.Format)
					}
				case "retries":
					var s string
					if s, err = scalar(v, k); err == nil {
						if r.Webhook.Retries, err = strconv.Atoi(s); err != nil || r.Webhook.Retries < 0 || r.Webhook.Retries > 20 {
							err = lineError(v, "retries %q: want 0 to 20", s)
						}
					}
				case "backoff", "timeout":
					var d time.Duration
					if d, err = duration(v, k); err == nil {
						if k == "backoff" {
							r.Webhook.Backoff = report.Duration(d)
						} else {
							r.Webhook.Timeout = report.Duration(d)
						}
					}
				default:
					return errUnknown
				}
				return err
			})
		default:
			return errUnknown
		}
		return err
	})
	if err != nil {
		return Route{}, err
	}
	switch {
	case r.Name == "":
		return Route{}, lineError(n, "route has no name")
	case r.Alertmanager == "" && r.Webhook.URL == "":
		return Route{}, lineError(n, "route %q: want an alertmanager or a webhook", r.Name)
	case r.Alertmanager != "" && r.Webhook.URL != "":
		return Route{}, lineError(n, "route %q: alertmanager and webhook exclude each other (make two routes)", r.Name)
	}
	if r.Format == "" {
		r.Format = "json"
	}
	r.Webhook.Slack = r.Format == "slack"
	return r, nil
}
