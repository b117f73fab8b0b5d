package sse

import "bytes"

// EventEnd reports the index just past the empty line that ends the first
// complete event in buf, which must start at the beginning of a line.
//
// Lines end with CRLF, LF or a lone CR. A CR that is the last byte of buf
// may be the first half of a CRLF, so unless atEOF it is not taken as a line
// end: cutting there would leave the LF to start the next event as a
// spurious empty line. ok is false when buf holds no complete event yet.
func EventEnd(buf []byte, atEOF bool) (end int, ok bool) {
	end, _, _, ok = scanEvent(buf, 0, 0, atEOF)
	return end, ok
}

// scanEvent is EventEnd resumable across reads: lineStart is the start of
// the line being scanned and pos the first byte not yet known to be free of
// line ends (lineStart <= pos). When no event is complete it returns the
// lineStart and pos to resume from once more bytes are appended, so a large
// event that arrives in many reads is scanned once, not once per read.
func scanEvent(buf []byte, lineStart, pos int, atEOF bool) (end, nextLineStart, nextPos int, ok bool) {
	for {
		rest := buf[pos:]
		lf := bytes.IndexByte(rest, '\n')
		line := rest
		if lf >= 0 {
			line = rest[:lf]
		}
		var t, tlen int // the line terminator's index and length
		if cr := bytes.IndexByte(line, '\r'); cr >= 0 {
			t = pos + cr
			switch {
			case t+1 < len(buf) && buf[t+1] == '\n':
				tlen = 2
			case t+1 < len(buf) || atEOF:
				tlen = 1
			default:
				return 0, lineStart, t, false
			}
		} else if lf >= 0 {
			t, tlen = pos+lf, 1
		} else {
			return 0, lineStart, len(buf), false
		}
		if t == lineStart {
			return t + tlen, 0, 0, true
		}
		lineStart = t + tlen
		pos = lineStart
	}
}

// cutLine splits off the first line of b (without its terminator), using
// the same line ends as EventEnd; a CR at the very end counts as a line end.
func cutLine(b []byte) (line, rest []byte) {
	for i, c := range b {
		switch c {
		case '\n':
			return b[:i], b[i+1:]
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return b[:i], b[i+2:]
			}
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

// isDone reports whether the event carries the OpenAI end-of-stream marker,
// a data field whose value is exactly [DONE].
func isDone(ev []byte) bool {
	for len(ev) > 0 {
		var line []byte
		line, ev = cutLine(ev)
		if string(line) == "data: [DONE]" || string(line) == "data:[DONE]" {
			return true
		}
	}
	return false
}
