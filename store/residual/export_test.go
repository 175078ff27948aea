package residual

// OpBytes adds the size of each op of a residual to by, keyed by the op
// and the path it applies to: for tests that report what residuals hold.
var OpBytes = opBytes

// opBytes adds the size of each op of a residual to by, keyed by the op
// and the path it applies to.
func opBytes(res []byte, by map[string]int) {
	if len(res) == 0 || res[0] != markPatch {
		if len(res) > 0 {
			by["verbatim"] += len(res)
		}
		return
	}
	var walk func(ops []byte, prefix string)
	walk = func(ops []byte, prefix string) {
		for len(ops) > 0 {
			start := len(ops)
			op := ops[0]
			k, rest, _ := readBytes(ops[1:])
			ops = rest
			switch op {
			case opSet:
				_, ops, _ = readBytes(ops)
				by["set "+prefix+string(k)] += start - len(ops)
			case opDelete:
				by["delete "+prefix+string(k)] += start - len(ops)
			case opObject:
				var sub []byte
				sub, ops, _ = readBytes(ops)
				by["object header "+prefix+string(k)] += start - len(ops) - len(sub)
				walk(sub, prefix+string(k)+".")
			}
		}
	}
	walk(res[1:], "")
}
