package request

import (
	"os"
	"strings"
	"testing"
)

// TestBetaTableDocumented: docs/ownership.md's beta table has a row for
// every value of AnthropicBetas, saying whether it is a default.
func TestBetaTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ownership.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range AnthropicBetas {
		want := "| `" + b.Name + "` | no |"
		if b.Default {
			want = "| `" + b.Name + "` | yes |"
		}
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/ownership.md lacks the row %q", want)
		}
		if !b.Default && DefaultBeta(b.Name) || b.Default && !DefaultBeta(b.Name) {
			t.Errorf("DefaultBeta(%q) disagrees with the table", b.Name)
		}
	}
	if DefaultBeta("computer-use-2025-01-24") {
		t.Error("a value on no list is a default")
	}
}
