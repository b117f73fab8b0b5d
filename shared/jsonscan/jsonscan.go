// Package jsonscan holds the few steps of a byte scan over JSON that is
// already known to be valid (json.Valid): the gateway reads the fields it
// decides on, and bounds a prompt's tokens, without decoding the body.
// Every function returns an index into b; none allocates.
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
