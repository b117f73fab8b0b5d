package otlp

import (
	"encoding/binary"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protowire"
)

// enc appends an OTLP protobuf message with protowire alone: no generated
// types, no registry, so the binary links neither the OTLP protos nor the
// gRPC and grpc-gateway packages their services pull in. Field numbers are
// those of opentelemetry-proto (common/v1, resource/v1, metrics/v1,
// trace/v1, collector/*/v1); wire_test.go decodes what enc writes with the
// generated types and compares it field by field with what the SDK
// produced.
//
// Plain proto3 fields are omitted when zero, as every proto3 encoder does;
// oneof members and optional fields (an attribute's value, a histogram's
// sum, min and max) are written whatever their value, since their presence
// is meaningful.
type enc struct{ b []byte }

// open starts the embedded message field num and returns where its bytes
// begin, for close.
func (e *enc) open(num protowire.Number) int {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	return len(e.b)
}

// close ends the message opened at start: its length, known only now, is
// inserted before its bytes (each level moves its bytes once; OTLP nests
// about six deep, and an export is kilobytes).
func (e *enc) close(start int) {
	n := len(e.b) - start
	k := protowire.SizeVarint(uint64(n))
	var pad [binary.MaxVarintLen64]byte
	e.b = append(e.b, pad[:k]...)
	copy(e.b[start+k:], e.b[start:start+n])
	protowire.AppendVarint(e.b[:start], uint64(n))
}

func (e *enc) str(num protowire.Number, s string) {
	if s != "" {
		e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
		e.b = protowire.AppendString(e.b, s)
	}
}

func (e *enc) bytes(num protowire.Number, b []byte) {
	if len(b) > 0 {
		e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, b)
	}
}

func (e *enc) varint(num protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, v)
	}
}

func (e *enc) fixed64(num protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, v)
	}
}

func (e *enc) fixed32(num protowire.Number, v uint32) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, num, protowire.Fixed32Type)
		e.b = protowire.AppendFixed32(e.b, v)
	}
}

// double writes num whatever v is (a oneof member or an optional field).
func (e *enc) double(num protowire.Number, v float64) {
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
	e.b = protowire.AppendFixed64(e.b, math.Float64bits(v))
}

// time writes a *_time_unix_nano field; the zero time is 0, omitted.
func (e *enc) time(num protowire.Number, t time.Time) {
	e.fixed64(num, uint64(max(0, t.UnixNano())))
}

// attrs writes kvs as the repeated KeyValue field num.
func (e *enc) attrs(num protowire.Number, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		e.keyValue(num, kv)
	}
}

// attrSet writes a set's attributes (sorted by key) as the field num.
func (e *enc) attrSet(num protowire.Number, s *attribute.Set) {
	for it := s.Iter(); it.Next(); {
		e.keyValue(num, it.Attribute())
	}
}

// keyValue writes common.v1.KeyValue{key = 1, value = 2}.
func (e *enc) keyValue(num protowire.Number, kv attribute.KeyValue) {
	m := e.open(num)
	e.str(1, string(kv.Key))
	v := e.open(2)
	e.value(kv.Value)
	e.close(v)
	e.close(m)
}

// value writes the fields of common.v1.AnyValue, a oneof: string_value = 1,
// bool_value = 2, int_value = 3, double_value = 4, array_value = 5 (its
// values = 1), kvlist_value = 6 (its values = 1), bytes_value = 7. An
// empty value is an AnyValue with none set; a kind this build does not know
// is the string "INVALID", as the SDK's own exporters write it.
func (e *enc) value(v attribute.Value) {
	switch v.Type() {
	case attribute.STRING:
		e.b = protowire.AppendTag(e.b, 1, protowire.BytesType)
		e.b = protowire.AppendString(e.b, v.AsString())
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, 2, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, 3, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.double(4, v.AsFloat64())
	case attribute.BYTESLICE:
		e.b = protowire.AppendTag(e.b, 7, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v.AsByteSlice())
	case attribute.STRINGSLICE:
		array(e, v.AsStringSlice(), attribute.StringValue)
	case attribute.BOOLSLICE:
		array(e, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		array(e, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		array(e, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.SLICE:
		array(e, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		m := e.open(6)
		e.attrs(1, v.AsMap())
		e.close(m)
	case attribute.EMPTY:
	default:
		e.b = protowire.AppendTag(e.b, 1, protowire.BytesType)
		e.b = protowire.AppendString(e.b, "INVALID")
	}
}

// array writes AnyValue.array_value = 5: ArrayValue{values = 1}.
func array[T any](e *enc, xs []T, value func(T) attribute.Value) {
	a := e.open(5)
	for _, x := range xs {
		v := e.open(1)
		e.value(value(x))
		e.close(v)
	}
	e.close(a)
}
