package stub

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// embeddingsList is OpenAI's embeddings answer, each vector left raw: a
// JSON array of floats, or a base64 string.
type embeddingsList struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors decodes every embedding as the SDKs do: a float array as is, a
// base64 string as little-endian float32s.
func (l embeddingsList) vectors(t *testing.T) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, d := range l.Data {
		var v []float32
		var s string
		switch {
		case json.Unmarshal(d.Embedding, &s) == nil:
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("base64 embedding %q: %v", s, err)
			}
			for i := 0; i < len(raw); i += 4 {
				v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
			}
		case json.Unmarshal(d.Embedding, &v) == nil:
		default:
			t.Fatalf("embedding is neither floats nor base64: %s", d.Embedding)
		}
		out = append(out, v)
	}
	return out
}

func postEmbeddings(t *testing.T, ts *httptest.Server, body string) embeddingsList {
	t.Helper()
	resp := mustPost(t, ts, "/v1/embeddings", body)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var l embeddingsList
	decodeStrict(t, string(b), &l)
	if l.Object != "list" {
		t.Fatalf("object %q: %s", l.Object, b)
	}
	for i, d := range l.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Fatalf("item %d: object %q index %d", i, d.Object, d.Index)
		}
	}
	return l
}

func TestEmbeddingsInputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		input  string
		n      int
		prompt int // usage.prompt_tokens
	}{
		{"string", `"hello world, twice"`, 1, 4},
		{"short string", `"a"`, 1, 1},
		{"strings", `["a","bb","hello world!"]`, 3, 1 + 1 + 3},
		{"tokens", `[1,2,3,4,5]`, 1, 5},
		{"arrays of tokens", `[[1,2],[3,4,5],[6]]`, 3, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			var float, b64 [][]float32
			for _, format := range []string{``, `,"encoding_format":"float"`, `,"encoding_format":"base64"`} {
				l := postEmbeddings(t, ts, `{"model":"e","input":`+tc.input+format+`}`)
				if len(l.Data) != tc.n || l.Usage.PromptTokens != tc.prompt || l.Usage.TotalTokens != tc.prompt || l.Model != "e" {
					t.Fatalf("%s: %d items, usage %+v, model %q; want %d items, %d tokens", format, len(l.Data), l.Usage, l.Model, tc.n, tc.prompt)
				}
				vs := l.vectors(t)
				if strings.Contains(format, "base64") {
					if l.Data[0].Embedding[0] != '"' {
						t.Fatalf("base64 asked, got %s", l.Data[0].Embedding)
					}
					b64 = vs
				} else {
					if l.Data[0].Embedding[0] != '[' {
						t.Fatalf("floats asked, got %s", l.Data[0].Embedding)
					}
					if float != nil && !equalVectors(float, vs) {
						t.Fatal("the same input got different vectors")
					}
					float = vs
				}
			}
			if !equalVectors(float, b64) {
				t.Fatalf("base64 decodes to %v, floats are %v", b64, float)
			}
			for i, v := range float {
				if len(v) != DefaultDimensions {
					t.Fatalf("vector %d has %d dimensions, want %d", i, len(v), DefaultDimensions)
				}
				var norm float64
				for _, x := range v {
					norm += float64(x) * float64(x)
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Fatalf("vector %d has norm² %v, want a unit vector", i, norm)
				}
				for j := range i {
					if slices.Equal(float[j], v) {
						t.Fatalf("inputs %d and %d got the same vector", j, i)
					}
				}
			}
		})
	}
}

func equalVectors(a, b [][]float32) bool {
	return slices.EqualFunc(a, b, func(x, y []float32) bool { return slices.Equal(x, y) })
}

func TestEmbeddingsDeterministic(t *testing.T) {
	t.Parallel()
	// Two stubs, so the vector can depend on nothing but the input.
	_, a := start(t, fast)
	_, b := start(t, fast)
	first := postEmbeddings(t, a, `{"model":"e","input":["same","other"]}`).vectors(t)
	again := postEmbeddings(t, b, `{"model":"x","input":"same","encoding_format":"base64"}`).vectors(t)
	if !slices.Equal(first[0], again[0]) {
		t.Fatalf("same input, different vectors: %v and %v", first[0], again[0])
	}
}

func TestEmbeddingsDimensions(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	for _, dims := range []int{1, 3, 256, MaxDimensions} {
		for _, format := range []string{"float", "base64"} {
			l := postEmbeddings(t, ts, `{"model":"e","input":["a","b"],"encoding_format":"`+format+`","dimensions":`+strconv.Itoa(dims)+`}`)
			for i, v := range l.vectors(t) {
				if len(v) != dims {
					t.Fatalf("%s, dimensions %d: vector %d has %d", format, dims, i, len(v))
				}
			}
		}
	}
}

func TestEmbeddingsPromptTokensOption(t *testing.T) {
	t.Parallel()
	opts := fast
	opts.PromptTokens = 42
	_, ts := start(t, opts)
	if l := postEmbeddings(t, ts, `{"input":["a","b"]}`); l.Usage.PromptTokens != 42 || l.Model != DefaultModel {
		t.Fatalf("usage %+v model %q", l.Usage, l.Model)
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, param string }{
		{"no input", `{"model":"e"}`, "input"},
		{"null input", `{"model":"e","input":null}`, "input"},
		{"empty list", `{"model":"e","input":[]}`, "input"},
		{"object", `{"model":"e","input":{"a":1}}`, "input"},
		{"mixed list", `{"model":"e","input":["a",[1]]}`, "input"},
		{"floats", `{"model":"e","input":[1.5]}`, "input"},
		{"empty token list", `{"model":"e","input":[[]]}`, "input"},
		{"bad format", `{"model":"e","input":"a","encoding_format":"int8"}`, "encoding_format"},
		{"zero dimensions", `{"model":"e","input":"a","dimensions":0}`, "dimensions"},
		{"too many dimensions", `{"model":"e","input":"a","dimensions":4097}`, "dimensions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			resp := mustPost(t, ts, "/v1/embeddings", tc.body)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			e := errorBody(t, body)
			if tc.param != "" && (e.Param == nil || *e.Param != tc.param) {
				t.Fatalf("param %v, want %s: %s", e.Param, tc.param, body)
			}
		})
	}
}
