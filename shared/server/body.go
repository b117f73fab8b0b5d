package server

// Reading the client's body: capped, pooled, bounded in time, and read
// once (upstream.ParseBody), with each failure mapped to its 400.

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/llmgw/gateway/shared/upstream"
)

// bodyPool holds request bodies (grown to the body's size, kept when
// small).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func putBody(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

func readBody(r *http.Request, max int64, buf []byte) ([]byte, *apiError) {
	tooLarge := bodyTooLarge(max)
	if r.ContentLength > max {
		return buf, tooLarge
	}
	lr := io.LimitReader(r.Body, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return buf, tooLarge
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
func parseBody(raw []byte, op upstream.Operation) (upstream.Body, *apiError) {
	if len(raw) == 0 {
		return upstream.Body{}, emptyBody()
	}
	b, err := upstream.ParseBody(raw)
	if err != nil {
		return b, bodyError(err)
	}
	for f := upstream.MaxTokens; f <= upstream.MaxOutputTokens; f++ {
		if b.Sent(f) && !op.HasCap(f) {
			return b, unsupportedCap(f.String(), op)
		}
	}
	need, field := upstream.HasMessages, "messages"
	switch op {
	case upstream.Responses:
		return b, nil // input may be absent (a prompt template, a continued response)
	case upstream.Messages:
		// max_tokens is required by the Messages API, and is the cap.
		if b.Caps[upstream.MaxTokens] == 0 {
			return b, missingParameter("max_tokens")
		}
	case upstream.CountTokens:
		if b.Stream {
			return b, unsupportedStream()
		}
	case upstream.Completions:
		need, field = upstream.HasPrompt, "prompt"
	case upstream.Embeddings:
		need, field = upstream.HasInput, "input"
	}
	if !b.Has(need) {
		return b, missingParameter(field)
	}
	return b, nil
}
