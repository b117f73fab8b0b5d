package server

// Reading the client's body: capped, pooled, bounded in time, and read
// once (request.ParseBody), with each failure mapped to its 400.

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/llmgw/gateway/shared/request"
)

// bodyPool holds request bodies (grown to the body's size, kept when
// small).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// bodyBuffers lends bodyPool's buffers to dispatch, to rewrite an
// attempt's body in.
type bodyBuffers struct{}

func (bodyBuffers) Get() *[]byte  { return bodyPool.Get().(*[]byte) }
func (bodyBuffers) Put(b *[]byte) { putBody(b) }

func putBody(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

func readBody(r *http.Request, max int64, buf []byte) ([]byte, *apiError) {
	if r.ContentLength > max {
		return buf, bodyTooLarge(max)
	}
	lr := io.LimitReader(r.Body, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return buf, bodyTooLarge(max)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return buf, bodyTimeout()
			}
			return buf, bodyReadFailed(err)
		}
	}
}

// parseBody reads the routing fields and checks what each operation needs.
func parseBody(raw []byte, op request.Operation) (request.Body, *apiError) {
	if len(raw) == 0 {
		return request.Body{}, emptyBody()
	}
	b, err := request.ParseBody(raw)
	if err != nil {
		return b, bodyError(err)
	}
	// The row's trigger says which field asks for a stream; from here on
	// b.Stream is the answer's kind: SSE, or the row's JSON or binary.
	b.Stream = op.AsksStream(&b)
	for f := request.MaxTokens; f <= request.MaxOutputTokens; f++ {
		if b.Sent(f) && !op.HasCap(f) {
			return b, unsupportedCap(f.String(), op)
		}
	}
	if op.CapRequired() && b.Caps[op.CapField()] == 0 {
		return b, missingParameter(op.CapField().String())
	}
	if !op.Streams() && b.Stream {
		return b, unsupportedStream(op)
	}
	need, field := op.Requires()
	if need != 0 && !b.Has(need) {
		return b, missingParameter(field)
	}
	return b, nil
}
