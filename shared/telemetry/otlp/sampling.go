package otlp

import (
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// sampler decides which spans are recorded, exactly as the SDK's sampler
// of the same name (OTEL_TRACES_SAMPLER) decides them. A request the
// sampler passes over (the deploys' ratio sampler records one in ten)
// costs two random numbers and a span context in its context, and a
// traceparent for each backend attempt.
//
// The ratio samplers decide as the SDK's TraceIDRatioBased does, on the
// trace ID, so a trace this gateway records is one a ratio sampler
// downstream records too; the parent-based ones follow a valid parent's
// sampled flag (a trusted caller's, or the request's for an attempt).
type sampler struct {
	// parentBased: a span with a valid parent is recorded when its parent
	// was sampled; roots decides the others.
	parentBased bool
	roots       rootRule
	// bound: for ratioRoots, a trace is recorded when its ID's last 8
	// bytes, read big-endian and shifted right once, are below it (the
	// SDK's rule).
	bound uint64
}

// rootRule is what a sampler does with a span it decides by itself.
type rootRule uint8

const (
	noRoots rootRule = iota
	allRoots
	ratioRoots
)

// newSampler is the named sampler (FromEnv checked the name; "" is
// DefaultSampler, parent-based always_on).
func newSampler(name string, ratio float64) sampler {
	s := sampler{parentBased: name == "" || name == "parentbased_always_on" || name == "parentbased_always_off" || name == "parentbased_traceidratio"}
	switch name {
	case "always_off", "parentbased_always_off":
		s.roots = noRoots
	case "traceidratio", "parentbased_traceidratio":
		switch {
		case ratio >= 1:
			s.roots = allRoots
		case ratio <= 0:
			s.roots = noRoots
		default:
			s.roots, s.bound = ratioRoots, uint64(ratio*(1<<63))
		}
	default:
		s.roots = allRoots
	}
	return s
}

// records reports whether a new span of trace tid under parent (invalid:
// a root) is recorded.
func (s sampler) records(parent trace.SpanContext, tid trace.TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	switch s.roots {
	case allRoots:
		return true
	case ratioRoots:
		return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
	}
	return false
}

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
