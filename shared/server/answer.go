package server

// A non-streaming answer's head: read within the attempt, before the
// client gets a byte, so that an answer that is not the JSON the
// operation returns (a web page, a body cut short) is a backend failure
// the next endpoint can still answer for (issue 22), and so that what the
// gateway records and bills by is read from its documented place in an
// answer of any size (issue 20).

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/llmgw/gateway/shared/sse"
)

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

// checkJSON says what is wrong with a successful non-streaming answer
// ("" = nothing): it must be JSON by its media type (when it names one),
// and, when it fits the head, one whole JSON object.
func checkJSON(resp *http.Response, a *jsonAnswer) string {
	if resp.StatusCode/100 != 2 {
		return ""
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
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
