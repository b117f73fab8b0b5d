package otlp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// OTLP/gRPC without a gRPC library: one unary call is an HTTP/2 POST of
// the Export method's path whose body is the request message behind a
// five-byte prefix (a compressed flag and a big-endian length), answered
// by the response message the same way and a grpc-status trailer
// (the gRPC over HTTP/2 protocol,
// https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md). The
// message is the one OTLP/HTTP posts, so the encoders are shared. It is
// what the Azure Container Apps managed OpenTelemetry agent accepts, and
// it keeps google.golang.org/grpc out of the binary.

// grpcHeader sets a call's request headers.
func grpcHeader(h http.Header, gzip bool) {
	h.Set("Content-Type", "application/grpc")
	h.Set("Te", "trailers")
	if gzip {
		h.Set("Grpc-Encoding", "gzip")
	}
}

// grpcFrame writes msg behind its length prefix into buf and returns the
// framed bytes (valid until the next call).
func grpcFrame(buf *bytes.Buffer, msg []byte, compressed bool) []byte {
	var prefix [5]byte
	if compressed {
		prefix[0] = 1
	}
	binary.BigEndian.PutUint32(prefix[1:], uint32(len(msg)))
	buf.Reset()
	buf.Write(prefix[:])
	buf.Write(msg)
	return buf.Bytes()
}

// gRPC status codes the OTLP specification calls retryable: CANCELLED,
// DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS.
// RESOURCE_EXHAUSTED is retryable only with a RetryInfo detail, which this
// client does not read, so it is not retried.
func grpcRetryable(code int) bool {
	switch code {
	case 1, 4, 10, 11, 14, 15:
		return true
	}
	return false
}

// errGRPCStatus is a call answered with a status other than OK.
var errGRPCStatus = errors.New("otlp: gRPC status")

// onceGRPC makes one call; retry and wait as once's.
func (p *poster) onceGRPC(ctx context.Context, body []byte) (retry bool, wait time.Duration, err error) {
	resp, retry, err := p.post(ctx, body)
	if err != nil {
		return retry, 0, err
	}
	defer resp.Body.Close()
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	// The trailers arrive after the body's end.
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		// An HTTP answer from something in front of the agent: the gRPC
		// specification maps these four to UNAVAILABLE.
		err = fmt.Errorf("otlp: %s answered %s", p.url, resp.Status)
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true, retryAfter(resp.Header.Get("Retry-After")), err
		}
		return false, 0, err
	}
	// A trailers-only answer (an error before any message) carries the
	// status in its headers.
	status, msg := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	code, cerr := strconv.Atoi(status)
	if cerr != nil {
		if rerr != nil {
			return ctx.Err() == nil, 0, fmt.Errorf("otlp: %s: reading the answer: %w", p.url, rerr)
		}
		return false, 0, fmt.Errorf("otlp: %s answered without a gRPC status (%q)", p.url, resp.Header.Get("Content-Type"))
	}
	if code != 0 {
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		return grpcRetryable(code), 0, fmt.Errorf("%w %d from %s: %s", errGRPCStatus, code, p.url, msg)
	}
	// OK: an uncompressed answer may report a partial success.
	if rerr == nil && len(answer) > 5 && answer[0] == 0 {
		if n := binary.BigEndian.Uint32(answer[1:5]); int(n) == len(answer)-5 {
			return false, 0, partialSuccess(answer[5:])
		}
	}
	return false, 0, nil
}
