// EqualSecret and MatchSecret compare secrets (bearer tokens) without
// telling an attacker, by how long the comparison takes, how much of a guess
// was right or how long the secret is.

package auth

import (
	"crypto/sha256"
	"crypto/subtle"
)

// EqualSecret reports whether a and b are the same secret, in time that depends
// on neither their contents nor their lengths: it compares their SHA-256
// digests (subtle.ConstantTimeCompare alone returns at once when the
// lengths differ).
func EqualSecret(a, b string) bool {
	da, db := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(da[:], db[:]) == 1
}

// MatchSecret returns the index of the first of secrets equal to s, or -1. It
// compares s with every one of them, so the time it takes does not say
// which one matched.
func MatchSecret(s string, secrets []string) int {
	found := -1
	for i, t := range secrets {
		if EqualSecret(s, t) && found < 0 {
			found = i
		}
	}
	return found
}
