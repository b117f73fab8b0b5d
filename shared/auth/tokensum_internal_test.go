package auth

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// TestTokenSum: the cache key is the token's SHA-256, of any length, and
// an ordinary token is hashed without allocating.
func TestTokenSum(t *testing.T) {
	for _, n := range []int{0, 1, 700, 2048, 2049, 10000} {
		tok := strings.Repeat("e", n)
		if tokenSum(tok) != sha256.Sum256([]byte(tok)) {
			t.Fatalf("%d bytes: not the token's SHA-256", n)
		}
	}
	tok := strings.Repeat("e", 900)
	if a := testing.AllocsPerRun(20, func() { _ = tokenSum(tok) }); a != 0 {
		t.Errorf("%v allocations per token", a)
	}
}
