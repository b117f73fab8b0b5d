package prompt_test

import (
	"bytes"
	"testing"
)

// BenchmarkPromptBound is the byte scan on realistic bodies and on a large
// one (a 100 KiB document in one message).
func BenchmarkPromptBound(b *testing.B) {
	big := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"Summarise."},{"role":"user","content":"` +
		string(bytes.Repeat([]byte(`The quick brown fox jumps over the lazy dog.\n`), 100<<10/46)) + `"}]}`)
	cases := []struct {
		name string
		body []byte
	}{
		{"short_chat", readFixture(b, "short_chat.json")},
		{"multi_turn", readFixture(b, "multi_turn.json")},
		{"tools", readFixture(b, "tools.json")},
		{"code_escapes", readFixture(b, "code_escapes.json")},
		{"chinese", readFixture(b, "chinese.json")},
		{"100KiB", big},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				promptBound(c.body, opChat)
			}
		})
	}
}
