package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
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
		{name: "unrelated keys", body: `{"model":"m","messages":[],"temperature":1,"MaxTokens":3,"a_very_long_unrelated_key_name_beyond_32":1}`, model: "m"},
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
}

// FuzzOneReading is the differential proof: for any body the gateway
// accepts, its reading of model, stream and include_usage equals what
// encoding/json reads from the body it forwards, under first-wins,
// last-wins and case-insensitive key precedence.
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
	} {
		f.Add(s, "", false)
		f.Add(s, "renamed", true)
	}
	f.Fuzz(func(t *testing.T, body, rename string, inject bool) {
		b, err := ParseBody([]byte(body))
		if err != nil || !utf8.ValidString(rename) { // renames come from validated config
			return
		}
		out := b.Rewrite(nil, []byte(body), rename, inject)
		want := reading{model: b.Model, stream: b.Stream, includeUsage: b.IncludeUsage || inject}
		if rename != "" {
			want.model = rename
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

// readCaseInsensitive is encoding/json's own struct decoding: keys match
// fields case-insensitively, the last match wins.
func readCaseInsensitive(raw []byte) (reading, error) {
	var v struct {
		Model         string
		Stream        json.RawMessage
		StreamOptions *struct {
			IncludeUsage json.RawMessage `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return reading{}, err
	}
	r := reading{model: v.Model, stream: string(v.Stream) == "true"}
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
