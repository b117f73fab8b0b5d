package dispatch

// The checks of an answer before it is relayed, gzip made plain, and a
// JSON answer's head.

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
)

func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

// IsEventStream reports whether h's media type is text/event-stream
// (compared case-insensitively, parameters allowed).
func IsEventStream(h http.Header) bool {
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
	if stream && !IsEventStream(resp.Header) {
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

// plainJSON reports whether ct is application/json without parameters
// (any case, spaces around it), which mime.ParseMediaType would accept
// as JSON: the usual answer's type, told without the parameter map
// ParseMediaType makes.
func plainJSON(ct string) bool {
	const want = "application/json"
	ct = strings.TrimSpace(ct)
	if len(ct) != len(want) {
		return false
	}
	for i := 0; i < len(want); i++ { // ASCII only, as ParseMediaType's tokens
		c := ct[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// jsonAnswer is a JSON answer's first bytes and the scanner that reads
// the whole answer as it is relayed. Pooled: a scanner keeps small copies
// of the members it reads.
type jsonAnswer struct {
	buf   [32 << 10]byte
	n     int
	whole bool // buf[:n] is the whole answer
	scan  sse.AnswerScanner
}

var answerPool = sync.Pool{New: func() any { return new(jsonAnswer) }}

func getAnswer() *jsonAnswer {
	a := answerPool.Get().(*jsonAnswer)
	a.n, a.whole = 0, false
	a.scan.Reset()
	return a
}

// readHead reads the answer until it ends or fills buf. io.ReadFull cannot
// be used: it says ErrUnexpectedEOF both for a short complete body and for
// a body the backend cut, and a cut body must never be relayed as complete.
func (a *jsonAnswer) readHead(body io.Reader) error {
	var err error
	for a.n < len(a.buf) && err == nil {
		var m int
		m, err = body.Read(a.buf[a.n:])
		a.n += m
	}
	a.scan.Write(a.buf[:a.n])
	if err == io.EOF {
		a.whole = true
		return nil
	}
	return err
}

// checkBody says what is wrong with a successful non-streaming answer
// ("" = nothing), by op's answer kind: a JSON answer must be
// JSON by its media type (when it names one) and, when it fits the head,
// one whole JSON object; a binary answer must name one of the row's
// media types (a backend answering speech with an HTML page or a JSON
// error under 200 is a backend failure, never relayed as audio).
func checkBody(resp *http.Response, a *jsonAnswer, op request.Operation) string {
	if resp.StatusCode/100 != 2 {
		return ""
	}
	if op.Answer() == request.AnswerBinary {
		ct := resp.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !op.AnswerMedia(mt) {
			return fmt.Sprintf("answered %s with %q", op.API(), ct)
		}
		return ""
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !plainJSON(ct) {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return fmt.Sprintf("answered with %q, not JSON", ct)
		}
	}
	if a.whole && !a.scan.Complete() {
		return fmt.Sprintf("sent %d bytes that are not one whole JSON object", a.n)
	}
	return ""
}
