package prompt_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// TestMessagesDocumentBound: a Messages document whose source is text or
// content counts its text at the text rate (900 KB of text was once
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
			prompt.DefaultImageTokens, prompt.DefaultImageTokens + 200, false},
		{"base64 PDF is one media part", doc(`{"type":"base64","media_type":"application/pdf","data":"` + strings.Repeat("A", 100_000) + `"}`),
			prompt.DefaultMediaTokens, prompt.DefaultMediaTokens + 200, true},
		{"escaped base64 type", doc(`{"type":"b\u0061se64","media_type":"application/pdf","data":"` + strings.Repeat("A", 100_000) + `"}`),
			prompt.DefaultMediaTokens, prompt.DefaultMediaTokens + 200, true},
		{"url source", doc(`{"type":"url","url":"https://example.com/a.pdf"}`), prompt.DefaultMediaTokens, prompt.DefaultMediaTokens + 200, true},
		{"file source", doc(`{"type":"file","file_id":"file_1"}`), prompt.DefaultMediaTokens, prompt.DefaultMediaTokens + 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := prompt.Scanner{}.Bound([]byte(tc.body), opMessages)
			if a.Tokens < tc.atLeast || (tc.below > 0 && a.Tokens >= tc.below) || a.Unbounded != tc.unbounded {
				t.Fatalf("bound %d (want at least %d, below %d), unbounded %v (want %v)", a.Tokens, tc.atLeast, tc.below, a.Unbounded, tc.unbounded)
			}
		})
	}
}

// TestBoundProperty holds every row's prompt bound at or above a
// reference count on random bodies: every string value outside the
// members the row says never reach the model (prompt.Body.Never), counted
// at one token a byte after unescaping, plus each media part's bound. The
// bodies nest the row's own members and unknown ones, escape keys and
// type values, and spell every media part (image and document sources of
// each type, image_url and the other media keys and types) at any depth,
// with large text sometimes. A new row is covered
// with no new test code.
func TestBoundProperty(t *testing.T) {
	t.Parallel()
	for _, op := range request.Operations() {
		t.Run(op.Path(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(30, uint64(op)))
			for range 800 {
				checkBound(t, op.Prompt(), randomRowBody(rng, op.Prompt()))
			}
		})
	}
}

// FuzzBound: the property of TestBoundProperty on any valid body, for
// the row the second argument picks.
func FuzzBound(f *testing.F) {
	ops := request.Operations()
	rng := rand.New(rand.NewPCG(31, 3))
	for i := range 20 {
		op := ops[i%len(ops)]
		f.Add(randomRowBody(rng, op.Prompt()), uint8(op))
	}
	f.Fuzz(func(t *testing.T, body []byte, row uint8) {
		b := ops[int(row)%len(ops)].Prompt()
		prompt.Scanner{}.Bound(body, b) // must not panic on anything
		if json.Valid(body) {
			checkBound(t, b, body)
		}
	})
}

func checkBound(t *testing.T, b prompt.Body, body []byte) {
	t.Helper()
	want, ok := rowReference(b, body)
	if !ok {
		return // not an object: the server refuses it first
	}
	if got := (prompt.Scanner{}).Bound(body, b).Tokens; got < want {
		t.Fatalf("body %.2000s: bound %d below the reference %d", body, got, want)
	}
}

// rowReference is the lower count the bound must reach, over
// encoding/json's decoding: in the row's prompt members, media detection
// as documented; elsewhere every string value is text; the row's Never
// members nothing.
func rowReference(b prompt.Body, body []byte) (int64, bool) {
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
		case lk == "tools":
			n += refText(v)
		case oneOf(lk, b.Never...):
		case oneOf(lk, b.Prompt...):
			n += refPrompt(v, b.Sources)
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

func refPrompt(v any, sources bool) int64 {
	switch v := v.(type) {
	case []any:
		var n int64
		for _, e := range v {
			n += refPrompt(e, sources)
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
				if s, ok := e.(map[string]any); ok && sources {
					if typ, _ := s["type"].(string); oneOf(typ, "base64", "url", "file") {
						media = true
						continue
					}
				}
			}
			n += refPrompt(e, sources)
		}
		switch typ, _ := v["type"].(string); {
		case image || oneOf(typ, "image", "image_url", "input_image"):
			n += prompt.DefaultImageTokens
		case media:
			n += prompt.DefaultMediaTokens
		}
		return n
	}
	return refText(v)
}

// escapeOne spells one letter of s as a \u escape, half the time.
func escapeOne(rng *rand.Rand, s string) string {
	if len(s) == 0 || rng.IntN(2) == 0 {
		return s
	}
	i := rng.IntN(len(s))
	return s[:i] + fmt.Sprintf(`\u%04x`, s[i]) + s[i+1:]
}

// randomRowBody writes a body of random shape for the row b: its own
// members (Never, Prompt, Unbounded, tools) and unknown ones, in any
// case and escaped, holding random values that spell every media part.
func randomRowBody(rng *rand.Rand, b prompt.Body) []byte {
	var buf bytes.Buffer
	keys := []string{"role", "content", "type", "text", "source", "data", "media_type", "title", "context",
		"citations", "cache_control", "input", "name", "image_url", "file", "file_data", "file_id", "video_url",
		"audio_url", "input_audio", "image_embeds", "url", "x_unknown", "messages", "prompt", "instructions"}
	types := []string{"text", "image", "document", "base64", "url", "file", "content", "tool_use", "tool_result",
		"search_result", "input_image", "image_url", "input_file", "input_audio", "video_url", "audio_url",
		"image_embeds", "video", "audio", "container_upload", "input_text", "function", "custom", "web_search"}
	str := func() {
		buf.WriteByte('"')
		if rng.IntN(40) == 0 {
			buf.WriteString(strings.Repeat("big text ", 4000+rng.IntN(2000))) // over one media part's bound
		}
		for range rng.IntN(10) {
			switch rng.IntN(10) {
			case 0:
				buf.WriteString(`\n`)
			case 1:
				fmt.Fprintf(&buf, `\u%04x`, 0x20+rng.IntN(0xd000))
			case 2:
				buf.WriteString("é€😀")
			case 3:
				buf.WriteString(`\"`)
			default:
				buf.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		buf.WriteByte('"')
	}
	var value func(depth int)
	object := func(depth int) {
		buf.WriteByte('{')
		for i := range rng.IntN(5) {
			if i > 0 {
				buf.WriteByte(',')
			}
			k := keys[rng.IntN(len(keys))]
			if i == 0 && rng.IntN(2) == 0 {
				k = "type"
			}
			fmt.Fprintf(&buf, `"%s":`, escapeOne(rng, k))
			if k == "type" {
				fmt.Fprintf(&buf, `"%s"`, escapeOne(rng, types[rng.IntN(len(types))]))
				continue
			}
			value(depth + 1)
		}
		buf.WriteByte('}')
	}
	value = func(depth int) {
		switch k := rng.IntN(8); {
		case k == 0 || depth > 5:
			str()
		case k == 1:
			buf.WriteString([]string{"12", "true", "null", "-1.5"}[rng.IntN(4)])
		case k <= 3:
			buf.WriteByte('[')
			for i := range rng.IntN(4) {
				if i > 0 {
					buf.WriteByte(',')
				}
				value(depth + 1)
			}
			buf.WriteByte(']')
		default:
			object(depth)
		}
	}
	var top []string
	for _, l := range [][]string{b.Never, b.Prompt, b.Prompt, b.Prompt, b.Unbounded, {"tools", "x_extra", "system", "input"}} {
		top = append(top, l...)
	}
	buf.WriteByte('{')
	for i := range 1 + rng.IntN(5) {
		if i > 0 {
			buf.WriteByte(',')
		}
		k := top[rng.IntN(len(top))]
		if rng.IntN(4) == 0 {
			k = strings.ToUpper(k[:1]) + k[1:]
		}
		fmt.Fprintf(&buf, `"%s":`, escapeOne(rng, k))
		value(1)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}
