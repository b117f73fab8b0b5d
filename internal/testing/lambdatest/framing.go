package lambdatest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// StreamingContentType is the Content-Type of a Function URL streaming
// response as the function posts it to the Runtime API.
const StreamingContentType = "application/vnd.awslambda.http-integration-response"

// maxPrelude bounds the JSON prelude ParseStreamingResponse accepts.
const maxPrelude = 64 << 10

// ErrNoPrelude means a body did not start with a JSON prelude ended by
// eight NUL bytes.
var ErrNoPrelude = errors.New("lambdatest: no streaming response prelude")

// Prelude is the JSON head of a Function URL streaming response: what the
// Function URL turns into the HTTP status line, headers and Set-Cookie.
type Prelude struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers,omitempty"`
	Cookies    []string          `json:"cookies,omitempty"`
}

// Header returns the prelude's headers and cookies as an http.Header, the
// way the Function URL client sees them.
func (p *Prelude) Header() http.Header {
	h := make(http.Header, len(p.Headers)+1)
	for k, v := range p.Headers {
		h.Set(k, v)
	}
	for _, c := range p.Cookies {
		h.Add("Set-Cookie", c)
	}
	return h
}

// ParseStreamingResponse splits a Function URL streaming response (JSON
// prelude, eight NUL bytes, body) into its prelude and a reader of the body
// that passes bytes on as r yields them. A JSON text cannot hold a raw NUL,
// so the first eight NULs end the prelude.
func ParseStreamingResponse(r io.Reader) (*Prelude, io.Reader, error) {
	br := bufio.NewReader(r)
	var s preludeScanner
	for {
		b, err := br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, fmt.Errorf("%w: after %d bytes: %w", ErrNoPrelude, len(s.head), err)
		}
		end, err := s.scan(b)
		if err != nil {
			return nil, nil, err
		}
		if end {
			break
		}
	}
	var p Prelude
	dec := json.NewDecoder(bytes.NewReader(s.head))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNoPrelude, err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("%w: data after the JSON object", ErrNoPrelude)
	}
	return &p, br, nil
}

// preludeScanner finds the end of a streaming response's prelude, byte by
// byte: the first eight NUL bytes, which no JSON text can hold.
type preludeScanner struct {
	head  []byte // the prelude's JSON so far
	zeros int
}

// scan takes the next byte of the response and reports whether it was the
// eighth NUL, the last byte of the prelude.
func (s *preludeScanner) scan(b byte) (end bool, err error) {
	if b == 0 {
		s.zeros++
		return s.zeros == 8, nil
	}
	if s.zeros > 0 || len(s.head) >= maxPrelude {
		return false, fmt.Errorf("%w: bad delimiter or prelude over %d bytes", ErrNoPrelude, maxPrelude)
	}
	s.head = append(s.head, b)
	return false, nil
}

// URLEvent returns the Function URL event (payload format 2.0) that AWS
// would deliver for r, so a test can send the same request to an HTTP
// server and to a Lambda function. It reads r.Body. As a Function URL does,
// it lower-cases header names, joins repeated headers with commas, moves
// Cookie headers into Cookies, and base64-encodes a body that is not UTF-8
// text.
func URLEvent(r *http.Request) (events.LambdaFunctionURLRequest, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return events.LambdaFunctionURLRequest{}, fmt.Errorf("lambdatest: reading request body: %w", err)
		}
		body = b
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	sourceIP := "127.0.0.1"
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		sourceIP = h
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	now := time.Now()
	ev := events.LambdaFunctionURLRequest{
		Version:        "2.0",
		RawPath:        r.URL.EscapedPath(),
		RawQueryString: r.URL.RawQuery,
		Headers:        make(map[string]string, len(r.Header)+1),
		RequestContext: events.LambdaFunctionURLRequestContext{
			AccountID:    "anonymous",
			RequestID:    rand.Text(),
			APIID:        "testurlid",
			DomainName:   host,
			DomainPrefix: strings.SplitN(host, ".", 2)[0],
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{
				Method:    method,
				Path:      r.URL.Path,
				Protocol:  "HTTP/1.1",
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if ev.RawPath == "" {
		ev.RawPath = "/"
	}
	for k, vv := range r.Header {
		if k == "Cookie" {
			for _, v := range vv {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						ev.Cookies = append(ev.Cookies, c)
					}
				}
			}
			continue
		}
		ev.Headers[strings.ToLower(k)] = strings.Join(vv, ",")
	}
	if host != "" {
		ev.Headers["host"] = host
	}
	if q, err := url.ParseQuery(r.URL.RawQuery); err == nil && len(q) > 0 {
		ev.QueryStringParameters = make(map[string]string, len(q))
		for k, vv := range q {
			ev.QueryStringParameters[k] = strings.Join(vv, ",")
		}
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev, nil
}
