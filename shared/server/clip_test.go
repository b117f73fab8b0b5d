package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClip: a caller's string is cut at maxEcho bytes, never inside a
// character, and marked; a short one is left whole.
func TestClip(t *testing.T) {
	tests := []struct {
		name, in string
		cut      bool
	}{
		{"short", "/v1/chat/completions", false},
		{"at the bound", strings.Repeat("a", maxEcho), false},
		{"ascii", strings.Repeat("a", maxEcho+1), true},
		{"multibyte across the bound", "a" + strings.Repeat("é", maxEcho), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clipped(tt.in)
			if !tt.cut {
				if got != tt.in {
					t.Fatalf("cut a short string: %q", got)
				}
				return
			}
			head, ok := strings.CutSuffix(got, truncatedMark)
			if !ok || len(head) > maxEcho || !utf8.ValidString(head) || !strings.HasPrefix(tt.in, head) {
				t.Fatalf("clipped %d bytes to %q", len(tt.in), got)
			}
		})
	}
}
