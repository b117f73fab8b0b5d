package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSkipValue(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"a\"b" ,`, 6},
		{`{"x":[1,"}"]} `, 13},
		{`[[],{}],`, 7},
		{`123}`, 3},
		{`true `, 4},
		{``, 0},
	}
	for _, tt := range tests {
		if got := SkipValue([]byte(tt.in), 0); got != tt.want {
			t.Errorf("SkipValue(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// FuzzSkipValue: on valid JSON, the value skipped is exactly one JSON value.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"}"}]}`, `"x\\"`, `[1, 2 ,3]`, `-1.5e3`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if !json.Valid(b) {
			return
		}
		i := SkipWS(b, 0)
		end := SkipValue(b, i)
		if !json.Valid(b[i:end]) || SkipWS(b, end) != len(b) {
			t.Fatalf("SkipValue(%q) ended at %d", s, end)
		}
	})
}

func TestKey(t *testing.T) {
	t.Parallel()
	var kb [32]byte
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"usage", "usage", true},
		{`\u0075sage`, "usage", true},
		{`max_\u0074okens`, "max_tokens", true},
		{`a\"b\\c\/d`, `a"b\c/d`, true},
		{`tab\there`, "tab\there", true},
		{`\u00e9`, "", false},                     // non-ASCII: no key read is spelled so
		{`\u007`, "", false},                      // truncated escape
		{strings.Repeat(`\u0061`, 33), "", false}, // longer than any key read
	} {
		got := Key([]byte(tc.raw), &kb)
		if (got != nil) != tc.ok || string(got) != tc.want {
			t.Errorf("Key(%q) = %q, want %q (ok %v)", tc.raw, got, tc.want, tc.ok)
		}
	}
}
