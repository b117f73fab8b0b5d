package sse

import (
	"bytes"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// AnswerScanner reads a JSON answer as it streams through, whatever its
// size, for the few top-level members the gateway bills and records by:
// "usage" (what the backend bills), and "id" and "object" (a stored
// Responses object's owner is recorded from them). It tracks nesting and
// strings byte by byte and keeps only those members' values (bounded), so
// a usage-shaped object anywhere else, as an echoing backend returns the
// caller's own tool schemas, is never read, and an answer far
// larger than the relay's buffer is read as completely as a small one.
//
// Its zero value is ready; it does not allocate.
type AnswerScanner struct {
	depth      int
	inStr, esc bool
	notObject  bool // the answer does not start with '{'
	started    bool

	// The member being read at depth 1.
	keyNext bool // the next string at depth 1 is a key
	inKey   bool
	key     [32]byte
	keyN    int  // len(key) used; > len(key) when too long to be wanted
	value   bool // between a depth-1 ':' and the end of its value
	// capturing is the member whose value is being kept, as its index
	// into kept plus one (0 none, so the zero scanner captures nothing):
	// an index, not a pointer, so a scanner on the stack stays there.
	capturing int8

	kept [4]captured // usage, id, object, service_tier

	// out reads the items of a top-level "output" array (a Responses
	// object's) for their "type", to count hosted tool calls.
	out outputItems
}

// outputItems is AnswerScanner's state in a top-level "output" array:
// at depth 3 (an item's members) it reads each key and the "type"
// string, raw; an item's last type is counted when the item closes.
type outputItems struct {
	in                     bool // between the array's '[' and ']'
	keyNext, inKey, inType bool
	wantType, hasType      bool
	key                    [8]byte
	keyN                   int
	typ                    [40]byte
	typN                   int
	calls                  ToolCalls
}

// appendRaw adds c to buf at *n, counting past the end (too long).
func appendRaw(buf []byte, n *int, c byte) {
	if *n < len(buf) {
		buf[*n] = c
	}
	*n++
}

const (
	keptUsage = iota
	keptID
	keptObject
	keptTier
)

// cur is the value being captured, or nil.
func (s *AnswerScanner) cur() *captured {
	if s.capturing <= 0 {
		return nil
	}
	return &s.kept[s.capturing-1]
}

// captured is one top-level member's value as sent.
type captured struct {
	buf  [maxCaptured]byte
	n    int
	seen bool // the member was present (its last occurrence is in buf)
	over bool // the value did not fit buf
}

// maxCaptured bounds a captured value: a usage object with its details
// fits easily, and no id is this long.
const maxCaptured = 2048

func (c *captured) reset() { c.n, c.seen, c.over = 0, true, false }

func (c *captured) add(b byte) {
	if c.n == len(c.buf) {
		c.over = true
		return
	}
	c.buf[c.n] = b
	c.n++
}

func (c *captured) bytes() []byte {
	if !c.seen || c.over {
		return nil
	}
	return bytes.TrimSpace(c.buf[:c.n])
}

// Reset readies s for another answer.
func (s *AnswerScanner) Reset() { *s = AnswerScanner{} }

// Write scans p, the next bytes of the answer; it never fails.
func (s *AnswerScanner) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		if s.inStr && !s.esc && !s.inKey && s.capturing == 0 && !s.out.inKey && !s.out.inType {
			// Inside a string nothing is kept or counted until its closing
			// quote or an escape: skip to it with the byte search.
			j := bytes.IndexAny(p[i:], `"\`)
			if j < 0 {
				return len(p), nil
			}
			i += j
		}
		s.scan(p[i])
	}
	return len(p), nil
}

func (s *AnswerScanner) scan(c byte) {
	if !s.started {
		switch c {
		case ' ', '\t', '\r', '\n':
			return
		case '{':
		default:
			s.notObject = true
		}
		s.started = true
	}
	if s.notObject {
		return
	}
	if k := s.cur(); k != nil {
		k.add(c)
	}
	if s.inStr {
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
			if s.inKey {
				s.inKey = false
				return
			}
			if s.out.inKey || s.out.inType {
				s.out.hasType = s.out.hasType || s.out.inType && s.out.typN <= len(s.out.typ)
				s.out.inKey, s.out.inType = false, false
				return
			}
			if s.depth == 1 && s.cur() != nil { // a string value ends
				s.capturing, s.value = 0, false
			}
			return
		}
		if s.inKey {
			if s.keyN < len(s.key) {
				s.key[s.keyN] = c
			}
			s.keyN++
		}
		if s.out.inKey {
			appendRaw(s.out.key[:], &s.out.keyN, c)
		} else if s.out.inType {
			appendRaw(s.out.typ[:], &s.out.typN, c)
		}
		return
	}
	switch c {
	case '"':
		s.inStr = true
		if s.depth == 1 && s.keyNext {
			s.inKey, s.keyNext, s.keyN = true, false, 0
			return
		}
		if s.out.in && s.depth == 3 {
			if s.out.keyNext {
				s.out.inKey, s.out.keyNext, s.out.keyN = true, false, 0
				return
			}
			if s.out.wantType { // a later "type" replaces an earlier one
				s.out.inType, s.out.wantType, s.out.hasType, s.out.typN = true, false, false, 0
			}
		}
		s.startValue(c)
	case '{', '[':
		s.startValue(c)
		s.depth++
		if s.depth == 1 {
			s.keyNext = true
		}
		if s.out.in && s.depth == 3 && c == '{' { // an item
			s.out.keyNext, s.out.wantType, s.out.hasType = true, false, false
		}
	case '}', ']':
		s.depth--
		if s.out.in {
			switch {
			case s.depth == 2 && c == '}' && s.out.hasType: // an item ends
				s.out.calls.add(s.out.typ[:s.out.typN])
			case s.depth == 1: // the array ends
				s.out.in, s.out.calls.Counted = false, true
			}
		}
		if s.depth == 1 && s.cur() != nil {
			s.capturing, s.value = 0, false
		}
		if s.depth <= 0 && s.cur() != nil { // a scalar ended by the closing brace
			s.cur().n--
			s.capturing = 0
		}
	case ':':
		if s.depth == 1 {
			s.value = true
		}
		if s.out.in && s.depth == 3 {
			var kb [32]byte
			s.out.wantType = s.out.keyN <= len(s.out.key) && string(jsonscan.Key(s.out.key[:s.out.keyN], &kb)) == "type"
		}
	case ',':
		if s.out.in && s.depth == 3 {
			s.out.keyNext, s.out.wantType = true, false
		}
		if s.depth == 1 {
			if s.cur() != nil { // a scalar value ends
				s.cur().n--
				s.capturing = 0
			}
			s.keyNext, s.value = true, false
		}
	case ' ', '\t', '\r', '\n':
	default:
		s.startValue(c)
	}
}

// startValue begins capturing a depth-1 value whose first byte is c, when
// its key is one the scanner keeps.
func (s *AnswerScanner) startValue(c byte) {
	if s.depth != 1 || !s.value || s.cur() != nil {
		return
	}
	s.value = false
	which := -1
	if s.keyN <= len(s.key) {
		var kb [32]byte
		switch string(jsonscan.Key(s.key[:s.keyN], &kb)) {
		case "usage":
			which = keptUsage
		case "id":
			which = keptID
		case "object":
			which = keptObject
		case "service_tier":
			which = keptTier
		case "output":
			if c == '[' { // a later "output" replaces an earlier one
				s.out = outputItems{in: true}
			}
		}
	}
	if which < 0 {
		return
	}
	dst := &s.kept[which]
	dst.reset()
	dst.add(c)
	s.capturing = int8(which + 1)
}

// Usage is the answer's top-level usage, as ReadUsage reads it; ok is
// false when there is none, it was not an object, or it did not fit.
func (s *AnswerScanner) Usage() (u Usage, ok bool) {
	b := s.kept[keptUsage].bytes()
	if len(b) == 0 || b[0] != '{' {
		return Usage{}, false
	}
	if u, ok = parseUsageObject(b); ok && s.capturing != keptTier+1 {
		if t := s.kept[keptTier].bytes(); t != nil {
			u.Tier, u.TierReported = readTier(t)
		}
	}
	if ok && s.out.calls.Counted {
		u.Calls = s.out.calls
	}
	return u, ok
}

// ID is the answer's top-level "id" string, raw (as sent, without quotes;
// empty when absent, not a plain string, or not yet complete). object is
// the top-level "object" string the same way.
func (s *AnswerScanner) ID() (id, object []byte) {
	return plainString(s.kept[keptID].bytes(), s.capturing == keptID+1), plainString(s.kept[keptObject].bytes(), s.capturing == keptObject+1)
}

// plainString returns the contents of the complete JSON string q when it
// holds no escapes (ids never do), else nil.
func plainString(q []byte, open bool) []byte {
	if open || len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return nil
	}
	in := q[1 : len(q)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		return nil
	}
	return in
}

// Complete reports whether the answer was one whole JSON object: its
// closing brace was scanned. Bytes after it are not checked.
func (s *AnswerScanner) Complete() bool {
	return s.started && !s.notObject && s.depth == 0 && !s.inStr
}
