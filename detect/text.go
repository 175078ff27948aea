package detect

// Helpers the detectors share to word their findings.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	refl "github.com/auditlens/auditlens/internal/reflector"
)

func mergeStrings(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 16 {
		out = out[:16]
	}
	return out
}

func fmtRV(v uint64) string { return strconv.FormatUint(v, 10) }

// programName is the program of a client (internal/reflector).
func programName(userAgent, user string) string { return refl.Program(userAgent, user) }

func objectList(objs []Object, limit int) string {
	var names []string
	for i, o := range objs {
		if i == limit {
			names = append(names, fmt.Sprintf("and %d more", len(objs)-limit))
			break
		}
		if o.Namespace == "" {
			names = append(names, o.Name)
		} else {
			names = append(names, o.Namespace+"/"+o.Name)
		}
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
