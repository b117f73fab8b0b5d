// Package price owns the price catalogue: what each public
// model costs per million tokens of each kind, per service tier and above
// a long-context threshold, and what a server feature costs per use; and
// the two sums the spend limits need, a request's worst case before it is
// forwarded (Worst) and its cost from the answer's usage (Cost).
//
// Money is integer: an amount is in micro-units of the catalogue's one
// ISO 4217 currency (Micros; 1 USD = 1,000,000), prices are parsed from
// decimal strings exactly (ParseMicros) and never pass through a float.
// A cost is Σ tokens × rate / 1,000,000 computed exactly in 128 bits and
// rounded up once, at the end, to a whole micro-unit, so the ledger never
// charges less than the list price and a worst case is never below the
// cost it bounds (both round the same monotone sum).
package price

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Micros is an amount of money in millionths of the catalogue's currency
// unit (a micro-dollar for USD).
type Micros = int64

// MaxMicros is the largest amount a budget store keeps exactly (Lua's
// numbers are doubles): 2^53 micro-units, about nine billion units. Sums
// saturate there.
const MaxMicros = 1 << 53

// perMillion is the token count a rate is quoted for, and the scale of a
// multiplier (1.5 is 1,500,000).
const perMillion = 1_000_000

// ParseMicros reads a non-negative decimal amount ("2.50", "0.075", "15")
// as micro-units, exactly: at most six digits after the point, no sign,
// exponent or separators, at most MaxMicros.
func ParseMicros(s string) (Micros, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && frac == "") {
		return 0, fmt.Errorf("%q is not a decimal amount (want digits, as in \"2.50\")", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%q has more than 6 decimal places (the ledger counts micro-units)", s)
	}
	var n uint64
	for _, part := range [2]string{whole, frac + strings.Repeat("0", 6-len(frac))} {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%q is not a decimal amount (want digits, as in \"2.50\")", s)
			}
			if n = n*10 + uint64(c-'0'); n > MaxMicros*10 {
				return 0, fmt.Errorf("%q is above the largest amount kept exactly (%s)", s, Format(MaxMicros))
			}
		}
	}
	if n > MaxMicros {
		return 0, fmt.Errorf("%q is above the largest amount kept exactly (%s)", s, Format(MaxMicros))
	}
	return int64(n), nil
}

// Format writes an amount with two decimals, or more when it has them
// ("49.80", "0.00015"): the spelling of refusals and headers. One
// allocation, the string.
func Format(m Micros) string {
	var b [32]byte
	return string(AppendFormat(b[:0], m))
}

// AppendFormat appends Format(m) to b.
func AppendFormat(b []byte, m Micros) []byte {
	u := uint64(m)
	if m < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/perMillion, 10)
	frac := u % perMillion
	digits := 6
	for digits > 2 && frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	var f [6]byte
	for i := digits - 1; i >= 0; i-- {
		f[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, f[:digits]...)
}

// mulDivUp is ⌈a×b / perMillion⌉ for non-negative a and b, saturating at
// MaxMicros: exact in 128 bits.
func mulDivUp(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, c := bits.Add64(lo, perMillion-1, 0)
	hi += c
	if hi >= perMillion {
		return MaxMicros
	}
	q, _ := bits.Div64(hi, lo, perMillion)
	return int64(min(q, MaxMicros))
}

// acc is an exact sum of tokens × rate products (micro-units × 10^-6),
// 128 bits wide.
type acc struct{ hi, lo uint64 }

func (s *acc) add(tokens, rate int64) {
	if tokens <= 0 || rate <= 0 {
		return
	}
	hi, lo := bits.Mul64(uint64(tokens), uint64(rate))
	var c uint64
	s.lo, c = bits.Add64(s.lo, lo, 0)
	s.hi, _ = bits.Add64(s.hi, hi, c)
}

// micros is the sum in micro-units, rounded up, saturating at MaxMicros.
func (s acc) micros() Micros {
	lo, c := bits.Add64(s.lo, perMillion-1, 0)
	hi := s.hi + c
	if hi >= perMillion {
		return MaxMicros
	}
	q, _ := bits.Div64(hi, lo, perMillion)
	return int64(min(q, MaxMicros))
}

// MulUses is uses × per-use price, saturating at MaxMicros.
func MulUses(uses int64, per Micros) Micros {
	if uses <= 0 || per <= 0 {
		return 0
	}
	if uses > MaxMicros/per {
		return MaxMicros
	}
	return uses * per
}
