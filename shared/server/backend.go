package server

// Checking a backend's answer before it is relayed: what failover reads
// (Retry-After), what makes a success a failure (a stream that is not
// SSE, an encoding the gateway cannot read), and gzip made plain.

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfter parses Retry-After (seconds or an HTTP date, RFC 9110 §10.2.3).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, secs > 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now), true
	}
	return 0, false
}

func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

// isEventStream reports whether h's media type is text/event-stream
// (compared case-insensitively, parameters allowed).
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// checkAnswer says what is wrong with a successful answer the gateway
// cannot relay as it was asked for ("" = nothing): a stream must be
// text/event-stream, and a body must be plain or gzip (the gateway never
// asks for an encoding, and it must scan what it relays).
func checkAnswer(resp *http.Response, stream bool) string {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ""
	}
	if stream && !isEventStream(resp.Header) {
		return fmt.Sprintf("answered a streaming request with %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity", "gzip", "x-gzip":
	default:
		return fmt.Sprintf("sent Content-Encoding %q, which the gateway does not decode", ce)
	}
	return ""
}

// decodeBody makes a gzip body plain, so that the header the client gets
// always agrees with the bytes (the gateway scans and may append to them).
// The gzip header is read on the first Read, not here: a stream's first
// bytes may be a while coming.
func decodeBody(resp *http.Response) {
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		resp.Body = &gunzip{src: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
}

type gunzip struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (g *gunzip) Close() error { return g.src.Close() }

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.src)
		if g.err != nil {
			g.err = fmt.Errorf("gzip: %w", g.err)
		}
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}
