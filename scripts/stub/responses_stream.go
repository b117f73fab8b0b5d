package stub

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// respStreamError is a Responses stream's error event, for
// Fault.ErrorAfter: OpenAI's "error" event. Its sequence_number is left out
// (it would be the only event needing one rendered at fault time).
const respStreamError = "event: error\ndata: " +
	`{"type":"error","code":"stub_error","message":"stub: injected mid-stream error","param":null}` + "\n\n"

// respEvent is one Responses streaming event; the fields each type has are
// set, the rest are left out.
type respEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Item           *outputMessage  `json:"item,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Logprobs       json.RawMessage `json:"logprobs,omitempty"`
	Obfuscation    string          `json:"obfuscation,omitempty"`
}

// respStream is one Responses stream: its events, in OpenAI's order,
//
//	0      response.created         (the response in_progress, no output)
//	1      response.in_progress
//	2      response.output_item.added    (the message, in_progress, no content)
//	3      response.content_part.added   (an empty output_text)
//	4..    response.output_text.delta    (one per token)
//	T+4    response.output_text.done
//	T+5    response.content_part.done
//	T+6    response.output_item.done
//	T+7    response.completed, or response.incomplete when max_output_tokens cut it
//
// where T is the output tokens.
type respStream struct {
	sr        *storedResponse
	tokens    int
	sp        *speech
	seed      uint64
	obfuscate bool
	first     time.Time     // when the first delta is due
	interval  time.Duration // between deltas
}

func (rs *respStream) count() int { return rs.tokens + 8 }

// due is when event i may go out: created and in_progress at once, the
// message's opening events with the first delta, delta k k Intervals
// after it, the closing events at once after the last.
func (rs *respStream) due(i int) time.Time {
	switch k := i - 4; {
	case i >= 2 && k <= 0:
		return rs.first
	case k > 0 && k < rs.tokens:
		return rs.first.Add(time.Duration(k) * rs.interval)
	}
	return time.Time{}
}

// tokensAt is the completion tokens event i carries: one per delta.
func (rs *respStream) tokensAt(i int) int {
	if k := i - 4; k >= 0 && k < rs.tokens {
		return 1
	}
	return 0
}

// appendAt appends event i in OpenAI's framing, "event: <type>" then the
// data line, stamped with now as the chat chunks are (EmitField).
func (rs *respStream) appendAt(dst []byte, i int, now int64) []byte {
	ev := rs.event(i)
	data, err := json.Marshal(ev)
	if err != nil { // unreachable: every field encodes, the raw ones were decoded from the request
		panic(http.ErrAbortHandler)
	}
	dst = append(dst, "event: "...)
	dst = append(dst, ev.Type...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data[:len(data)-1]...)
	dst = append(dst, emitKey...)
	dst = strconv.AppendInt(dst, now, 10)
	return append(dst, eventEnd...)
}

// event returns event i.
func (rs *respStream) event(i int) respEvent {
	zero := 0
	final := rs.sr.final
	msg := final.Output[0]
	ev := respEvent{SequenceNumber: i}
	switch k := i - 4; {
	case i == 0, i == 1:
		ev.Type = "response.created"
		if i == 1 {
			ev.Type = "response.in_progress"
		}
		v := rs.sr.unfinished("in_progress")
		ev.Response = &v
	case i == 2:
		item := msg
		item.Status, item.Content = "in_progress", []outputText{}
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.added", &zero, &item
	case i == 3:
		part := newOutputText("")
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Part = "response.content_part.added", msg.ID, &zero, &zero, &part
	case k < rs.tokens:
		delta := rs.sp.word(rs.seed, 0, k)
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Delta = "response.output_text.delta", msg.ID, &zero, &zero, &delta
		ev.Logprobs = json.RawMessage("[]")
		if rs.obfuscate {
			ev.Obfuscation = obfuscation(i, len(delta))
		}
	case k == rs.tokens:
		text := msg.Content[0].Text
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Text = "response.output_text.done", msg.ID, &zero, &zero, &text
		ev.Logprobs = json.RawMessage("[]")
	case k == rs.tokens+1:
		part := msg.Content[0]
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Part = "response.content_part.done", msg.ID, &zero, &zero, &part
	case k == rs.tokens+2:
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.done", &zero, &msg
	default:
		ev.Type, ev.Response = "response.completed", &final
		if final.Status == "incomplete" {
			ev.Type = "response.incomplete"
		}
	}
	return ev
}

// obfuscation pads a delta event as OpenAI does by default (unless
// stream_options.include_obfuscation is false), so that event sizes do not
// reveal the token: filler bringing the delta to 16 characters at least.
func obfuscation(seq, deltaLen int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, max(16-deltaLen, 1))
	x := uint64(seq)*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = alphabet[x%uint64(len(alphabet))]
	}
	return string(b)
}

// streamResponse writes sr as the Responses event stream: the created and
// in_progress events at once, the message's opening events with the first
// delta TTFT after arrived, a delta every Interval after that, then the
// closing events right after the last. There is no [DONE]: the stream ends
// after response.completed (or response.incomplete). The stored response
// is in_progress until then, and cancelled if the stream ends early.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, sr *storedResponse, f Fault, sh shape, arrived time.Time, seed uint64, obfuscate bool) {
	end := endCanceled
	rc, ok := s.beginStream(w)
	defer func() {
		s.endStream(end)
		st := stateCancelled
		if end == endDone {
			st = stateDone
		}
		s.responses.finish(sr, st)
	}()
	if !ok {
		return
	}
	rs := &respStream{sr: sr, tokens: sr.final.Usage.OutputTokens, sp: s.speech, seed: seed, obfuscate: obfuscate,
		first: arrived.Add(sh.ttft), interval: sh.interval}
	var buf []byte
	s.pump(w, r, rc, f, rs, respStreamError, &buf, &end)
}
