package request

import (
	"errors"
	"testing"
)

// oldCount is count as it was before it read through jsonscan.Int: the
// oracle of FuzzCountMatchesOld.
func oldCount(v []byte, param string) (int64, error) {
	if string(v) == "null" {
		return 0, nil
	}
	neg := len(v) > 0 && v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, &IntError{Param: param}
		}
		if n < maxCount {
			n = n*10 + int64(c-'0')
		}
	}
	if len(digits) == 0 {
		return 0, &IntError{Param: param}
	}
	if neg || n < 1 {
		return 0, &IntError{Param: param, BelowMin: true}
	}
	return min(n, maxCount), nil
}

// FuzzCountMatchesOld: n, best_of and the caps read as they did with
// upstream's own integer grammar: the same value, or the same error.
func FuzzCountMatchesOld(f *testing.F) {
	for _, s := range []string{"null", "1", "0", "-1", "-0", "007", "1.0", "1e3", "-", "", "x", "--1", "+1", "5-",
		"9007199254740992", "9007199254740993", "99999999999999999999999999", "-99999999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		on, oerr := oldCount([]byte(s), "n")
		n, err := count([]byte(s), "n")
		var oie, ie *IntError
		if n != on || (oerr == nil) != (err == nil) ||
			(err != nil && (!errors.As(err, &ie) || !errors.As(oerr, &oie) || *ie != *oie)) {
			t.Fatalf("%q: count = %d, %v; before = %d, %v", s, n, err, on, oerr)
		}
	})
}
