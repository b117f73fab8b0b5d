package jsonscan

import (
	"encoding/json"
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
