package otlp

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"

	"go.opentelemetry.io/otel/trace"
)

// roots is the sampler's decision for a request's own (root) span, made
// by the exporter before the SDK sees the span: most requests are not
// recorded (DefaultSampler records one in ten), and a request the
// sampler passes over then costs two random numbers and a span context
// in its context, not an SDK span, its options and sampler call for the
// request and again for each backend attempt.
//
// It decides exactly as the SDK's TraceIDRatioBased does, on a trace ID
// the exporter draws; a root it records is started by the SDK with that
// same trace ID (idGenerator), so the SDK's sampler decides it the same
// way and a recorded trace's ID is one a ratio sampler downstream also
// records.
type roots struct {
	// decide: the exporter decides roots and drops their children
	// (the samplers below); false: every span goes to the SDK
	// (always_on, parentbased_always_on, a ratio of 1).
	decide bool
	// bound: a root is recorded when its trace ID's last 8 bytes, read
	// big-endian and shifted right once, are below it (the SDK's rule).
	bound uint64
}

// newRoots is the exporter's part of the named sampler (FromEnv checked
// the name; "" is not passed).
func newRoots(name string, ratio float64) roots {
	switch name {
	case "always_off", "parentbased_always_off":
		return roots{decide: true}
	case "traceidratio", "parentbased_traceidratio":
		switch {
		case ratio >= 1:
			return roots{}
		case ratio <= 0:
			return roots{decide: true}
		}
		return roots{decide: true, bound: uint64(ratio * (1 << 63))}
	}
	return roots{}
}

// records reports whether the sampler records a root span of trace tid.
func (r roots) records(tid trace.TraceID) bool {
	return binary.BigEndian.Uint64(tid[8:16])>>1 < r.bound
}

// drops reports whether the sampler drops a new span whose parent is
// parent, which the exporter then starts without the SDK: a local parent
// it did not record (ParentBased drops the children of a dropped local
// parent; traceidratio decides a child on its trace ID, as it decided
// the root; always_off drops everything). A remote parent, or one with
// a tracestate to carry, goes to the SDK.
func (r roots) drops(parent trace.SpanContext) bool {
	return r.decide && parent.IsValid() && !parent.IsSampled() && !parent.IsRemote() && parent.TraceState().Len() == 0
}

// drawnTraceID carries the trace ID the exporter drew for a root it
// records, to idGenerator.
type drawnTraceID struct{}

// idGenerator is the SDK's ID generator, with the trace ID of a root the
// exporter decided to record.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tid, ok := ctx.Value(drawnTraceID{}).(trace.TraceID); ok {
		return tid, newSpanID()
	}
	return newTraceID(), newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newTraceID and newSpanID draw valid (non-zero) IDs, as the SDK's own
// generator does (math/rand/v2's per-thread source: no lock).
func newTraceID() trace.TraceID {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// setTraceparent writes a W3C traceparent (version 00) into h, as the
// propagator would for a span context without a tracestate.
func setTraceparent(h http.Header, tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags) {
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(flags)})
	h["Traceparent"] = []string{string(b[:])}
}
