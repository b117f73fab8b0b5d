package stub

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
)

// DefaultDimensions is the length of an embedding when the request names
// no dimensions; MaxDimensions is the most a request may ask for.
const (
	DefaultDimensions = 8
	MaxDimensions     = 4096
)

// embeddingsRequest is the part of an embeddings request the stub reads.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embeddingInput is one input to embed: what its vector is drawn from, and
// its estimated tokens.
type embeddingInput struct {
	key    []byte
	tokens int
}

// errBadInput is the 400 for an input that is none of OpenAI's four shapes.
var errBadInput = errors.New("stub: input must be a string, an array of strings, an array of token integers, or an array of arrays of token integers")

// embeddingInputs reads OpenAI's four input shapes: a string, an array of
// strings, an array of token integers (one input), or an array of such
// arrays. A string counts max(len/4, 1) tokens, a token array its length.
func embeddingInputs(raw json.RawMessage) ([]embeddingInput, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("stub: missing required parameter 'input'")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []embeddingInput{textInput(text)}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, errBadInput
	}
	var tokens []int64
	if json.Unmarshal(raw, &tokens) == nil {
		return []embeddingInput{tokenInput(tokens)}, nil
	}
	// A list of strings or a list of token lists, not a mix.
	strs := bytes.HasPrefix(bytes.TrimSpace(list[0]), []byte(`"`))
	inputs := make([]embeddingInput, 0, len(list))
	for _, item := range list {
		switch {
		case strs && json.Unmarshal(item, &text) == nil:
			inputs = append(inputs, textInput(text))
		case !strs && json.Unmarshal(item, &tokens) == nil && len(tokens) > 0:
			inputs = append(inputs, tokenInput(tokens))
		default:
			return nil, errBadInput
		}
	}
	return inputs, nil
}

func textInput(s string) embeddingInput {
	return embeddingInput{key: append([]byte("text:"), s...), tokens: max(len(s)/4, 1)}
}

func tokenInput(tokens []int64) embeddingInput {
	key := []byte("tokens:")
	for _, t := range tokens {
		key = strconv.AppendInt(append(key, ','), t, 10)
	}
	return embeddingInput{key: key, tokens: len(tokens)}
}

// embedding is the unit vector of length dims drawn from key: the same
// input always gets the same vector.
func embedding(key []byte, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write(key)
	state := h.Sum64()
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		// splitmix64: a fixed, well-mixed sequence from one seed.
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		v[i] = float64(z>>11)/(1<<53)*2 - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// embeddings answers with one deterministic unit vector per input, as
// JSON floats or, for encoding_format "base64", as base64 of the
// little-endian float32s (what OpenAI sends, and what the openai npm SDK
// asks for by default and decodes).
func (s *Server) embeddings(w http.ResponseWriter, body []byte, rt route) {
	var req embeddingsRequest
	if !decodeJSON(w, body, &req) {
		return
	}
	inputs, err := embeddingInputs(req.Input)
	if err != nil {
		writeParamError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "input", "")
		return
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		writeParamError(w, http.StatusBadRequest, "stub: encoding_format must be float or base64, got "+strconv.Quote(req.EncodingFormat),
			"invalid_request_error", "encoding_format", "")
		return
	}
	dims := DefaultDimensions
	if req.Dimensions != nil {
		dims = *req.Dimensions
		if dims < 1 || dims > MaxDimensions {
			writeParamError(w, http.StatusBadRequest, "stub: dimensions must be 1 to "+strconv.Itoa(MaxDimensions)+", got "+strconv.Itoa(dims),
				"invalid_request_error", "dimensions", "")
			return
		}
	}
	prompt := s.opts.PromptTokens
	if prompt <= 0 {
		prompt = 0
		for _, in := range inputs {
			prompt += in.tokens
		}
	}
	b64 := req.EncodingFormat == "base64"
	out := make([]byte, 0, 64+len(inputs)*(48+dims*12))
	out = append(out, `{"object":"list","data":[`...)
	var raw []byte
	for i, in := range inputs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		vec := embedding(in.key, dims)
		if b64 {
			raw = raw[:0]
			for _, x := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
			}
			out = append(out, '"')
			out = base64.StdEncoding.AppendEncode(out, raw)
			out = append(out, '"', '}')
			continue
		}
		out = append(out, '[')
		for d, x := range vec {
			if d > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendFloat(out, float64(x), 'g', -1, 32)
		}
		out = append(out, "]}"...)
	}
	out = append(out, `],"model":`...)
	out = appendJSONString(out, s.modelOf(req.Model, rt))
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(prompt), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(prompt), 10)
	out = append(out, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
