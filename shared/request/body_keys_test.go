package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"unicode/utf8"
)

// TestParseBodyOneReading: bodies that two JSON readers would read
// differently are refused with the key named; escaped spellings of the
// exact key are read as that key.
func TestParseBodyOneReading(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		param     string // "" = accepted
		duplicate bool
		model     string
		stream    bool
	}{
		{name: "escaped duplicate model", body: `{"model":"gpt-4o-mini","messages":[],"mod\u0065l":"gpt-4o-prod"}`, param: "model", duplicate: true},
		{name: "plain duplicate model", body: `{"model":"gpt-4o","messages":[],"model":"gpt-4o-mini"}`, param: "model", duplicate: true},
		{name: "case variant beside model", body: `{"model":"gpt-4o-mini","Model":"gpt-4o","messages":[]}`, param: "model", duplicate: true},
		{name: "case variant alone", body: `{"MODEL":"gpt-4o","messages":[]}`, param: "model"},
		{name: "kelvin sign in stream", body: `{"model":"m","messages":[],"stream":false,"ſtream":true}`, param: "stream", duplicate: true},
		{name: "escaped stream alone is stream", body: `{"model":"m","messages":[],"stre\u0061m":true}`, model: "m", stream: true},
		{name: "escaped model alone is model", body: `{"\u006dodel":"m","messages":[]}`, model: "m"},
		{name: "stream twice", body: `{"model":"m","stream":true,"messages":[],"stream":false}`, param: "stream", duplicate: true},
		{name: "stream_options twice", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":null}`, param: "stream_options", duplicate: true},
		{name: "stream options dash variant", body: `{"model":"m","stream-options":{}}`, param: "stream_options"},
		{name: "include_usage twice", body: `{"model":"m","stream_options":{"include_usage":false,"include_usag\u0065":true}}`, param: "stream_options.include_usage", duplicate: true},
		{name: "include_usage variant", body: `{"model":"m","stream_options":{"Include_Usage":true}}`, param: "stream_options.include_usage"},
		{name: "nested keys are not ours", body: `{"model":"m","messages":[{"model":"x","Model":"y","stream":1}],"metadata":{"model":"z"}}`, model: "m"},
		{name: "messages twice is the backend's business", body: `{"model":"m","messages":[],"messages":[]}`, model: "m"},
		{name: "unrelated keys", body: `{"model":"m","messages":[],"temperature":1,"MaxTokenz":3,"a_very_long_unrelated_key_name_beyond_32":1}`, model: "m"},
		{name: "max_tokens twice", body: `{"model":"m","max_tokens":10,"max_tok\u0065ns":100000}`, param: "max_tokens", duplicate: true},
		{name: "camel-case cap variant", body: `{"model":"m","maxTokens":100000}`, param: "max_tokens"},
		{name: "cap variant beside the cap", body: `{"model":"m","max_completion_tokens":5,"Max_Completion_Tokens":100000}`, param: "max_completion_tokens", duplicate: true},
		{name: "n variant", body: `{"model":"m","n":1,"N":128}`, param: "n", duplicate: true},
		{name: "best_of twice", body: `{"model":"m","prompt":"x","best_of":1,"best_of":20}`, param: "best_of", duplicate: true},
		{name: "max_output_tokens dash variant", body: `{"model":"m","max-output-tokens":10}`, param: "max_output_tokens"},
		{name: "nested caps are not ours", body: `{"model":"m","metadata":{"max_tokens":"x","N":1},"messages":[]}`, model: "m"},
		{name: "long underscored variant", body: `{"model":"m","m________________________________o_d_e_l":"x"}`, param: "model", duplicate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBody([]byte(tt.body))
			var ke *KeyError
			if tt.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if b.Model != tt.model || b.Stream != tt.stream {
					t.Fatalf("read model %q stream %v, want %q %v", b.Model, b.Stream, tt.model, tt.stream)
				}
				return
			}
			if !errors.As(err, &ke) {
				t.Fatalf("err = %v, want a KeyError for %s", err, tt.param)
			}
			if ke.Param != tt.param || ke.Duplicate != tt.duplicate {
				t.Fatalf("KeyError %+v, want param %s duplicate %v", ke, tt.param, tt.duplicate)
			}
		})
	}
}

// TestRewriteEscapedModel: a model the gateway read from an escaped
// spelling reaches the backend in its plain spelling, even when the target
// keeps the client's model.
func TestRewriteEscapedModel(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-mini\ud800","messages":[]}`)
	b, err := ParseBody(body)
	if err != nil {
		t.Fatal(err)
	}
	out := b.Rewrite(nil, body, "", false)
	var got struct{ Model string }
	if err := json.Unmarshal(out, &got); err != nil || got.Model != b.Model {
		t.Fatalf("forwarded %s reads model %q, gateway read %q", out, got.Model, b.Model)
	}
	if bytes.Contains(out, []byte(`\ud800`)) {
		t.Fatalf("escape forwarded: %s", out)
	}
}

// reading is what a reader makes of the fields the gateway decides on.
type reading struct {
	model        string
	stream       bool
	includeUsage bool
	n, bestOf    int64
	caps         [numCaps]int64 // 0: absent or null
}

// FuzzOneReading is the differential proof: for any body the gateway
// accepts, its reading of model, stream, include_usage, n, best_of and the
// output caps, with the rewrite's changes applied, equals what
// encoding/json reads from the body it forwards, under first-wins,
// last-wins and case-insensitive key precedence. With an output cap, that
// means every decoder reads every cap field at or below it.
func FuzzOneReading(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","messages":[],"mod\u0065l":"gpt-4o-prod"}`,
		`{"model":"gpt-4o","messages":[],"model":"gpt-4o-mini"}`,
		`{"Model":"a","model":"b"}`,
		`{"model":"m","stre\u0061m":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","stream":true,"stream":false}`,
		`{"model":"m","stream_options":{"include_usage":true},"stream_options":null}`,
		`{"model":"m","stream_options":{"INCLUDE_USAGE":true,"include_usage":false}}`,
		`{"model":"a\u0000b","stream":null,"messages":[{"model":"x"}]}`,
		`{"model":"\ud83d\ude00","stream":true,"ſtream":false}`,
		`{"model":1}`, `{"model":"m","stream":"true"}`, `[]`, `{"model":"m"`,
		"{\"model\":\"\xff\",\"prompt\":\"x\"}",
		`{"model":"m","max_tokens":100,"max_tok\u0065ns":5}`,
		`{"model":"m","max_completion_tokens":null,"n":2,"messages":[]}`,
		`{"model":"m","max_tokens":300,"max_completion_tokens":20,"N":3}`,
		`{"model":"m","max_output_tokens":1e3}`,
		`{"model":"m","best_of":4,"prompt":"x","max_tokens":"7"}`,
		`{"max_output_tokens":9007199254740993,"model":"m"}`,
		`{"model":"m","max_tool_calls":1000,"max_tool_c\u0061lls":1,"service_tier":"flex"}`,
		`{"model":"m","service_tier":"default","Service_Tier":"priority"}`,
	} {
		f.Add(s, "", false, int64(0), uint8(0))
		f.Add(s, "renamed", true, int64(50), uint8(1))
	}
	f.Fuzz(func(t *testing.T, body, rename string, inject bool, outCap int64, field uint8) {
		b, err := ParseBody([]byte(body))
		if err != nil || !utf8.ValidString(rename) { // renames come from validated config
			return
		}
		if outCap < 0 || outCap > maxCount { // caps come from budget.Ledger: positive, at most 2^53
			outCap = 0
		}
		cf := CapField(field % uint8(numCaps))
		out := b.RewriteWith(nil, []byte(body), Changes{Model: rename, InjectUsage: inject, OutputCap: outCap, CapField: cf})
		want := reading{model: b.Model, stream: b.Stream, includeUsage: b.IncludeUsage || inject, n: b.N, bestOf: b.BestOf, caps: b.Caps}
		if rename != "" {
			want.model = rename
		}
		if outCap > 0 {
			for f := range want.caps {
				if b.caps[f].end > 0 && (want.caps[f] == 0 || want.caps[f] > outCap) {
					want.caps[f] = outCap
				}
			}
			if b.caps[cf].end == 0 { // the field the backend reads is always written
				want.caps[cf] = outCap
			}
		}
		for name, read := range map[string]func([]byte) (reading, error){
			"first-wins": readFirstWins, "last-wins": readLastWins, "case-insensitive": readCaseInsensitive,
		} {
			got, err := read(out)
			if err != nil {
				t.Fatalf("%s cannot read the forwarded body %q: %v", name, out, err)
			}
			if got != want {
				t.Fatalf("%s reads %+v from the forwarded body %q, the gateway read %+v (client sent %q)", name, got, out, want, body)
			}
		}
	})
}

// members lists an object's members in order, keys unescaped.
func members(raw []byte) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, nil, err
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, tok.(string)), append(vals, v)
	}
	return keys, vals, nil
}

func pick(raw []byte, key string, first bool) (json.RawMessage, error) {
	keys, vals, err := members(raw)
	var got json.RawMessage
	for i, k := range keys {
		if k == key {
			got = vals[i]
			if first {
				break
			}
		}
	}
	return got, err
}

func readPrecedence(raw []byte, first bool) (reading, error) {
	var r reading
	m, err := pick(raw, "model", first)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(m, &r.model); err != nil {
		return r, err
	}
	s, _ := pick(raw, "stream", first)
	r.stream = string(s) == "true"
	for f, name := range capNames {
		v, _ := pick(raw, name, first)
		if r.caps[f], err = readCount(v); err != nil {
			return r, err
		}
	}
	nv, _ := pick(raw, "n", first)
	if r.n, err = readCount(nv); err != nil {
		return r, err
	}
	bv, _ := pick(raw, "best_of", first)
	if r.bestOf, err = readCount(bv); err != nil {
		return r, err
	}
	if o, _ := pick(raw, "stream_options", first); len(o) > 0 && o[0] == '{' {
		iu, err := pick(o, "include_usage", first)
		if err != nil {
			return r, err
		}
		r.includeUsage = string(iu) == "true"
	}
	return r, nil
}

func readFirstWins(raw []byte) (reading, error) { return readPrecedence(raw, true) }
func readLastWins(raw []byte) (reading, error)  { return readPrecedence(raw, false) }

// readCount reads a count as a decoder into an integer field does: absent
// and null are 0; values beyond 2^53 read as 2^53 (the gateway's
// saturation; decoders would read them exactly or refuse them).
func readCount(v json.RawMessage) (int64, error) {
	if len(v) == 0 {
		return 0, nil
	}
	var n *json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, err
	}
	if n == nil {
		return 0, nil
	}
	u, err := strconv.ParseUint(n.String(), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return maxCount, nil
	}
	return int64(min(u, maxCount)), err
}

// readCaseInsensitive is encoding/json's own struct decoding: keys match
// fields case-insensitively, the last match wins.
func readCaseInsensitive(raw []byte) (reading, error) {
	var v struct {
		Model         string
		Stream        json.RawMessage
		StreamOptions *struct {
			IncludeUsage json.RawMessage `json:"include_usage"`
		} `json:"stream_options"`
		N                   json.RawMessage `json:"n"`
		BestOf              json.RawMessage `json:"best_of"`
		MaxTokens           json.RawMessage `json:"max_tokens"`
		MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
		MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return reading{}, err
	}
	r := reading{model: v.Model, stream: string(v.Stream) == "true"}
	var err error
	for i, raw := range []json.RawMessage{v.MaxTokens, v.MaxCompletionTokens, v.MaxOutputTokens, v.N, v.BestOf} {
		dst := &r.n
		switch {
		case i < int(numCaps):
			dst = &r.caps[i]
		case i == 4:
			dst = &r.bestOf
		}
		if *dst, err = readCount(raw); err != nil {
			return r, err
		}
	}
	if v.StreamOptions != nil {
		r.includeUsage = string(v.StreamOptions.IncludeUsage) == "true"
	}
	return r, nil
}

func TestWithModel(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"replaces", `{"model":"a","messages":[]}`, `{"model":"dep","messages":[]}`},
		{"inserts first", `{"messages":[]}`, `{"model":"dep","messages":[]}`},
		{"empty object", `{ }`, `{"model":"dep" }`},
		{"empty model", `{"model":"","input":"x"}`, `{"model":"dep","input":"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithModel(nil, []byte(tt.body), "dep")
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := WithModel(nil, []byte(`{"model":"a","Model":"b"}`), "dep"); err == nil {
		t.Fatal("a body with a model variant was accepted")
	}
}
