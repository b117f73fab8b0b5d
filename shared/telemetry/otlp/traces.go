package otlp

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// spanExporter posts the batches of spans (batch): each is one
// ExportTraceServiceRequest.
type spanExporter struct{ sender }

// appendSpans appends collector.trace.v1.ExportTraceServiceRequest
// {resource_spans = 1}: one ResourceSpans{resource = 1, scope_spans = 2,
// schema_url = 3}, Resource{attributes = 1}, with one ScopeSpans{scope =
// 1, spans = 2, schema_url = 3}, InstrumentationScope{name = 1, version =
// 2, attributes = 3}: every span is the gateway's, of one resource and
// one scope.
func appendSpans(b []byte, res *resource.Resource, spans []*span) []byte {
	e := enc{b: b}
	rs := e.open(1)
	r := e.open(1)
	e.attrSet(1, res.Set())
	e.close(r)
	ss := e.open(2)
	sc := e.open(1)
	e.str(1, scope)
	e.close(sc)
	var kv [20]attribute.KeyValue
	for _, s := range spans {
		e.span(s, s.attributes(kv[:0]))
	}
	e.close(ss)
	e.str(3, res.SchemaURL())
	e.close(rs)
	return e.b
}

// span writes ScopeSpans.spans = 2: Span{trace_id = 1, span_id = 2,
// trace_state = 3, parent_span_id = 4, name = 5, kind = 6,
// start_time_unix_nano = 7, end_time_unix_nano = 8, attributes = 9,
// status = 15, flags = 16} (no events, no links, nothing dropped). The
// status is always written, empty when unset, as the SDK's own exporter
// does.
func (e *enc) span(s *span, attrs []attribute.KeyValue) {
	m := e.open(2)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	e.bytes(1, tid[:])
	e.bytes(2, sid[:])
	e.str(3, s.sc.TraceState().String())
	if p := s.parent.SpanID(); p.IsValid() {
		e.bytes(4, p[:])
	}
	e.str(5, s.name)
	if s.client {
		e.varint(6, 3) // SPAN_KIND_CLIENT
	} else {
		e.varint(6, 2) // SPAN_KIND_SERVER
	}
	e.time(7, s.start)
	e.time(8, s.end)
	e.attrs(9, attrs)
	// Status{message = 2, code = 3}; code UNSET = 0, ERROR = 2.
	st := e.open(15)
	if t := s.errorType; t != "" {
		e.str(2, t)
		e.varint(3, 2)
	}
	e.close(st)
	e.fixed32(16, spanFlags(s.sc.TraceFlags(), s.parent))
	e.close(m)
}

// spanFlags is SpanFlags: the W3C trace flags in the low byte, then
// CONTEXT_HAS_IS_REMOTE (0x100, always: the gateway knows) and
// CONTEXT_IS_REMOTE (0x200) when the parent came from another process.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200
	}
	return f
}
