package stub

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

func TestProseWordsAreJSONSafe(t *testing.T) {
	t.Parallel()
	wd := newWording(true)
	if len(wd.words) < 20 || len(wd.starts) < 3 {
		t.Fatalf("%d words, %d sentences", len(wd.words), len(wd.starts))
	}
	for _, w := range wd.words {
		q, _ := json.Marshal(w)
		if string(q) != `"`+w+`"` {
			t.Fatalf("word %q needs escaping (%s): the stream templates splice words in raw", w, q)
		}
	}
}

func TestWording(t *testing.T) {
	t.Parallel()
	tok := newWording(false)
	if got := tok.text(tok.seedOf([]byte("x")), 2, 3); got != " tok tok tok" {
		t.Fatalf("default text %q", got)
	}
	if got := (*wording)(nil).word(0, 0, 0); got != tokenText {
		t.Fatalf("nil wording word %q", got)
	}
	wd := newWording(true)
	for seed := range uint64(len(wd.starts)) {
		text := wd.text(seed, 0, len(wd.words))
		if !unicode.IsUpper(rune(text[0])) || !strings.HasSuffix(text, ".") || strings.Contains(text, "  ") {
			t.Fatalf("seed %d: not readable sentences: %q", seed, text)
		}
		if got := len(strings.Fields(text)); got != len(wd.words) {
			t.Fatalf("seed %d: %d words, want one per token (%d)", seed, got, len(wd.words))
		}
		if wd.text(seed, 1, 5) == wd.text(seed, 0, 5) {
			t.Fatalf("seed %d: choices 0 and 1 say the same", seed)
		}
	}
	// Past the end of the text it starts over.
	if long := wd.text(0, 0, 3*len(wd.words)); len(strings.Fields(long)) != 3*len(wd.words) {
		t.Fatalf("long text: %q", long)
	}
}

// choicesOf reads a whole answer, streamed or not, and returns each
// choice's text and finish reason, and the usage.
func choicesOf(t *testing.T, resp *http.Response, chat, stream bool) (texts, finishes []string, u usage) {
	t.Helper()
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	grow := func(i int) {
		for len(texts) <= i {
			texts, finishes = append(texts, ""), append(finishes, "")
		}
	}
	if !stream {
		var c struct {
			Choices []struct {
				Index        int      `json:"index"`
				Message      *message `json:"message"`
				Text         *string  `json:"text"`
				FinishReason string   `json:"finish_reason"`
			} `json:"choices"`
			Usage usage `json:"usage"`
		}
		decodeStrict(t, string(body), &c)
		for i, ch := range c.Choices {
			if ch.Index != i {
				t.Fatalf("choice %d has index %d", i, ch.Index)
			}
			grow(i)
			switch {
			case chat && ch.Message != nil && ch.Message.Role == "assistant" && ch.Message.Content != nil:
				texts[i] = *ch.Message.Content
			case !chat && ch.Text != nil:
				texts[i] = *ch.Text
			default:
				t.Fatalf("choice %d: %s", i, body)
			}
			finishes[i] = ch.FinishReason
		}
		return texts, finishes, c.Usage
	}
	data, err := newSSE(strings.NewReader(string(body))).all()
	if err != nil || len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream %v: %q", err, data)
	}
	roles := map[int]bool{}
	for _, d := range data[:len(data)-1] {
		var c chunk
		decodeStrict(t, d, &c)
		if c.Usage != nil {
			u = *c.Usage
			continue
		}
		if len(c.Choices) != 1 {
			t.Fatalf("chunk with %d choices: %s", len(c.Choices), d)
		}
		ch := c.Choices[0]
		grow(ch.Index)
		if finishes[ch.Index] != "" {
			t.Fatalf("chunk after choice %d finished: %s", ch.Index, d)
		}
		switch {
		case ch.FinishReason != nil:
			finishes[ch.Index] = *ch.FinishReason
		case chat && ch.Delta != nil && ch.Delta.Role != nil:
			if roles[ch.Index] || texts[ch.Index] != "" {
				t.Fatalf("second or late role chunk: %s", d)
			}
			roles[ch.Index] = true
		case chat && ch.Delta != nil && ch.Delta.Content != nil:
			if !roles[ch.Index] {
				t.Fatalf("content before the role chunk: %s", d)
			}
			texts[ch.Index] += *ch.Delta.Content
		case !chat && ch.Text != nil:
			texts[ch.Index] += *ch.Text
		default:
			t.Fatalf("unexpected chunk: %s", d)
		}
	}
	return texts, finishes, u
}

func TestChoicesAndProse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		path   string
		n      int // 0: no n in the request
		prose  bool
		stream bool
	}{
		{"chat n=3", "/v1/chat/completions", 3, false, false},
		{"chat n=3 stream", "/v1/chat/completions", 3, false, true},
		{"chat prose", "/v1/chat/completions", 0, true, false},
		{"chat prose stream", "/v1/chat/completions", 0, true, true},
		{"chat prose n=2 stream", "/v1/chat/completions", 2, true, true},
		{"azure chat prose n=2", "/openai/deployments/d/chat/completions?api-version=1", 2, true, false},
		{"completions n=2", "/v1/completions", 2, false, false},
		{"completions n=2 stream", "/v1/completions", 2, false, true},
		{"completions prose n=3 stream", "/v1/completions", 3, true, true},
		{"completions prose", "/v1/completions", 1, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := fast
			opts.Tokens, opts.Prose = 7, tc.prose
			st, ts := start(t, opts)
			chat := strings.Contains(tc.path, "chat")
			body := `{"model":"m","user":"user-1234","stream":` + strconv.FormatBool(tc.stream) +
				`,"stream_options":` + map[bool]string{true: `{"include_usage":true}`, false: "null"}[tc.stream]
			if tc.n > 0 {
				body += `,"n":` + strconv.Itoa(tc.n)
			}
			if chat {
				body += `,"messages":[{"role":"user","content":"hi"}]}`
			} else {
				body += `,"prompt":"hi"}`
			}
			texts, finishes, u := choicesOf(t, mustPost(t, ts, tc.path, body), chat, tc.stream)
			n := max(tc.n, 1)
			if len(texts) != n {
				t.Fatalf("%d choices, want %d", len(texts), n)
			}
			if u.CompletionTokens != n*7 || u.TotalTokens != u.PromptTokens+n*7 || u.PromptTokens < 1 {
				t.Fatalf("usage %+v, want %d completion tokens", u, n*7)
			}
			seed := st.wording.seedOf([]byte(body))
			for c := range n {
				if want := st.wording.text(seed, c, 7); texts[c] != want {
					t.Errorf("choice %d says %q, want %q", c, texts[c], want)
				}
				if finishes[c] != "stop" {
					t.Errorf("choice %d finish %q", c, finishes[c])
				}
				if tc.prose && (strings.Contains(texts[c], "tok") || !unicode.IsUpper(rune(texts[c][0]))) {
					t.Errorf("choice %d is not prose: %q", c, texts[c])
				}
				if !tc.prose && texts[c] != strings.Repeat(" tok", 7) {
					t.Errorf("choice %d: %q", c, texts[c])
				}
			}
			// The same request gets the same answer.
			again, _, _ := choicesOf(t, mustPost(t, ts, tc.path, body), chat, tc.stream)
			if strings.Join(again, "|") != strings.Join(texts, "|") {
				t.Fatalf("same request, different text: %q then %q", texts, again)
			}
		})
	}
}

func TestChoicesMaxTokens(t *testing.T) {
	t.Parallel()
	opts := fast
	opts.Prose = true
	_, ts := start(t, opts)
	body := `{"model":"m","n":2,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	texts, finishes, u := choicesOf(t, mustPost(t, ts, "/v1/chat/completions", body), true, true)
	for c := range 2 {
		if len(strings.Fields(texts[c])) != 3 || finishes[c] != "length" {
			t.Fatalf("choice %d: %q finish %q", c, texts[c], finishes[c])
		}
	}
	if u.CompletionTokens != 6 {
		t.Fatalf("usage %+v", u)
	}
}

func TestChoicesBadN(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"0", "-1", "129"} {
		t.Run(n, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m","n":`+n+`}`)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if e := errorBody(t, body); e.Param == nil || *e.Param != "n" {
				t.Fatalf("error %s", body)
			}
		})
	}
}

// TestChoicesStreamOrder pins the interleaving and the event count the
// fault counts (DropAfter, ...) refer to: role chunks, then each token
// position for every choice, then the finish chunks.
func TestChoicesStreamOrder(t *testing.T) {
	t.Parallel()
	var tm templates
	tm.render(answer{id: "x", model: "m", chat: true, n: 2, tokens: 2, finish: "stop", includeUsage: true})
	var got []string
	for i := range tm.count() {
		ev, c, k := tm.at(i)
		got = append(got, strconv.Itoa(int(ev))+":"+strconv.Itoa(c)+":"+strconv.Itoa(k))
	}
	want := "0:0:0 0:1:0 1:0:0 1:1:0 1:0:1 1:1:1 2:0:0 2:1:0 3:0:0 4:0:0"
	if strings.Join(got, " ") != want {
		t.Fatalf("events (kind:choice:token)\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}
