package server

// Reading the client's body: capped, pooled, bounded in time, and read
// once (upstream.ParseBody), with each failure mapped to its 400.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/llmgw/gateway/shared/upstream"
)

// Pools: request bodies (grown to the body's size, kept when small) and
// fixed 32 KiB copy buffers for JSON answers.
var (
	bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
	copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// rewriteSlack covers what a rewrite adds: a longer model name,
// "stream_options":{"include_usage":true} and an output cap.
const rewriteSlack = 144

func putBody(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

func readBody(r *http.Request, max int64, buf []byte) ([]byte, *apiError) {
	tooLarge := invalidRequest(http.StatusRequestEntityTooLarge, "request_too_large", "",
		fmt.Sprintf("request body exceeds the gateway's limit of %d bytes", max))
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
				return buf, invalidRequest(http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time")
			}
			return buf, invalidRequest(http.StatusBadRequest, "invalid_body", "", "reading the request body failed: "+err.Error())
		}
	}
}

// parseBody reads the routing fields and checks what each operation needs.
func parseBody(raw []byte, op upstream.Operation) (upstream.Body, *apiError) {
	if len(raw) == 0 {
		return upstream.Body{}, invalidRequest(http.StatusBadRequest, "invalid_json", "", "request body is empty; send a JSON object")
	}
	b, err := upstream.ParseBody(raw)
	var ke *upstream.KeyError
	var ie *upstream.IntError
	switch {
	case errors.As(err, &ke):
		code := "unknown_parameter"
		if ke.Duplicate {
			code = "duplicate_parameter"
		}
		return b, invalidRequest(http.StatusBadRequest, code, ke.Param, ke.Error())
	case errors.Is(err, upstream.ErrMissingModel):
		return b, invalidRequest(http.StatusBadRequest, "missing_required_parameter", "model", "you must provide a model parameter")
	case errors.Is(err, upstream.ErrModelType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "model", err.Error())
	case errors.Is(err, upstream.ErrStreamType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "stream", err.Error())
	case errors.Is(err, upstream.ErrPreviousType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "previous_response_id", err.Error())
	case errors.As(err, &ie):
		code := "invalid_type"
		if ie.BelowMin {
			code = "integer_below_min_value"
		}
		return b, invalidRequest(http.StatusBadRequest, code, ie.Param, ie.Error())
	case errors.Is(err, upstream.ErrOptionsType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "stream_options", err.Error())
	case err != nil:
		return b, invalidRequest(http.StatusBadRequest, "invalid_json", "", err.Error())
	}
	need, field := upstream.HasMessages, "messages"
	switch op {
	case upstream.Responses:
		return b, nil // input may be absent (a prompt template, a continued response)
	case upstream.Completions:
		need, field = upstream.HasPrompt, "prompt"
	case upstream.Embeddings:
		need, field = upstream.HasInput, "input"
	}
	if !b.Has(need) {
		return b, invalidRequest(http.StatusBadRequest, "missing_required_parameter", field, "missing required parameter: '"+field+"'")
	}
	return b, nil
}
