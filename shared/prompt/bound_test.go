package prompt_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// boundFixtures are realistic request bodies in testdata/bound with the
// prompt tokens OpenAI counts for them, measured with the o200k_base
// (gpt-4o, o-series) and cl100k_base (gpt-4, gpt-3.5) tokenizers and the
// counting rules of OpenAI's cookbook ("How to count tokens with
// tiktoken": 3 tokens per message, 1 per name, 3 for the reply priming,
// and its function-definition formula for tools). cookbook.json is the
// cookbook's own example (129 tokens with cl100k).
var boundFixtures = []struct {
	file          string
	format        prompt.Body
	o200k, cl100k int64
}{
	{"short_chat.json", opChat, 25, 25},
	{"cookbook.json", opChat, 124, 129},
	{"long_english.json", opChat, 174, 175},
	{"multi_turn.json", opChat, 136, 137},
	{"code_escapes.json", opChat, 71, 72},
	{"tools.json", opChat, 93, 94},
	{"chinese.json", opChat, 30, 45},
	{"escaped_unicode.json", opChat, 32, 40},
	{"emoji.json", opChat, 106, 113},
	{"completions.json", opCompletions, 17, 17},
	{"embeddings.json", opEmbeddings, 27, 27},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPromptBoundHolds checks the bound against real token counts and logs
// how tight it is (bound / true tokens).
func TestPromptBoundHolds(t *testing.T) {
	t.Parallel()
	for _, fx := range boundFixtures {
		t.Run(fx.file, func(t *testing.T) {
			t.Parallel()
			body := readFixture(t, fx.file)
			bound := int64(promptBound(body, fx.format))
			truth := max(fx.o200k, fx.cl100k)
			if bound < truth {
				t.Fatalf("bound %d < %d tokens", bound, truth)
			}
			t.Logf("body %4d bytes, bound %4d, o200k %3d (%.1fx), cl100k %3d (%.1fx)",
				len(body), bound, fx.o200k, float64(bound)/float64(fx.o200k), fx.cl100k, float64(bound)/float64(fx.cl100k))
		})
	}
}

func TestPromptBoundCases(t *testing.T) {
	t.Parallel()
	const base = 32 // per request
	msg := func(content string) string {
		return `{"model":"m","messages":[{"role":"user","content":` + content + `}]}`
	}
	// one message: object 4, role "user" 4+1, content +1
	const one = base + 4 + 5 + 1
	for _, tc := range []struct {
		name   string
		body   string
		format prompt.Body
		want   int64
	}{
		{"ascii", msg(`"hello"`), opChat, one + 5},
		{"escapes count decoded", msg(`"a\nb\"c\\d\/"`), opChat, one + 8},
		{"\\u00e9 is 2 bytes", msg(`"caf\u00e9"`), opChat, one + 5},
		{"raw é is 2 bytes", msg(`"café"`), opChat, one + 5},
		{"\\u20ac is 3 bytes", msg(`"\u20ac"`), opChat, one + 3},
		{"surrogate pair is 4 bytes", msg(`"\ud83d\ude00"`), opChat, one + 4},
		{"lone surrogates are U+FFFD", msg(`"\ud83d\u0041\ude00"`), opChat, one + 3 + 1 + 3},
		{"invalid UTF-8 is U+FFFD", msg("\"a\xffb\""), opChat, one + 5},
		{"non-prompt members are skipped", `{"model":"a-very-long-model-name","messages":[],"temperature":0.7,"user":"someone@example.com","metadata":{"k":"vvvvvvvvvv"},"stop":["\n\n"],"logit_bias":{"1234":-100},"seed":42,"stream":true,"stream_options":{"include_usage":true},"n":2,"max_tokens":100}`, opChat, base},
		{"unknown members count keys and literals", `{"model":"m","foo":{"bar":[1,true,null]}}`, opChat, base + 3 + 4 + 3 + 1 + 4 + 4},
		{"tools count schema keys", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`, opChat,
			// "tools" 5; the element: type 4+9, function 8 + {name 4+2,
			// parameters 10 + {type 4+7, properties 10 + {city 4 + {type
			// 4+7, +4}, +4}, +4}, +4}, +4
			base + 98},
		{"image url replaced by image tokens", msg(`[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}}]`),
			// the message 4 + role 5; parts: text {4+5+3}, image {4+10} + image tokens
			opChat, base + 4 + 5 + 12 + 14 + prompt.DefaultImageTokens},
		{"responses input_image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/x.png"}]}]}`,
			opResponses, base + 4 + 5 + 4 + 12 + prompt.DefaultImageTokens},
		{"completions prompt array", `{"model":"m","prompt":["ab","cd"],"suffix":"x"}`, opCompletions, base + 3 + 3 + 2},
		{"token ids count their digits", `{"model":"m","input":[[1234,5]]}`, opEmbeddings, base + 5},
		// A type value is read after unescaping, as backends read it.
		{"escaped input_image type", `{"model":"m","input":[{"role":"user","content":[{"type":"input_im\u0061ge","file_id":"f"}]}]}`,
			opResponses, base + 4 + 5 + 4 + 12 + 2 + prompt.DefaultImageTokens},
		// vLLM's media parts: a bound each, their data not counted as text.
		{"video part", `{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"https://example.com/v.mp4"}}]}]}`,
			opChat, base + 4 + 5 + 4 + 10 + prompt.DefaultMediaTokens},
		{"audio and embeds parts", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},{"type":"image_embeds","image_embeds":"AAAA"}]}]}`,
			opChat, base + 4 + 5 + 4 + 12 + 4 + 13 + 2*prompt.DefaultMediaTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := int64(promptBound([]byte(tc.body), tc.format)); got != tc.want {
				t.Errorf("PromptBound = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAskFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   string
		format prompt.Body
		want   prompt.Bound // Tokens ignored
	}{
		{"nothing", `{"model":"m","messages":[]}`, opChat, prompt.Bound{}},
		// Choices and ClientCap are the caller's (its body decoder's strict
		// reading); the scanner leaves them zero.
		{"n and caps are the caller's", `{"model":"m","n":3,"best_of":5,"max_tokens":100,"max_completion_tokens":300}`, opChat, prompt.Bound{}},
		{"file part", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, opChat, prompt.Bound{Unbounded: true}},
		{"previous response", `{"input":"x","previous_response_id":"resp_1"}`, opResponses, prompt.Bound{Unbounded: true}},
		{"null previous response", `{"input":"x","previous_response_id":null}`, opResponses, prompt.Bound{}},
		{"stored prompt", `{"prompt":{"id":"pmpt_1"}}`, opResponses, prompt.Bound{Unbounded: true}},
		{"hosted tool", `{"input":"x","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}`, opResponses, prompt.Bound{Unbounded: true}},
		{"function tools only", `{"input":"x","tools":[{"type":"function","name":"f"}]}`, opResponses, prompt.Bound{}},
		{"web search options", `{"messages":[],"web_search_options":{}}`, opChat, prompt.Bound{Unbounded: true}},
		// Every prompt of a batch gets its own completions.
		{"prompt array of strings", `{"prompt":["a","b","c"],"n":2}`, opCompletions, prompt.Bound{Prompts: 3}},
		{"prompt array of token arrays", `{"prompt":[[1,2],[3]]}`, opCompletions, prompt.Bound{Prompts: 2}},
		{"one token array is one prompt", `{"prompt":[1,2,3]}`, opCompletions, prompt.Bound{Prompts: 1}},
		{"empty prompt array", `{"prompt":[]}`, opCompletions, prompt.Bound{Prompts: 1}},
		{"escaped prompt key", `{"pr\u006fmpt":["a","b"]}`, opCompletions, prompt.Bound{Prompts: 2}},
		{"2048 prompts", `{"prompt":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 2048), ",") + `]}`, opCompletions, prompt.Bound{Prompts: 2048}},
		{"chat messages are not prompts", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, opChat, prompt.Bound{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.want.Prompts == 0 {
				tc.want.Prompts = 1
			}
			got := prompt.Scanner{}.Bound([]byte(tc.body), tc.format)
			got.Tokens = 0
			if got != tc.want {
				t.Errorf("Ask = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPromptBoundDoesNotAllocate(t *testing.T) {
	for _, fx := range boundFixtures {
		body := readFixture(t, fx.file)
		if n := testing.AllocsPerRun(100, func() { promptBound(body, fx.format) }); n != 0 {
			t.Errorf("%s: %.1f allocations", fx.file, n)
		}
	}
}

// TestPromptBoundMatchesDecoder compares the byte scan with a reference
// that decodes the body with encoding/json and applies the documented rule,
// on the fixtures and on random bodies.
func TestPromptBoundMatchesDecoder(t *testing.T) {
	t.Parallel()
	for _, fx := range boundFixtures {
		checkReference(t, readFixture(t, fx.file), fx.format)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		checkReference(t, randomBody(rng), rowBodies[rng.IntN(len(rowBodies))])
	}
}

func FuzzPromptBound(f *testing.F) {
	for _, fx := range boundFixtures {
		f.Add(readFixture(f, fx.file), uint8(0))
	}
	f.Add([]byte(`{"messages":[{"content":"\ud800\udc00\ud800x"}],"n":"7"}`), uint8(0))
	f.Add([]byte(`{"input":[{"type":"input_image","image_url":"x"}],"tools":[{"type":"x"}]}`), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, format uint8) {
		a := prompt.Scanner{}.Bound(body, rowBodies[int(format)%len(rowBodies)]) // must not panic on anything
		if a.Tokens < 32 {
			t.Fatalf("bound %d below the request allowance", a.Tokens)
		}
		if json.Valid(body) {
			checkReference(t, body, rowBodies[int(format)%len(rowBodies)])
		}
	})
}

func checkReference(t *testing.T, body []byte, f prompt.Body) {
	t.Helper()
	want, err := referenceAsk(body, f)
	if err != nil {
		return // not an object: the server refuses it first
	}
	got := prompt.Scanner{}.Bound(body, f)
	if got.Tokens != want.Tokens || got.Unbounded != want.Unbounded {
		t.Fatalf("body %s (row %+v): scan %+v, reference %+v", body, f, got, want)
	}
}

// The rows' prompt columns.
var (
	opChat        = request.ChatCompletions.Prompt()
	opCompletions = request.Completions.Prompt()
	opEmbeddings  = request.Embeddings.Prompt()
	opResponses   = request.Responses.Prompt()
	opMessages    = request.Messages.Prompt()
	// rowBodies is every row's, for the random bodies; the Messages
	// API's sources are TestBoundProperty's.
	rowBodies = []prompt.Body{opChat, opCompletions, opEmbeddings, opResponses}
)

// promptBound is the bound alone: the tests and fuzzers read it; the
// gateway reads the whole Bound.
func promptBound(body []byte, b prompt.Body) int {
	return int(prompt.Scanner{}.Bound(body, b).Tokens)
}

// referenceAsk is the documented rule over encoding/json's tokens.
func referenceAsk(body []byte, f prompt.Body) (prompt.Bound, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return prompt.Bound{}, errors.New("not an object")
	}
	r := &ref{dec: dec}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return prompt.Bound{}, err
		}
		key := tok.(string)
		switch lk := asciiLower(key); {
		case lk == "tools":
			r.n += int64(len(key))
			tok, _ := dec.Token()
			if tok != json.Delim('[') {
				r.scalarOrOpen(tok, true)
				break
			}
			for dec.More() {
				if typ := r.value(true); typ != "function" && typ != "custom" && typ != "scalar" && typ != "null" {
					r.unbounded = true
				}
			}
			_, _ = dec.Token()
		case oneOf(lk, f.Never...):
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return prompt.Bound{}, err
			}
		case oneOf(lk, f.Prompt...):
			r.value(false)
		case oneOf(lk, f.Unbounded...):
			r.n += int64(len(key))
			if r.value(true) != "null" {
				r.unbounded = true
			}
		default:
			r.n += int64(len(key))
			r.value(true)
		}
	}
	return prompt.Bound{Tokens: r.n + 32 + r.images*prompt.DefaultImageTokens + r.media*prompt.DefaultMediaTokens, Unbounded: r.unbounded}, r.err
}

type ref struct {
	dec              *json.Decoder
	n, images, media int64
	unbounded        bool
	err              error
}

// value counts one value; it returns an object's "type" string ("" when it
// has none), "scalar" for a scalar and "null" for null.
func (r *ref) value(keys bool) string {
	tok, err := r.dec.Token()
	if err != nil {
		r.err = err
		return ""
	}
	return r.scalarOrOpen(tok, keys)
}

func (r *ref) scalarOrOpen(tok json.Token, keys bool) string {
	switch v := tok.(type) {
	case string:
		r.n += int64(len(v)) + 1
	case json.Number:
		r.n += int64(len(v))
	case bool:
		r.n += int64(len(fmt.Sprint(v)))
	case nil:
		r.n += 4
		return "null"
	case json.Delim:
		if v == '[' {
			for r.dec.More() {
				r.value(keys)
			}
			_, _ = r.dec.Token()
			return "scalar" // not an object: no type
		}
		typ, image, media := "", false, false
		for r.dec.More() {
			kt, _ := r.dec.Token()
			key := kt.(string)
			if keys {
				r.n += int64(len(key))
			} else if oneOf(key, "image_url", "file", "file_data", "video_url", "audio_url", "input_audio", "image_embeds") {
				switch key {
				case "image_url":
					image = true
				case "file", "file_data":
					media, r.unbounded = true, true
				default:
					media = true
				}
				var raw json.RawMessage
				_ = r.dec.Decode(&raw)
				continue
			}
			vt, _ := r.dec.Token()
			s, isString := vt.(string)
			r.scalarOrOpen(vt, keys)
			if key == "type" && isString {
				typ = s
				if !keys {
					switch s {
					case "image_url", "input_image", "image":
						image = true
					case "video_url", "audio_url", "input_audio", "image_embeds", "video", "audio":
						media = true
					case "file", "input_file":
						media, r.unbounded = true, true
					}
				}
			}
		}
		_, _ = r.dec.Token()
		r.n += 4
		if image {
			r.images++
		} else if media {
			r.media++
		}
		return typ
	}
	return "scalar"
}

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// randomBody builds a random request-shaped JSON object: known and unknown
// members, nested parts, escapes, non-ASCII and invalid UTF-8.
func randomBody(rng *rand.Rand) []byte {
	var b bytes.Buffer
	keys := []string{"model", "messages", "input", "prompt", "tools", "n", "max_tokens", "temperature",
		"metadata", "response_format", "previous_response_id", "Stream", "x", "type", "image_url", "file", "text", "content", "role"}
	var value func(depth int)
	str := func() {
		b.WriteByte('"')
		for range rng.IntN(12) {
			switch rng.IntN(12) {
			case 0:
				b.WriteString(`\n`)
			case 1:
				fmt.Fprintf(&b, `\u%04x`, rng.IntN(0x10000))
			case 2:
				b.WriteString("é€😀")
			case 3:
				b.WriteByte(0xff)
			case 4:
				b.WriteString(`\"`)
			case 5:
				b.WriteString([]string{"image_url", "input_image", "file", "function", "web_search", "input_im\\u0061ge", "video_url", "input_audio"}[rng.IntN(8)])
			default:
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		b.WriteByte('"')
	}
	value = func(depth int) {
		switch k := rng.IntN(7); {
		case k == 0 || depth > 4:
			str()
		case k == 1:
			fmt.Fprint(&b, []string{"12", "-3.5e2", "true", "false", "null", "0"}[rng.IntN(6)])
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
			b.WriteByte('{')
			for i := range rng.IntN(4) {
				if i > 0 {
					b.WriteString(", ")
				}
				if rng.IntN(3) == 0 {
					str()
				} else {
					fmt.Fprintf(&b, "%q", keys[rng.IntN(len(keys))])
				}
				b.WriteString(" : ")
				value(depth + 1)
			}
			b.WriteByte('}')
		}
	}
	b.WriteByte('{')
	for i := range rng.IntN(6) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", keys[rng.IntN(len(keys))])
		value(0)
	}
	b.WriteByte('}')
	return b.Bytes()
}
