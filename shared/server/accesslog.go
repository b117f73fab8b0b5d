package server

// The access log's line: one fixed JSON record per request, appended field
// by field into a pooled buffer and written with one Write before the
// handler returns. It is the line log/slog's JSON handler wrote for the
// same record ("time", "level", "msg", then the fields in this order, the
// same names, types and encodings: accesslog_test.go compares the two),
// without slog's attribute list and handler state, which were a request's
// largest allocations after its buffers.

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendAccessLog appends the fields of ex's access-log line. A field is
// one line here: its name and its value, in the order it is written.
func (s *Server) appendAccessLog(l *logLine, ex *exchange, end time.Time) {
	ms := msBetween
	keepalives, kaFirst, clientFirst := ex.firstBytes()
	l.str("request_id", ex.id)
	l.capped("method", ex.method)
	l.capped("path", ex.path)
	l.str("tenant", ex.tenant)
	l.str("tenant_name", ex.tenantName)
	l.capped("subject", ex.subject)
	if ex.pool != "" { // a configured model's name
		l.str("model", ex.model)
	} else {
		l.capped("model", ex.model)
	}
	l.boolOrNull("stream", ex.stream, ex.streamKnown) // null: the body was never read
	l.str("pool", ex.pool)
	l.str("endpoint", ex.Endpoint)
	l.int("priority", int64(ex.Priority))
	spill := ex.spill
	if spill == "" && ex.OverShare {
		spill = "tenant_share" // passed over its share of a priority's capacity
	}
	l.str("spill", spill)
	l.int("attempts", int64(ex.Attempts))
	l.int("status", int64(ex.Status))
	l.int("upstream_status", int64(ex.UpstreamStatus))
	l.str("outcome", ex.Outcome)
	l.str("error", ex.Detail)
	l.str("dropped_fields", ex.dropped)
	l.int("bytes", ex.Bytes)
	l.int("events", ex.Events)
	l.int("prompt_tokens", ex.Usage.PromptTokens)
	l.int("completion_tokens", ex.Usage.CompletionTokens)
	l.int("budget_reserved", ex.budget.Reserved())
	l.int("budget_charged", ex.budget.ChargedTokens())
	l.str("budget_settle", ex.budget.SettleState())
	l.str("cost", ex.budget.CostText())
	l.str("price_version", ex.budget.PriceVersion())
	l.int("output_cap", ex.budget.OutputCap())
	l.float("upstream_first_byte_ms", ms(ex.start, ex.UpstreamHeaders))
	l.float("client_first_byte_ms", ms(ex.start, clientFirst))
	l.float("client_first_event_ms", ms(ex.start, ex.ClientFirstEvent))
	l.int("keepalives", int64(keepalives))
	l.float("first_keepalive_ms", ms(ex.start, kaFirst))
	l.bool("failover_after_headers", ex.FailoverAfterHeaders)
	l.float("added_ms", addedMs(&ex.logEntry, end))
	l.float("duration_ms", ms(ex.start, end))
}

// msBetween is the milliseconds from a to b, to the microsecond; 0
// when either is unknown.
func msBetween(a, b time.Time) float64 {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return float64(b.Sub(a).Microseconds()) / 1000
}

// firstBytes is what the keepalive says (comments sent, the first's
// time) and when the client got its first byte: a comment's, when one
// came before the answer's.
func (ex *exchange) firstBytes() (keepalives int, kaFirst, clientFirst time.Time) {
	keepalives, kaFirst = ex.keepalive.Stats()
	clientFirst = ex.ClientFirst
	if !kaFirst.IsZero() && (clientFirst.IsZero() || kaFirst.Before(clientFirst)) {
		clientFirst = kaFirst // a keepalive comment was the first byte
	}
	return keepalives, kaFirst, clientFirst
}

// log writes ex's access-log line to AccessLog, when the log is at Info
// or below: one Write of one whole line, before the handler returns.
func (s *Server) log(ex *exchange) {
	if s.AccessLog == nil || !s.Log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	l := s.lines.Get().(*logLine)
	l.b = append(l.b[:0], `{"time":`...)
	l.b = appendTime(l.b, time.Now())
	l.b = append(l.b, `,"level":"INFO","msg":"request"`...)
	s.appendAccessLog(l, ex, s.Now())
	l.b = append(l.b, '}', '\n')
	_, _ = s.AccessLog.Write(l.b)
	if cap(l.b) <= maxPooledLine {
		s.lines.Put(l)
	}
}

// maxPooledLine: a line grown past it by a long error text is dropped
// rather than pooled.
const maxPooledLine = 4 << 10

// logLine is an access-log line being appended. Its keys are the
// constants above: plain ASCII that needs no escaping.
type logLine struct{ b []byte }

func newLogLine() any { return &logLine{b: make([]byte, 0, 1<<10)} }

func (l *logLine) key(k string) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
}

func (l *logLine) str(k, v string) {
	l.key(k)
	l.b = appendJSONString(l.b, v)
}

// capped writes a string the caller chose (a path, a model no pool
// serves), cut at maxEcho bytes and marked (clipped): the caller does not
// set the size of the log's line.
func (l *logLine) capped(k, v string) {
	head, cut := clip(v)
	l.str(k, head)
	if cut {
		l.b = append(l.b[:len(l.b)-1], truncatedMark+`"`...)
	}
}

// maxEcho bounds a caller-chosen string the gateway echoes, in its access
// log and in its answers: a few hundred bytes say what it was.
const maxEcho = 256

// truncatedMark ends a string cut at maxEcho.
const truncatedMark = "…(truncated)"

// clip is s's first maxEcho bytes, cut at a character's start, and
// whether it was cut.
func clip(s string) (string, bool) {
	if len(s) <= maxEcho {
		return s, false
	}
	n := maxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// clipped is s, when longer than maxEcho, cut and marked (clip).
func clipped(s string) string {
	if head, cut := clip(s); cut {
		return head + truncatedMark
	}
	return s
}

func (l *logLine) int(k string, v int64) {
	l.key(k)
	l.b = strconv.AppendInt(l.b, v, 10)
}

func (l *logLine) bool(k string, v bool) {
	l.key(k)
	l.b = strconv.AppendBool(l.b, v)
}

// boolOrNull writes v, or null when it is not known.
func (l *logLine) boolOrNull(k string, v, known bool) {
	if !known {
		l.key(k)
		l.b = append(l.b, "null"...)
		return
	}
	l.bool(k, v)
}

// float writes v as encoding/json does (slog's JSON handler marshals
// floats with it): the shortest decimal, an exponent only below 1e-6 or
// from 1e21 on.
func (l *logLine) float(k string, v float64) {
	l.key(k)
	l.b = appendJSONFloat(l.b, v)
}

func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, '0') // no duration is either; JSON has neither
	}
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendTime writes t as slog's JSON handler does: RFC 3339 with
// nanoseconds, quoted.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendJSONString writes s quoted and escaped as slog's JSON handler
// does: encoding/json's escaping without its HTML escapes (<, > and &
// stay), invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
