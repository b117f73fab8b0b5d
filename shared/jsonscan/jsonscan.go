// Package jsonscan holds the few steps of a byte scan over JSON that is
// already known to be valid (json.Valid): the gateway reads the fields it
// decides on, and bounds a prompt's tokens, without decoding the body.
// It is the one home of those steps (the request decoder, the budget's
// prompt bound and the answer's usage reading all scan with it). Its
// functions return indexes into b, an integer, or a key spelled in a
// buffer the caller owns, or hand an object's members to a callback
// (Members); none allocates.
package jsonscan

import "bytes"

// SkipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string starting at b[i]=='"'.
func SkipString(b []byte, i int) int {
	for i++; i < len(b); {
		// The next quote, found by the vectorized byte search, ends the
		// string unless an odd run of backslashes escapes it.
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		q += i
		bs := 0
		for j := q - 1; j >= i && b[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return len(b)
}

// SkipValue returns the index after the JSON value starting at b[i] (len(b)
// when i is past the end).
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = SkipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// Int reads the JSON integer at b[i:]: an optional minus sign, then
// decimal digits (leading zeros, which valid JSON lacks, read as digits).
// It is the one integer grammar of the gateway's scans (token counts in
// answers, n and caps in requests). mag is the digits' value, or limit+1
// for any value above limit (limit < math.MaxUint64), so a caller tells
// "at most limit" from "beyond" exactly; next is the index after the last
// digit; ok is false when no digit follows the sign. A fraction or an
// exponent after the digits ends the integer: a caller that reads a whole
// value checks that next is the value's end.
func Int(b []byte, i int, limit uint64) (mag uint64, neg bool, next int, ok bool) {
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	q, r := limit/10, limit%10 // divided once, not per digit
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		if mag > limit {
			continue
		}
		d := uint64(b[i] - '0')
		if mag > q || mag == q && d > r { // mag*10+d > limit
			mag = limit + 1
			continue
		}
		mag = mag*10 + d
	}
	return mag, neg, i, i > start
}

// Members calls fn with each member of the object at b[i]=='{': its raw
// key (without quotes) and where its value starts and ends. It stops at
// the first byte that is not where valid JSON puts it, and reports whether
// it reached the object's closing brace.
func Members(b []byte, i int, fn func(key []byte, v, end int)) (closed bool) {
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) && b[i] == '"' {
		ke := SkipString(b, i)
		key := b[i+1 : max(i+1, ke-1)]
		i = SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		v := SkipWS(b, i+1)
		if v >= len(b) {
			return false
		}
		end := SkipValue(b, v)
		fn(key, v, end)
		i = SkipWS(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = SkipWS(b, i+1)
		default:
			return false
		}
	}
	return false
}

// Key returns the JSON key whose raw bytes (between its quotes) are raw,
// unescaped into kb, or raw itself when it has no escapes. It is nil when
// the key does not fit kb or holds a non-ASCII \u escape: no key the
// gateway reads is that long or spelled so, and a caller compares the
// result with the keys it reads, as a decoder would after unescaping.
func Key(raw []byte, kb *[32]byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	n := 0
	for i := 0; i < len(raw); i++ {
		if n == len(kb) {
			return nil
		}
		c := raw[i]
		if c == '\\' && i+1 < len(raw) {
			i++
			switch raw[i] {
			case 'u':
				if i+4 >= len(raw) {
					return nil
				}
				cp, ok := Hex4(raw[i+1 : i+5])
				if !ok || cp >= 0x80 {
					return nil
				}
				c = byte(cp)
				i += 4
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			default:
				c = raw[i]
			}
		}
		kb[n] = c
		n++
	}
	return kb[:n]
}

// Hex4 reads the four hex digits of a \u escape.
func Hex4(h []byte) (rune, bool) {
	var r rune
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
