package detect

// Helpers the detectors share to word their findings.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MergeStrings is the sorted union of a and b, at most 16 strings.
func MergeStrings(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 16 {
		out = out[:16]
	}
	return out
}

// FormatRV writes a resourceVersion held as a number.
func FormatRV(v uint64) string { return strconv.FormatUint(v, 10) }

// Plural is one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Round2 rounds a non-negative x to two decimals.
func Round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }

// ObjectList names objects (namespace/name) for a summary, up to limit of them.
func ObjectList(objs []Object, limit int) string {
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
