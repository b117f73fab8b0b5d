package sse

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
)

// Realistic upstream chunks, as OpenAI and vLLM send them.
const (
	chunkContent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}` + "\n\n"
	chunkUsage   = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":400,"completion_tokens":128,"total_tokens":528}}` + "\n\n"
	chunkDone    = "data: [DONE]\n\n"
	chunkAzure   = `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}` + "\n\n"
	chunkVLLM    = `data: {"id":"cmpl-2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" x"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3}}` + "\n\n"
)

// openAIStream is a realistic stream: n content chunks, the usage-only
// chunk that include_usage adds, and [DONE].
func openAIStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-9zX","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" token%d"},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-9zX","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":400,"completion_tokens":128,"total_tokens":528,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n")
	b.WriteString(chunkDone)
	return b.Bytes()
}

// responsesStream is a Responses API stream: response.created, n text
// deltas, response.completed with usage; named events and no [DONE].
func responsesStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-4o-mini\",\"output\":[],\"usage\":null}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\" token%d\",\"logprobs\":[]}\n\n", i+1, i)
	}
	fmt.Fprintf(&b, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":%d,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"input_tokens\":400,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%d}}}\n\n", n+1, n, 400+n)
	return b.Bytes()
}

// messagesStream is an Anthropic Messages API stream: message_start
// (input and cache counts), a text block of n deltas, ping, message_delta
// (output) and message_stop; named events and no [DONE].
func messagesStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":200,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token%d\"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprintf(&b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", n)
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

// refEventEnd is EventEnd written the obvious way, one byte at a time, as
// the oracle for tests and fuzzing.
func refEventEnd(b []byte, atEOF bool) (int, bool) {
	lineStart := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\r' && c != '\n' {
			continue
		}
		next := i + 1
		if c == '\r' {
			if i+1 == len(b) && !atEOF {
				return 0, false
			}
			if i+1 < len(b) && b[i+1] == '\n' {
				next = i + 2
			}
		}
		if i == lineStart {
			return next, true
		}
		lineStart = next
		i = next - 1
	}
	return 0, false
}

// refEvents splits a whole stream into its complete events and the
// incomplete rest.
func refEvents(b []byte) (events [][]byte, rest []byte) {
	for len(b) > 0 {
		n, ok := refEventEnd(b, true)
		if !ok {
			break
		}
		events = append(events, b[:n])
		b = b[n:]
	}
	return events, b
}

// chunkReader returns src in reads whose sizes come from sizes (cycled);
// a size of 0 is an empty read.
type chunkReader struct {
	src   []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.src) == 0 {
		return 0, io.EOF
	}
	n := len(r.src)
	if len(r.sizes) > 0 {
		n = r.sizes[r.i%len(r.sizes)]
		r.i++
	}
	n = min(n, len(p), len(r.src))
	copy(p, r.src[:n])
	r.src = r.src[n:]
	return n, nil
}

func randomSizes(seed uint64, count, maxSize int) []int {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := make([]int, count)
	for i := range s {
		s[i] = 1 + rng.IntN(maxSize)
	}
	return s
}

// eventReader returns one event per Read, as a network connection does
// when tokens are far apart.
type eventReader struct {
	events [][]byte
	i      int
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.i == len(r.events) {
		return 0, io.EOF
	}
	n := copy(p, r.events[r.i])
	if n == len(r.events[r.i]) {
		r.i++
	} else {
		r.events[r.i] = r.events[r.i][n:]
	}
	return n, nil
}

// recorder is a client: it records every Write and every flush, and can
// report each flush on a channel.
type recorder struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  [][]byte
	flushes int
	flushed chan string // if non-nil, receives the whole output at each flush
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, bytes.Clone(p))
	return r.buf.Write(p)
}

func (r *recorder) Flush() error {
	r.mu.Lock()
	r.flushes++
	out := r.buf.String()
	r.mu.Unlock()
	if r.flushed != nil {
		r.flushed <- out
	}
	return nil
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// shapes are streams whose bytes the client must receive unchanged.
func shapes() map[string][]byte {
	big := "data: " + strings.Repeat("x", 1<<20) + "\n\n"
	bigMulti := strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", 1100) + "\n"
	return map[string][]byte{
		"openai LF":             openAIStream(16),
		"CRLF":                  []byte("data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n"),
		"CR":                    []byte("data: {\"a\":1}\r\rdata: b\r\rdata: [DONE]\r\r"),
		"mixed line ends":       []byte("data: a\r\n\ndata: b\n\r\ndata: c\r\r\ndata: d\r\n\r"),
		"comments":              []byte(": ping\n\n:\n\n: keep-alive\r\n\r\n" + chunkContent + ": ping\n\n" + chunkDone),
		"multi-line data":       []byte("data: {\"a\":\ndata: 1}\n\ndata: line1\r\ndata: line2\r\n\r\n"),
		"event id retry fields": []byte("event: message\nid: 42\nretry: 3000\ndata: {\"x\":1}\n\nevent: error\ndata: {\"error\":{}}\n\nid\n\n"),
		"empty data":            []byte("data:\n\ndata\n\ndata: \n\n"),
		"leading blank lines":   []byte("\n\r\n\r" + chunkContent),
		"azure prefilter":       []byte(chunkAzure + chunkContent + chunkDone),
		"vllm continuous usage": []byte(chunkVLLM + chunkVLLM + chunkDone),
		"1 MiB event":           []byte(chunkContent + big + chunkDone),
		"1 MiB multi-line":      []byte(bigMulti + chunkDone),
		"empty stream":          nil,
		"no DONE":               []byte(chunkContent + chunkContent),
		"non-ASCII and NUL":     []byte("data: {\"c\":\"héllo \u2028 \x00 \xff\"}\n\n"),
	}
}

// The operations table's meters for the named-event streams
// (request.Operation.Meter), which this package cannot import.
var (
	testResponsesMeter = Meter{
		End:   []string{"response.completed", "response.incomplete", "response.failed"},
		Error: "error", TokenSuffix: ".delta",
		Bill:   []string{"response.completed", "response.incomplete", "response.failed"},
		BillAt: InResponse,
		Floor: []string{"response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
			"response.reasoning_summary_text.delta", "response.function_call_arguments.delta"},
	}
	testMessagesMeter = Meter{
		End: []string{"message_stop"}, Error: "error", Tokens: []string{"content_block_delta"},
		Bill: []string{"message_delta"}, BillAt: TopLevel,
		Start: "message_start", StartAt: InMessage,
		Floor:       []string{"content_block_delta"},
		FloorDeltas: []Delta{{Type: "text_delta", Field: "text"}, {Type: "thinking_delta", Field: "thinking"}, {Type: "input_json_delta", Field: "partial_json"}},
	}
	// testEventsMeter is both named shapes' event tables at once (no
	// bill): the fuzzers' streams mix every shape's events.
	testEventsMeter = Meter{
		End:   []string{"response.completed", "response.incomplete", "response.failed", "message_stop"},
		Error: "error", Tokens: []string{"content_block_delta"}, TokenSuffix: ".delta",
	}
)

// writeFlusher is a client that writes and flushes in one call, as
// keepalive.Writer does; its flush func, when the relay is given one,
// counts separately.
type writeFlusher struct {
	recorder
	writeFlushes int
	err          error // returned by WriteFlush after the write
}

func (w *writeFlusher) WriteFlush(p []byte) (int, bool, error) {
	n, _ := w.Write(p)
	w.mu.Lock()
	w.writeFlushes++
	w.mu.Unlock()
	if w.err != nil {
		return n, true, w.err
	}
	return n, true, w.Flush()
}
