package sse

import "bytes"

// Meter is how one operation's stream is metered: which event's usage is
// the bill, and which events bound the output from below. Each row of the
// operations table fills one in (request.Operation.Meter), so a new
// operation declares its metering instead of inheriting another API's
// holes, and the relay reads no API by name for it (issue 30). The zero
// Meter is a data-only stream: Chat Completions' and legacy completions'.
//
// In a data-only stream the bill is the usage chunk (a chunk with empty
// choices and a usage object: include_usage's, injected or the client's),
// or the last usage seen when the stream reached data: [DONE] (a backend
// that puts usage on its finish chunk), and every other JSON chunk is a
// token event that floors the output (each choice's role and finish
// chunks and Azure's filter chunk aside: OutputFloor's slack).
type Meter struct {
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
	for _, b := range m.Bill {
		if string(name) == b {
			return true, m.BillAt, true, false
		}
	}
	if m.Start != "" && string(name) == m.Start {
		return true, m.StartAt, false, false
	}
	for _, f := range m.Floor {
		if string(name) == f {
			return false, 0, false, m.floorDelta(ev)
		}
	}
	return false, 0, false, false
}

// floorDelta reports whether a Floor event's data carries generated text
// (FloorDeltas). The scan is of bytes: inside a JSON string a quote is
// escaped, so `"text_delta"` and `"text":""` appear raw only as the
// object's own members.
func (m *Meter) floorDelta(ev []byte) bool {
	if len(m.FloorDeltas) == 0 {
		return true
	}
	for _, d := range m.FloorDeltas {
		if quoted(ev, d.Type) < 0 {
			continue
		}
		i := quoted(ev, d.Field)
		if i < 0 {
			return false
		}
		i = skipSpace(ev, i)
		if i >= len(ev) || ev[i] != ':' {
			return false
		}
		i = skipSpace(ev, i+1)
		return i+1 < len(ev) && ev[i] == '"' && ev[i+1] != '"'
	}
	return false
}

// quoted returns the index after the first `"s"` in b, or -1.
func quoted(b []byte, s string) int {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(s))
		if i < 0 {
			return -1
		}
		i += off
		if i > 0 && b[i-1] == '"' && i+len(s) < len(b) && b[i+len(s)] == '"' {
			return i + len(s) + 1
		}
		off = i + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}
