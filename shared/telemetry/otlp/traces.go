package otlp

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanExporter is the SDK's trace.SpanExporter: each batch the batcher
// hands it is one ExportTraceServiceRequest, POSTed.
type spanExporter struct{ sender }

var _ sdktrace.SpanExporter = (*spanExporter)(nil)

func (x *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	return x.export(ctx, func(b []byte) ([]byte, error) { return appendSpans(b, spans), nil })
}

// spanGroup is the spans of one resource and scope, in export order.
type spanGroup struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// appendSpans appends collector.trace.v1.ExportTraceServiceRequest
// {resource_spans = 1}: the spans grouped by resource (ResourceSpans
// {resource = 1, scope_spans = 2, schema_url = 3}, Resource{attributes =
// 1}) and then by scope, each group where its first span was.
func appendSpans(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type key struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	var groups []*spanGroup
	byKey := map[key]*spanGroup{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		k := key{s.Resource().Equivalent(), s.InstrumentationScope()}
		g := byKey[k]
		if g == nil {
			g = &spanGroup{res: s.Resource(), scope: k.scope}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.spans = append(g.spans, s)
	}
	e := enc{b: b}
	for i, g := range groups {
		if g == nil {
			continue // written with an earlier group of its resource
		}
		res := g.res.Equivalent()
		rs := e.open(1)
		r := e.open(1)
		e.attrSet(1, g.res.Set())
		e.close(r)
		for j := i; j < len(groups); j++ {
			if h := groups[j]; h != nil && h.res.Equivalent() == res {
				e.scopeSpans(h)
				groups[j] = nil
			}
		}
		e.str(3, g.res.SchemaURL())
		e.close(rs)
	}
	return e.b
}

// scopeSpans writes ResourceSpans.scope_spans = 2: ScopeSpans{scope = 1,
// spans = 2, schema_url = 3}, with InstrumentationScope{name = 1, version =
// 2, attributes = 3} left out when the scope is the zero one.
func (e *enc) scopeSpans(g *spanGroup) {
	ss := e.open(2)
	if g.scope != (instrumentation.Scope{}) {
		sc := e.open(1)
		e.str(1, g.scope.Name)
		e.str(2, g.scope.Version)
		e.attrSet(3, &g.scope.Attributes)
		e.close(sc)
	}
	for _, s := range g.spans {
		e.span(s)
	}
	e.str(3, g.scope.SchemaURL)
	e.close(ss)
}

// span writes ScopeSpans.spans = 2: Span{trace_id = 1, span_id = 2,
// trace_state = 3, parent_span_id = 4, name = 5, kind = 6,
// start_time_unix_nano = 7, end_time_unix_nano = 8, attributes = 9,
// dropped_attributes_count = 10, events = 11, dropped_events_count = 12,
// links = 13, dropped_links_count = 14, status = 15, flags = 16}. The
// status is always written, empty when unset, as the SDK's own exporter
// does.
func (e *enc) span(s sdktrace.ReadOnlySpan) {
	m := e.open(2)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(1, tid[:])
	e.bytes(2, sid[:])
	e.str(3, sc.TraceState().String())
	parent := s.Parent()
	if p := parent.SpanID(); p.IsValid() {
		e.bytes(4, p[:])
	}
	e.str(5, s.Name())
	e.varint(6, spanKind(s.SpanKind()))
	e.time(7, s.StartTime())
	e.time(8, s.EndTime())
	e.attrs(9, s.Attributes())
	e.count(10, s.DroppedAttributes())
	for _, ev := range s.Events() {
		// Span.Event{time_unix_nano = 1, name = 2, attributes = 3,
		// dropped_attributes_count = 4}
		x := e.open(11)
		e.time(1, ev.Time)
		e.str(2, ev.Name)
		e.attrs(3, ev.Attributes)
		e.count(4, ev.DroppedAttributeCount)
		e.close(x)
	}
	e.count(12, s.DroppedEvents())
	for _, l := range s.Links() {
		// Span.Link{trace_id = 1, span_id = 2, trace_state = 3,
		// attributes = 4, dropped_attributes_count = 5, flags = 6}
		x := e.open(13)
		lt, ls := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(1, lt[:])
		e.bytes(2, ls[:])
		e.str(3, l.SpanContext.TraceState().String())
		e.attrs(4, l.Attributes)
		e.count(5, l.DroppedAttributeCount)
		e.fixed32(6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.close(x)
	}
	e.count(14, s.DroppedLinks())
	// Status{message = 2, code = 3}; code UNSET = 0, OK = 1, ERROR = 2.
	st := e.open(15)
	status := s.Status()
	e.str(2, status.Description)
	switch status.Code {
	case codes.Ok:
		e.varint(3, 1)
	case codes.Error:
		e.varint(3, 2)
	}
	e.close(st)
	e.fixed32(16, spanFlags(sc.TraceFlags(), parent))
	e.close(m)
}

// spanFlags is SpanFlags: the W3C trace flags in the low byte, then
// CONTEXT_HAS_IS_REMOTE (0x100, always: this SDK knows) and
// CONTEXT_IS_REMOTE (0x200) when the parent came from another process.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200
	}
	return f
}

// spanKind is Span.SpanKind: INTERNAL = 1, SERVER = 2, CLIENT = 3,
// PRODUCER = 4, CONSUMER = 5, else UNSPECIFIED = 0.
func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}
