package budget_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
)

// TestMessagesDocumentBound: a Messages document whose source is text or
// content counts its text at the text rate (issue 30: 900 KB of text was
// bounded as one media part, 32,952 reserved and 225,156 billed), while a
// base64, URL or file source stays one media part, whatever escapes spell
// the source's type.
func TestMessagesDocumentBound(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("All work and no play makes Jack a dull boy. ", 900_000/44)
	doc := func(source string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":` + source + `}]}]}`
	}
	for _, tc := range []struct {
		name      string
		body      string
		atLeast   int64
		below     int64 // 0: no upper check
		unbounded bool
	}{
		{"text source", doc(`{"type":"text","media_type":"text/plain","data":"` + big + `"}`), int64(len(big)), 0, false},
		{"escaped text type", doc(`{"type":"t\u0065xt","media_type":"text/plain","data":"` + big + `"}`), int64(len(big)), 0, false},
		{"content source", doc(`{"type":"content","content":[{"type":"text","text":"` + big + `"}]}`), int64(len(big)), 0, false},
		{"unknown source type counts as text", doc(`{"type":"plain","data":"` + big + `"}`), int64(len(big)), 0, false},
		{"content source with an image", doc(`{"type":"content","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + strings.Repeat("A", 100_000) + `"}}]}`),
			budget.DefaultImageTokens, budget.DefaultImageTokens + 200, false},
		{"base64 PDF is one media part", doc(`{"type":"base64","media_type":"application/pdf","data":"` + strings.Repeat("A", 100_000) + `"}`),
			budget.DefaultMediaTokens, budget.DefaultMediaTokens + 200, true},
		{"escaped base64 type", doc(`{"type":"b\u0061se64","media_type":"application/pdf","data":"` + strings.Repeat("A", 100_000) + `"}`),
			budget.DefaultMediaTokens, budget.DefaultMediaTokens + 200, true},
		{"url source", doc(`{"type":"url","url":"https://example.com/a.pdf"}`), budget.DefaultMediaTokens, budget.DefaultMediaTokens + 200, true},
		{"file source", doc(`{"type":"file","file_id":"file_1"}`), budget.DefaultMediaTokens, budget.DefaultMediaTokens + 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := budget.Scanner{}.Ask([]byte(tc.body), budget.FormatMessages)
			if a.PromptBound < tc.atLeast || (tc.below > 0 && a.PromptBound >= tc.below) || a.Unbounded != tc.unbounded {
				t.Fatalf("bound %d (want at least %d, below %d), unbounded %v (want %v)", a.PromptBound, tc.atLeast, tc.below, a.Unbounded, tc.unbounded)
			}
		})
	}
}

// TestMessagesBoundProperty holds the Messages prompt bound at or above a
// reference count on random bodies: every string value outside the
// members that never reach the model counted at one token a byte (after
// unescaping), plus each media part's bound. The bodies nest known and
// unknown keys, escape keys and type values, and spell every media part
// (image and document sources of each type, image_url and the other
// media keys), with large text sometimes (issue 30, section 3).
func TestMessagesBoundProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(30, 3))
	for range 3000 {
		checkMessagesBound(t, randomMessagesBody(rng))
	}
}

func FuzzMessagesBound(f *testing.F) {
	rng := rand.New(rand.NewPCG(31, 3))
	for range 20 {
		f.Add(randomMessagesBody(rng))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if json.Valid(body) {
			checkMessagesBound(t, body)
		}
	})
}

func checkMessagesBound(t *testing.T, body []byte) {
	t.Helper()
	want, ok := messagesReference(body)
	if !ok {
		return // not an object: the server refuses it first
	}
	if got := (budget.Scanner{}).Ask(body, budget.FormatMessages).PromptBound; got < want {
		t.Fatalf("body %.2000s: bound %d below the reference %d", body, got, want)
	}
}

// messagesNeverPrompt is the top-level members of a Messages body that
// never reach the model.
var messagesNeverPrompt = []string{"model", "max_tokens", "stream", "temperature", "top_p", "top_k",
	"metadata", "stop_sequences", "thinking", "tool_choice", "service_tier", "n", "best_of",
	"max_completion_tokens", "max_output_tokens", "stream_options", "min_p", "presence_penalty",
	"frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "seed",
	"store", "parallel_tool_calls", "reasoning_effort", "stop", "encoding_format", "dimensions", "echo",
	"safety_identifier", "prompt_cache_key", "truncation", "include", "background", "verbosity", "max_tool_calls"}

// messagesReference is the lower count the bound must reach, over
// encoding/json's decoding: in messages and system, media detection as
// documented; elsewhere every string value is text.
func messagesReference(body []byte) (int64, bool) {
	var top map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&top); err != nil || top == nil {
		return 0, false
	}
	// encoding/json keeps the last of duplicate keys; the scanner counts
	// every member, so counting the last is a lower count.
	var n int64
	for k, v := range top {
		switch lk := strings.ToLower(k); {
		case oneOf(lk, messagesNeverPrompt...):
		case lk == "messages" || lk == "system":
			n += refPrompt(v)
		default:
			n += refText(v)
		}
	}
	return n, true
}

func refText(v any) int64 {
	switch v := v.(type) {
	case string:
		return int64(len(v))
	case []any:
		var n int64
		for _, e := range v {
			n += refText(e)
		}
		return n
	case map[string]any:
		var n int64
		for _, e := range v {
			n += refText(e)
		}
		return n
	}
	return 0
}

func refPrompt(v any) int64 {
	switch v := v.(type) {
	case []any:
		var n int64
		for _, e := range v {
			n += refPrompt(e)
		}
		return n
	case map[string]any:
		var n int64
		image, media := false, false
		for k, e := range v {
			switch k {
			case "image_url":
				image = true
				continue
			case "video_url", "audio_url", "input_audio", "image_embeds", "file", "file_data":
				media = true
				continue
			case "source":
				if s, ok := e.(map[string]any); ok {
					if typ, _ := s["type"].(string); oneOf(typ, "base64", "url", "file") {
						media = true
						continue
					}
				}
			}
			n += refPrompt(e)
		}
		switch typ, _ := v["type"].(string); {
		case image || oneOf(typ, "image", "image_url", "input_image"):
			n += budget.DefaultImageTokens
		case media:
			n += budget.DefaultMediaTokens
		}
		return n
	}
	return refText(v)
}

// randomMessagesBody writes a Messages body of random shape.
func randomMessagesBody(rng *rand.Rand) []byte {
	var b bytes.Buffer
	keys := []string{"role", "content", "type", "text", "source", "data", "media_type", "title", "context",
		"citations", "cache_control", "input", "name", "image_url", "file", "video_url", "url", "file_id",
		"x_unknown", "c\\u006fntent", "t\\u0065xt"}
	types := []string{"text", "image", "document", "base64", "url", "file", "content", "tool_use", "tool_result",
		"t\\u0065xt", "b\\u0061se64", "d\\u006fcument", "search_result", "input_image", "image_url"}
	str := func() {
		b.WriteByte('"')
		if rng.IntN(40) == 0 {
			b.WriteString(strings.Repeat("big text ", 4000+rng.IntN(2000))) // over one media part's bound
		}
		for range rng.IntN(10) {
			switch rng.IntN(10) {
			case 0:
				b.WriteString(`\n`)
			case 1:
				fmt.Fprintf(&b, `\u%04x`, 0x20+rng.IntN(0xd000))
			case 2:
				b.WriteString("é€😀")
			case 3:
				b.WriteString(`\"`)
			default:
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		b.WriteByte('"')
	}
	var value func(depth int)
	object := func(depth int) {
		b.WriteByte('{')
		n := rng.IntN(5)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			k := keys[rng.IntN(len(keys))]
			if i == 0 && rng.IntN(2) == 0 {
				k = "type"
			}
			fmt.Fprintf(&b, `"%s":`, k)
			if k == "type" {
				fmt.Fprintf(&b, `"%s"`, types[rng.IntN(len(types))])
				continue
			}
			value(depth + 1)
		}
		b.WriteByte('}')
	}
	value = func(depth int) {
		switch k := rng.IntN(8); {
		case k == 0 || depth > 5:
			str()
		case k == 1:
			b.WriteString([]string{"12", "true", "null", "-1.5"}[rng.IntN(4)])
		case k <= 3:
			b.WriteByte('[')
			for i := range rng.IntN(4) {
				if i > 0 {
					b.WriteByte(',')
				}
				value(depth + 1)
			}
			b.WriteByte(']')
		default:
			object(depth)
		}
	}
	top := []string{"model", "max_tokens", "messages", "system", "tools", "metadata", "x_extra", "stop_sequences", "mcp_servers"}
	b.WriteString(`{"messages":`)
	value(1)
	for range rng.IntN(4) {
		fmt.Fprintf(&b, `,"%s":`, top[rng.IntN(len(top))])
		value(1)
	}
	b.WriteByte('}')
	return b.Bytes()
}
