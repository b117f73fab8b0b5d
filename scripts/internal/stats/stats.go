// Package stats summarises repeated measurements the way the tools under
// scripts/ report them: a median with its spread.
package stats

import "slices"

// Number is what Median takes: floats, and integers such as time.Duration.
type Number interface {
	~int | ~int64 | ~float64
}

// Median returns the median of v (the mean of the two middle values for an
// even count, rounded toward zero for integers), and its min and max: a
// figure over repetitions with its spread. Like slices.Min, it panics for
// an empty v; a caller with a "no data" value of its own (NaN, 0) checks
// the length first.
func Median[T Number](v []T) (med, lo, hi T) {
	if len(v) == 0 {
		panic("stats.Median: empty list")
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}
