package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/auditlens/auditlens/gen/scenario"
)

// genScenario is `gen --scenario`: the audit log of one of the situations
// the detectors are tested on (package internal/scenario), e.g. the seed
// incident, for `auditlens scan` or a demo.
type genScenario struct{ name, scale string }

func (g *genScenario) register(fs interface {
	StringVar(p *string, name, value, usage string)
}) {
	fs.StringVar(&g.name, "scenario", "", "write a scenario's audit log instead of random traffic: "+strings.Join(scenario.Names(), ", "))
	fs.StringVar(&g.scale, "scale", "compressed", "time scale of --scenario: compressed (watch restarts every 10-20s) or real (every 5-10 min)")
}

// check validates the flags before any output is created.
func (g *genScenario) check() error {
	if g.name == "" {
		return nil
	}
	if _, ok := scenario.ByName(g.name); !ok {
		return fmt.Errorf("%w: --scenario %q: want one of %s", errUsage, g.name, strings.Join(scenario.Names(), ", "))
	}
	if _, ok := scenario.ScaleByName(g.scale); !ok {
		return fmt.Errorf("%w: --scale %q: want compressed or real", errUsage, g.scale)
	}
	return nil
}

func (g *genScenario) write(w io.Writer, seed int64, start time.Time) error {
	sc, _ := scenario.ByName(g.name)
	scale, _ := scenario.ScaleByName(g.scale)
	return sc.Generate(scale, start, seed).WriteLog(w)
}
