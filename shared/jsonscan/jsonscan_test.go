package jsonscan

import (
	"encoding/json"
	"strconv"
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

func TestInt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in    string
		limit uint64
		mag   uint64
		neg   bool
		next  int
		ok    bool
	}{
		{"0", 10, 0, false, 1, true},
		{"-0", 10, 0, true, 2, true},
		{"10", 10, 10, false, 2, true},
		{"11", 10, 11, false, 2, true}, // limit+1: beyond
		{"99999999999999999999999", 10, 11, false, 23, true},
		{"-7,", 10, 7, true, 2, true},
		{"3.5", 10, 3, false, 1, true}, // the fraction is the caller's
		{"2e1", 10, 2, false, 1, true},
		{"-", 10, 0, true, 1, false},
		{"+1", 10, 0, false, 0, false},
		{"", 10, 0, false, 0, false},
		{"18446744073709551614", 1<<64 - 2, 1<<64 - 2, false, 20, true},
		{"18446744073709551615", 1<<64 - 2, 1<<64 - 1, false, 20, true},
		{"5", 3, 4, false, 1, true},
	} {
		mag, neg, next, ok := Int([]byte(tt.in), 0, tt.limit)
		if mag != tt.mag || neg != tt.neg || next != tt.next || ok != tt.ok {
			t.Errorf("Int(%q, %d) = %d, %v, %d, %v; want %d, %v, %d, %v", tt.in, tt.limit, mag, neg, next, ok, tt.mag, tt.neg, tt.next, tt.ok)
		}
	}
}

// FuzzInt: the magnitude is the digits' value, exactly up to limit and
// limit+1 beyond it, as strconv reads them.
func FuzzInt(f *testing.F) {
	for _, s := range []string{"0", "-12", "9223372036854775808", "007x", "-", "1.5"} {
		f.Add(s, uint64(1<<53))
	}
	f.Fuzz(func(t *testing.T, s string, limit uint64) {
		if limit == 1<<64-1 {
			limit--
		}
		b := []byte(s)
		mag, neg, next, ok := Int(b, 0, limit)
		start := 0
		if neg {
			start = 1
		}
		digits := strings.TrimLeft(s[start:next], "0")
		if ok != (next > start) || neg != strings.HasPrefix(s, "-") || strings.Trim(s[start:next], "0123456789") != "" ||
			(next < len(s) && '0' <= s[next] && s[next] <= '9') {
			t.Fatalf("%q: bad span: mag %d neg %v next %d ok %v", s, mag, neg, next, ok)
		}
		want := limit + 1
		if v, err := strconv.ParseUint("0"+digits, 10, 64); err == nil && v <= limit {
			want = v
		}
		if ok && mag != want {
			t.Fatalf("%q limit %d: mag %d, want %d", s, limit, mag, want)
		}
	})
}
