package detectors

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/heartbeatloss"
	"github.com/auditlens/auditlens/detect/relist"
	"github.com/auditlens/auditlens/detect/rollback"
	"github.com/auditlens/auditlens/detect/watchloop"

	"go.yaml.in/yaml/v3"
)

// Config holds every detector's parameters, as the detectors section of
// the configuration file sets them (zero fields: the defaults):
//
//	detectors:
//	  heartbeat-loss:
//	    floor: 45s          # heartbeatloss.Config.Floor
//	    min_nodes: 3
//	  watch-loop:
//	    resources: [services, endpoints]
//
// Each key is its field's name in snake case (MinRestarts: min_restarts).
type Config struct {
	WatchLoop     watchloop.Config
	Regression    watchloop.RegressionConfig
	HeartbeatLoss heartbeatloss.Config
	RVRollback    rollback.Config
	RelistLoop    relist.LoopConfig
	RelistHerd    relist.HerdConfig
}

// Detectors returns every detector with c's parameters, in the order of
// Default.
func (c Config) Detectors() []detect.Detector {
	return []detect.Detector{watchloop.New(c.WatchLoop), watchloop.NewRegression(c.Regression), heartbeatloss.New(c.HeartbeatLoss),
		rollback.New(c.RVRollback), relist.NewLoop(c.RelistLoop), relist.NewHerd(c.RelistHerd)}
}

// sections names the parameters of each detector, by detector name.
func (c *Config) sections() map[string]any {
	return map[string]any{
		watchloop.Name: &c.WatchLoop, watchloop.RegressionName: &c.Regression, heartbeatloss.Name: &c.HeartbeatLoss,
		rollback.Name: &c.RVRollback, relist.LoopName: &c.RelistLoop, relist.HerdName: &c.RelistHerd,
	}
}

// Validate reports parameters that cannot work.
func (c Config) Validate() error {
	if err := c.HeartbeatLoss.Validate(); err != nil {
		return err
	}
	sections := c.sections()
	for _, name := range slices.Sorted(maps.Keys(sections)) {
		v := reflect.ValueOf(sections[name]).Elem()
		for i := range v.NumField() {
			f, key := v.Field(i), paramKey(v.Type().Field(i).Name)
			switch {
			case f.CanFloat() && math.IsNaN(f.Float()):
				return fmt.Errorf("%s: %s is not a number", name, key)
			case f.CanInt() && f.Int() < 0, f.CanFloat() && f.Float() < 0:
				// %v shows a time.Duration as one: -5s.
				return fmt.Errorf("%s: %s %v is negative", name, key, f.Interface())
			}
		}
	}
	return nil
}

// Params lists the settable parameters of the named detector: their keys
// in the configuration file, in the order of the detector's config type.
func (c Config) Params(detector string) []string {
	p, ok := c.sections()[detector]
	if !ok {
		return nil
	}
	t := reflect.TypeOf(p).Elem()
	var out []string
	for i := range t.NumField() {
		out = append(out, paramKey(t.Field(i).Name))
	}
	return out
}

// ParseConfig decodes a detectors section: a mapping from detector name to
// a mapping of its parameters. Unknown detectors and parameters and values
// of the wrong kind are errors that give their line.
func ParseConfig(n *yaml.Node) (Config, error) {
	var c Config
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return c, nil
	}
	if n.Kind != yaml.MappingNode {
		return c, fmt.Errorf("line %d: detectors: want a mapping of detector names to their parameters", n.Line)
	}
	sections := c.sections()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p, ok := sections[k.Value]
		if !ok {
			return c, fmt.Errorf("line %d: detectors: unknown detector %q (known: %s)", k.Line, k.Value,
				strings.Join(slices.Sorted(maps.Keys(sections)), ", "))
		}
		if err := decodeParams(k.Value, v, reflect.ValueOf(p).Elem()); err != nil {
			return c, err
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("line %d: detectors: %w", n.Line, err)
	}
	return c, nil
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeParams sets the fields of one detector's config from a mapping.
func decodeParams(detector string, n *yaml.Node, cfg reflect.Value) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: detectors: %s: want a mapping of parameters", n.Line, detector)
	}
	fields := map[string]int{}
	var keys []string
	for i := range cfg.NumField() {
		key := paramKey(cfg.Type().Field(i).Name)
		fields[key] = i
		keys = append(keys, key)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		idx, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("line %d: detectors: %s has no parameter %q (it has: %s)", k.Line, detector, k.Value, strings.Join(keys, ", "))
		}
		if seen[k.Value] {
			return fmt.Errorf("line %d: detectors: %s: %s is set twice", k.Line, detector, k.Value)
		}
		seen[k.Value] = true
		if err := setParam(cfg.Field(idx), v); err != nil {
			return fmt.Errorf("line %d: detectors: %s: %s: %w", v.Line, detector, k.Value, err)
		}
	}
	return nil
}

// setParam sets one field from a YAML value of the field's kind.
func setParam(f reflect.Value, v *yaml.Node) error {
	if f.Kind() == reflect.Slice {
		if v.Kind != yaml.SequenceNode {
			return fmt.Errorf("want a list of strings")
		}
		var list []string
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode || item.Value == "" {
				return fmt.Errorf("want a list of non-empty strings")
			}
			list = append(list, item.Value)
		}
		f.Set(reflect.ValueOf(list))
		return nil
	}
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a single value")
	}
	s := v.Value
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration such as 30s or 5m: %q", s)
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(s)
	case f.CanInt():
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number: %q", s)
		}
		f.SetInt(i)
	case f.CanUint():
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number, not negative: %q", s)
		}
		f.SetUint(u)
	case f.CanFloat():
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number: %q", s)
		}
		f.SetFloat(x)
	default:
		return fmt.Errorf("cannot be set from the configuration (%s)", f.Type())
	}
	return nil
}

// paramKey is a field name in snake case: MinRestarts → min_restarts,
// RVRollback → rv_rollback.
func paramKey(field string) string {
	r := []rune(field)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// Default returns every detector with its default parameters.
func Default() []detect.Detector {
	return Config{}.Detectors()
}
