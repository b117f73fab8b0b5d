package sse

import (
	"testing"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// oldParseInt is parseInt as it was before it read through jsonscan.Int:
// the oracle of FuzzParseIntMatchesOld.
func oldParseInt(b []byte, i int) (n int64, next int, ok bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start, over := i, false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := int64(b[i] - '0')
		if over || n > (1<<63-1-d)/10 {
			over = true
			continue
		}
		n = n*10 + d
	}
	if i == start {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	switch {
	case over:
		n = -1
	case neg:
		n = -n
	}
	return n, i, true
}

// FuzzParseIntMatchesOld: a usage count reads as it did with sse's own
// integer grammar, for every value a member can hold (the value ends where
// jsonscan.SkipValue says, as in parseUsageObject).
func FuzzParseIntMatchesOld(f *testing.F) {
	for _, s := range []string{"0", "12", "-3", "-0", "007", "1.5", "2e3", "-", "", "x", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "99999999999999999999999", "1,", "5}", "12 ", "1-2", "--1", "+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		end := jsonscan.SkipValue(b, 0)
		on, onext, ook := oldParseInt(b, 0)
		ook = ook && onext == end
		n, ok := parseInt(b, 0, end)
		if ok != ook || (ok && n != on) {
			t.Fatalf("%q: parseInt = %d, %v; before = %d, %v", s, n, ok, on, ook)
		}
	})
}
