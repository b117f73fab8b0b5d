package sse

import "bytes"

// Meter is one operation's stream shape, its event table: which events
// end it, which is the backend's error, which carry generated tokens, and
// how it is metered: which event's usage is the bill, and which events
// bound the output from below. Each row of the operations table fills one
// in (request.Operation.Meter), so a new operation declares its events
// and metering instead of inheriting another API's holes, and the relay
// reads no API by name. The zero Meter is a data-only
// stream: Chat Completions' and legacy completions'.
//
// In a data-only stream the bill is the usage chunk (a chunk with empty
// choices and a usage object: include_usage's, injected or the client's),
// or the last usage seen when the stream reached data: [DONE] (a backend
// that puts usage on its finish chunk), and every other JSON chunk is a
// token event that floors the output (each choice's role and finish
// chunks and Azure's filter chunk aside: OutputFloor's slack).
type Meter struct {
	// End names the events after which the stream is over (Result.Done):
	// nothing after one is relayed. The Responses API's
	// response.completed, .incomplete and .failed; the Messages API's
	// message_stop. Every stream also ends at data: [DONE].
	End []string
	// Error names the backend's own error event (Result.EndedWithError);
	// a data-only stream's is a data: {"error"… chunk.
	Error string
	// Tokens names the events that may carry generated tokens, each at
	// least one (Result.TokenEvents, the cut of Options.MaxTokenEvents);
	// TokenSuffix, when set, adds every event whose name ends in it (the
	// Responses API's ".delta"). In a data-only stream every JSON chunk
	// but a usage-only one or an error is a token event.
	Tokens      []string
	TokenSuffix string
	// Bill names the events whose usage is final, read at BillAt: the
	// Responses API's response.completed, .incomplete and .failed (at
	// InResponse), the Messages API's message_delta (TopLevel, cumulative
	// output_tokens). A stream that ends before one carried a usage is
	// charged at least its reservation.
	Bill   []string
	BillAt Where
	// Start names the event whose usage holds input counts only, read at
	// StartAt: the Messages API's message_start (InMessage). It is logged
	// and fills the input counts a bill event leaves out; its output
	// count is never the bill.
	Start   string
	StartAt Where
	// Floor names the events that each carry at least one generated
	// token. A reported output below their count cannot be true.
	Floor []string
	// FloorDeltas, when set, counts a Floor event only when its data holds
	// one of these delta types with a non-empty text field: the Messages
	// API's content_block_delta carries text, thinking and tool input, but
	// also signature_delta (no output token) and an empty first
	// input_json_delta.
	FloorDeltas []Delta
}

// Delta is a delta type whose Field holds generated text
// ({"type":"text_delta","text":"…"}).
type Delta struct{ Type, Field string }

// event classifies a named event's name for the relay: whether it ends
// the stream, is the backend's error, or may carry tokens.
func (m *Meter) event(name []byte) (end, errorEvent, token bool) {
	for _, e := range m.End {
		if string(name) == e {
			return true, false, false
		}
	}
	if m.Error != "" && string(name) == m.Error {
		return false, true, false
	}
	for _, t := range m.Tokens {
		if string(name) == t {
			return false, false, true
		}
	}
	n := len(m.TokenSuffix)
	return false, false, n > 0 && len(name) >= n && string(name[len(name)-n:]) == m.TokenSuffix
}

// Named reports whether the meter is a named-event stream's.
func (m Meter) Named() bool { return len(m.Bill) > 0 }

// OutputFloor is the least output a relayed stream's usage may report:
// its floor events, less in a data-only stream each choice's role and
// finish chunks and Azure's prompt-filter chunk.
func (m Meter) OutputFloor(floorEvents, choices int64) int64 {
	if m.Named() {
		return floorEvents
	}
	return max(floorEvents-2*max(choices, 1)-2, 0)
}

// named classifies a named event for the meter: its usage, where and
// whether final, and whether it floors the output.
func (m *Meter) named(name, ev []byte) (usage bool, where Where, final, floor bool) {
	for _, f := range m.Floor { // the most frequent events first
		if string(name) == f {
			return false, 0, false, m.floorDelta(name, ev)
		}
	}
	for _, b := range m.Bill {
		if string(name) == b {
			return true, m.BillAt, true, false
		}
	}
	if m.Start != "" && string(name) == m.Start {
		return true, m.StartAt, false, false
	}
	return false, 0, false, false
}

// floorDelta reports whether a Floor event's data carries generated text
// (FloorDeltas). It scans bytes, a few searches an event: inside a JSON
// string a quote is escaped, so a raw `_delta"` ends a string (the delta's
// type, or a text that ends so, which names no listed type) and a raw
// `"text":` is a member.
func (m *Meter) floorDelta(name, ev []byte) bool {
	if len(m.FloorDeltas) == 0 {
		return true
	}
	// Past the name line, and past the data's own type when it opens with
	// it (Anthropic's layout): the search then starts at the delta.
	rest := ev
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[j+1:]
	}
	if p := len(dataType); len(rest) > p+len(name) && string(rest[:p]) == dataType && string(rest[p:p+len(name)]) == string(name) {
		rest = rest[p+len(name):]
	}
	for {
		i := bytes.Index(rest, deltaTypeEnd)
		if i < 0 {
			return false
		}
		end := i + len(deltaTypeEnd) - 1
		typ := rest[bytes.LastIndexByte(rest[:i], '"')+1 : end]
		for _, d := range m.FloorDeltas {
			if string(typ) == d.Type {
				if ok, known := nextMember(rest[end+1:], d.Field); known {
					return ok // the common layout: the field right after the type
				}
				return nonEmptyString(ev, d.Field)
			}
		}
		rest = rest[end+1:]
	}
}

var deltaTypeEnd = []byte(`_delta"`)

const dataType = `data: {"type":"`

// nextMember reads b as `,"field":"…` (the delta's member after its type,
// as Anthropic writes it): known is false when b is laid out otherwise,
// ok whether the string value is non-empty.
func nextMember(b []byte, field string) (ok, known bool) {
	k := 2 + len(field)
	if len(b) < k+4 || b[0] != ',' || b[1] != '"' || string(b[2:k]) != field || b[k] != '"' || b[k+1] != ':' || b[k+2] != '"' {
		return false, false
	}
	return b[k+3] != '"', true
}

// nonEmptyString reports whether ev has a member "field" whose value is
// a string of at least one character.
func nonEmptyString(ev []byte, field string) bool {
	for i := 0; i < len(ev); {
		q := bytes.IndexByte(ev[i:], '"')
		if q < 0 {
			return false
		}
		q += i
		k := q + 1 + len(field)
		if k < len(ev) && ev[k] == '"' && string(ev[q+1:k]) == field {
			v := skipSpace(ev, k+1)
			if v < len(ev) && ev[v] == ':' {
				v = skipSpace(ev, v+1)
				return v+1 < len(ev) && ev[v] == '"' && ev[v+1] != '"'
			}
		}
		i = q + 1
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}
