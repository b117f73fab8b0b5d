package otlp

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/shared/telemetry"
)

// span is a span the exporter records: a request's server span or a
// backend attempt's client span. It is the exporter's own, not the
// trace SDK's: it keeps what its attributes are made of from the request
// or the attempt as it ended, and they are built only when its batch is
// encoded, in the background. A recorded request then costs its path
// four allocations (two spans and their contexts), about 1.1 KB, where
// the SDK's spans cost it about 6 KB and 16: attributes built and copied
// on the request's path, a snapshot at End, a channel send, and the batch
// processor's own goroutine hand-off (make bench's telemetry pair, docs/benchmarks.md). What it records is what
// the SDK's spans recorded (wire_test.go compares the two on the wire).
type span struct {
	sc trace.SpanContext
	// parent is the span's parent: invalid for a root, the caller's
	// (remote) for a trusted traceparent, the request's for an attempt.
	parent trace.SpanContext
	client bool
	// ended: End or AttemptEnd queued the span (once; after that the
	// batch owns it and reads it from another goroutine).
	ended      atomic.Bool
	name       string
	start, end time.Time
	// What its attributes are built from: a server span's request, a
	// client span's attempt and how it ended (only what the attributes
	// use, not the whole record: the span is half the size).
	method, route, tenant, tenantName, pool                       string
	operation, provider, model, responseModel, address, errorType string
	status, attempts, port, priority                              int
	inputTokens, outputTokens                                     int64
	stream, usage                                                 bool
}

// endRequest records the server span's request as it ended.
func (s *span) endRequest(r *telemetry.Request) {
	s.method, s.route, s.tenant, s.tenantName, s.pool = r.Method, r.Route, r.Tenant, r.TenantName, r.Pool
	s.operation, s.provider, s.model, s.responseModel, s.address, s.errorType = r.Operation, r.Provider, r.Model, r.ResponseModel, r.ServerAddress, r.ErrorType
	s.status, s.attempts = r.Status, r.Attempts
	s.inputTokens, s.outputTokens, s.stream, s.usage = r.InputTokens, r.OutputTokens, r.Stream, r.Usage
}

// endAttempt records the client span's attempt and how it ended.
func (s *span) endAttempt(a *telemetry.Attempt, r telemetry.Result) {
	s.operation, s.provider, s.model, s.responseModel, s.address, s.errorType = a.Operation, a.Provider, a.Model, a.ResponseModel, a.ServerAddress, r.ErrorType
	s.port, s.priority, s.status = a.ServerPort, a.Priority, r.Status
}

// spanCtx is a context with a request's or attempt's span: the span's
// context, and the span itself when it is recorded (one the sampler
// passed over costs no span, only its context, so that the backend is
// told the trace). One allocation, where context.WithValue would box
// the span context in a second.
type spanCtx struct {
	context.Context
	sc  trace.SpanContext
	rec *span // nil: not recorded
}

// spanKey is the key under which a spanCtx finds itself.
type spanKey struct{}

func (c *spanCtx) Value(key any) any {
	if key == (spanKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// withSpan is ctx with the span of context sc (rec: recorded).
func withSpan(ctx context.Context, sc trace.SpanContext, rec *span) context.Context {
	return &spanCtx{Context: ctx, sc: sc, rec: rec}
}

// parentOf is the span context a new span in ctx is the child of: the
// exporter's own, or a caller's that Begin extracted.
func parentOf(ctx context.Context) trace.SpanContext {
	if c, ok := ctx.Value(spanKey{}).(*spanCtx); ok {
		return c.sc
	}
	return trace.SpanContextFromContext(ctx)
}

// recorded is ctx's span when the exporter records it.
func recorded(ctx context.Context) *span {
	if c, ok := ctx.Value(spanKey{}).(*spanCtx); ok {
		return c.rec
	}
	return nil
}

// newSpan decides a new span under parent: its span context, and whether
// it is recorded. A root gets a trace ID of its own; the span's flags and
// tracestate are its parent's, sampled or not, as the SDK sets them.
func (e *Exporter) newSpan(parent trace.SpanContext) (trace.SpanContext, bool) {
	c := trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: newSpanID(),
		TraceFlags: parent.TraceFlags() &^ trace.FlagsSampled, TraceState: parent.TraceState()}
	if !parent.IsValid() {
		c = trace.SpanContextConfig{TraceID: newTraceID(), SpanID: c.SpanID}
	}
	rec := e.sampler.records(parent, c.TraceID)
	if rec {
		c.TraceFlags |= trace.FlagsSampled
	}
	return trace.NewSpanContext(c), rec
}

// setTraceparent writes a W3C traceparent (version 00) and the
// tracestate, if any, into h, as the propagator does (only the sampled
// flag is written).
func setTraceparent(h http.Header, sc trace.SpanContext) {
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	h["Traceparent"] = []string{string(b[:])}
	if ts := sc.TraceState(); ts.Len() > 0 {
		h["Tracestate"] = []string{ts.String()}
	}
}

// attributes appends the span's attributes, in the order the gateway
// has always set them.
func (s *span) attributes(kv []attribute.KeyValue) []attribute.KeyValue {
	if s.client {
		kv = append(genAIAttrs(kv, s.operation, s.provider, s.model, s.responseModel, s.address, s.port),
			attribute.Int("llmgw.endpoint.priority", s.priority))
		if s.status != 0 {
			kv = append(kv, attribute.Int("http.response.status_code", s.status))
		}
		if s.errorType != "" {
			kv = append(kv, attribute.String("error.type", s.errorType))
		}
		return kv
	}
	kv = append(kv,
		attribute.String("http.request.method", s.method),
		attribute.String("http.route", s.route),
		attribute.Int("http.response.status_code", s.status),
		attribute.String("llmgw.tenant.id", s.tenant),
		attribute.String("llmgw.tenant.name", s.tenantName),
		attribute.Int("llmgw.attempts", s.attempts),
	)
	if s.operation != "" {
		kv = append(kv,
			attribute.String("gen_ai.operation.name", s.operation),
			attribute.String("gen_ai.provider.name", s.provider),
			attribute.String("gen_ai.request.model", s.model),
			attribute.String("gen_ai.response.model", s.responseModel),
			attribute.String("server.address", s.address),
			attribute.String("llmgw.pool", s.pool),
			attribute.Bool("llmgw.stream", s.stream),
		)
		if s.usage {
			kv = append(kv, attribute.Int64("gen_ai.usage.input_tokens", s.inputTokens), attribute.Int64("gen_ai.usage.output_tokens", s.outputTokens))
		}
	}
	if s.errorType != "" {
		kv = append(kv, attribute.String("error.type", s.errorType))
	}
	return kv
}

// Batching defaults: the specification's OTEL_BSP_* defaults.
const (
	DefaultBatchDelay = 5 * time.Second
	DefaultQueueSize  = 2048
	DefaultBatchSize  = 512
)

// batch queues ended spans and exports them: a batch as soon as one is
// full, the rest every delay and at Flush, as the SDK's batch span
// processor does. A span that finds the queue full is dropped and
// counted (reported with the next export's error), as there.
type batch struct {
	out            *spanExporter
	res            *resource.Resource
	size, max      int
	delay, timeout time.Duration
	// onError is told a background export's error: otel.Handle, which
	// the gateway logs.
	onError func(error)

	mu      sync.Mutex
	queue   []*span
	dropped int
	shut    bool

	kick chan struct{} // a batch is full
	// one holds the export running (cap 1): a Flush waits for the
	// background export in flight, whose spans left the queue already,
	// as the SDK's ForceFlush does (on Lambda the sandbox may freeze as
	// soon as the flush returns).
	one  chan struct{}
	stop chan struct{} // closed at Shutdown
	done chan struct{} // closed when the loop returned
}

func newBatch(out *spanExporter, res *resource.Resource, cfg Config) *batch {
	b := &batch{out: out, res: res, size: cfg.BatchSize, max: cfg.QueueSize, delay: cfg.BatchDelay, timeout: cfg.BatchTimeout,
		onError: otel.Handle, kick: make(chan struct{}, 1), one: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if b.max <= 0 {
		b.max = DefaultQueueSize
	}
	if b.size <= 0 {
		b.size = DefaultBatchSize
	}
	b.size = min(b.size, b.max)
	if b.delay <= 0 {
		b.delay = DefaultBatchDelay
	}
	if b.timeout <= 0 {
		b.timeout = cfg.Timeout
	}
	go b.loop()
	return b
}

// add queues an ended span (after shutdown, none: nothing would send
// it, and it was not dropped for a full queue).
func (b *batch) add(s *span) {
	b.mu.Lock()
	if b.shut || len(b.queue) >= b.max {
		if !b.shut {
			b.dropped++
		}
		b.mu.Unlock()
		return
	}
	b.queue = append(b.queue, s)
	full := len(b.queue) >= b.size
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// pending is how many spans wait to be exported.
func (b *batch) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// loop exports in the background until Shutdown; its errors go to
// onError, as the SDK's go to the OpenTelemetry error handler.
func (b *batch) loop() {
	defer close(b.done)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		if err := b.export(ctx); err != nil {
			b.onError(err)
		}
		cancel()
		t.Reset(b.delay)
	}
}

// export sends every span queued when it is called or while it runs, a
// batch at a time, until ctx ends, after the export in flight, if any;
// the spans of a failed batch are lost, as the SDK's are.
func (b *batch) export(ctx context.Context) error {
	select {
	case b.one <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.one }()
	var errs error
	for ctx.Err() == nil {
		b.mu.Lock()
		n := min(len(b.queue), b.size)
		if n == 0 {
			dropped := b.dropped
			b.dropped = 0
			b.mu.Unlock()
			if dropped > 0 {
				errs = errors.Join(errs, fmt.Errorf("otlp: %d spans dropped: the export queue of %d was full", dropped, b.max))
			}
			return errs
		}
		spans := make([]*span, n)
		copy(spans, b.queue)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		if err := b.out.export(ctx, func(buf []byte) ([]byte, error) { return appendSpans(buf, b.res, spans), nil }); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	return errors.Join(errs, ctx.Err())
}

// shutdown stops the loop, exports what is queued and shuts the sender
// down; spans ended after it are dropped.
func (b *batch) shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		return nil
	}
	b.shut = true
	b.mu.Unlock()
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
	}
	err := b.export(ctx)
	return errors.Join(err, b.out.Shutdown(ctx))
}
