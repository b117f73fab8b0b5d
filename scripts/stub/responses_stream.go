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
	Item           *outputItem     `json:"item,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Name           string          `json:"name,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Input          *string         `json:"input,omitempty"`
	Logprobs       json.RawMessage `json:"logprobs,omitempty"`
	Obfuscation    string          `json:"obfuscation,omitempty"`
}

// respStream is one Responses stream: its events, in OpenAI's order. For
// a message,
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
// where T is the output tokens; for a function call,
//
//	0, 1   response.created, response.in_progress
//	2      response.output_item.added    (the function_call, in_progress, empty arguments)
//	3..    response.function_call_arguments.delta (one per token)
//	T+3    response.function_call_arguments.done
//	T+4    response.output_item.done
//	T+5    response.completed
//
// and for a compaction (Codex's remote compaction v2: no deltas),
//
//	0, 1   response.created, response.in_progress
//	2      response.output_item.added    (the compaction item)
//	3      response.output_item.done     (the same, carrying its output tokens)
//	4      response.completed
type respStream struct {
	sr        *storedResponse
	tokens    int
	wd        *wording
	seed      uint64
	pieces    []string // the deltas when not the wording's words (structured output, a call's arguments)
	call      bool     // the output is a function call
	obfuscate bool
	first     time.Time     // when the first delta is due
	interval  time.Duration // between deltas
	replay    bool          // a replay: its deltas are not generated again (Stats)
	cancelled bool          // a replay of a cancelled response: created and in_progress only
}

// lead is the index of the first delta; the events after the last delta
// are as many.
func (rs *respStream) lead() int {
	if rs.call {
		return 3
	}
	return 4
}

func (rs *respStream) count() int {
	switch {
	case rs.cancelled:
		return 2
	case rs.compaction():
		return 5
	}
	return 2*rs.lead() + rs.tokens
}

// compaction reports whether the output is a compaction item.
func (rs *respStream) compaction() bool {
	return rs.call && rs.sr.final.Output[0].Type == "compaction"
}

// due is when event i may go out: created and in_progress at once, the
// item's opening events with the first delta, delta k k Intervals after
// it, the closing events at once after the last.
func (rs *respStream) due(i int) time.Time {
	switch k := i - rs.lead(); {
	case i >= 2 && k <= 0:
		return rs.first
	case k > 0 && k < rs.tokens:
		return rs.first.Add(time.Duration(k) * rs.interval)
	}
	return time.Time{}
}

// tokensAt is the completion tokens event i carries: one per delta (none
// in a replay).
func (rs *respStream) tokensAt(i int) int {
	switch k := i - rs.lead(); {
	case rs.replay:
		return 0
	case rs.compaction():
		if k == 0 {
			return compactionTokens
		}
		return 0
	case k >= 0 && k < rs.tokens:
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

// delta is the text of delta k.
func (rs *respStream) delta(k int) string {
	if rs.pieces != nil {
		return rs.pieces[k]
	}
	return rs.wd.word(rs.seed, 0, k)
}

// event returns event i.
func (rs *respStream) event(i int) respEvent {
	zero := 0
	final := rs.sr.final
	item := final.Output[0]
	ev := respEvent{SequenceNumber: i}
	k := i - rs.lead()
	switch {
	case i == 0, i == 1:
		ev.Type = "response.created"
		if i == 1 {
			ev.Type = "response.in_progress"
		}
		status := "in_progress"
		if rs.cancelled {
			status = "cancelled"
		}
		v := rs.sr.unfinished(status)
		ev.Response = &v
	case i == 2:
		opening := item
		opening.Status, opening.Content, opening.Arguments = "in_progress", []outputText{}, ""
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.added", &zero, &opening
	case k >= 0 && k < rs.tokens:
		delta := rs.delta(k)
		ev.ItemID, ev.OutputIndex, ev.Delta = item.ID, &zero, &delta
		if rs.obfuscate {
			ev.Obfuscation = obfuscation(i, len(delta))
		}
		if rs.call && item.Type == "custom_tool_call" {
			ev.Type = "response.custom_tool_call_input.delta"
			break
		}
		if rs.call {
			ev.Type = "response.function_call_arguments.delta"
			break
		}
		ev.Type, ev.ContentIndex, ev.Logprobs = "response.output_text.delta", &zero, json.RawMessage("[]")
	case rs.compaction() && k == 0:
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.done", &zero, &item
	case rs.compaction():
		ev.Type, ev.Response = "response.completed", &final
	case rs.call && k == rs.tokens && item.Type == "custom_tool_call":
		ev.Type, ev.ItemID, ev.OutputIndex, ev.Input = "response.custom_tool_call_input.done", item.ID, &zero, &item.Arguments
	case rs.call && k == rs.tokens:
		ev.Type, ev.ItemID, ev.OutputIndex, ev.Name, ev.Arguments = "response.function_call_arguments.done", item.ID, &zero, item.Name, &item.Arguments
	case rs.call && k == rs.tokens+1:
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.done", &zero, &item
	case rs.call && k == rs.tokens+2, !rs.call && k == rs.tokens+3:
		ev.Type, ev.Response = "response.completed", &final
		if final.Status == "incomplete" {
			ev.Type = "response.incomplete"
		}
	case rs.call:
		panic(http.ErrAbortHandler) // unreachable: count() bounds i
	case i == 3:
		part := newOutputText("")
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Part = "response.content_part.added", item.ID, &zero, &zero, &part
	case k == rs.tokens:
		text := item.Content[0].Text
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Text = "response.output_text.done", item.ID, &zero, &zero, &text
		ev.Logprobs = json.RawMessage("[]")
	case k == rs.tokens+1:
		part := item.Content[0]
		ev.Type, ev.ItemID, ev.OutputIndex, ev.ContentIndex, ev.Part = "response.content_part.done", item.ID, &zero, &zero, &part
	default:
		ev.Type, ev.OutputIndex, ev.Item = "response.output_item.done", &zero, &item
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

// streamResponse writes sr as the Responses event stream (sr.replay):
// the created and in_progress events at once, the item's opening events
// with the first delta TTFT after the request arrived, a delta every
// Interval after that, then the closing events right after the last.
// There is no [DONE]: the stream ends after response.completed (or
// response.incomplete). The stored response is in_progress until then,
// and cancelled if the stream ends early.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, sr *storedResponse, f Fault) {
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
	rs := sr.replay
	var buf []byte
	s.pump(w, r, rc, f, &rs, respStreamError, &buf, &end)
}
