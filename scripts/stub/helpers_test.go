package stub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fast is a stream shape that never waits, for tests about content.
var fast = Options{TTFT: -1, Interval: -1, Tokens: 5}

// start serves a new stub on loopback; cleanup closes the stub before the
// server so held requests cannot block the server's Close.
func start(t testing.TB, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	st := New(opts)
	ts := httptest.NewServer(st)
	t.Cleanup(ts.Close)
	t.Cleanup(st.Close)
	return st, ts
}

// post sends body to ts's path with headers given as "Name: value".
func post(t testing.TB, ctx context.Context, ts *httptest.Server, path, body string, headers ...string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	return ts.Client().Do(req)
}

// mustPost is post for requests that must get a response.
func mustPost(t testing.TB, ts *httptest.Server, path, body string, headers ...string) *http.Response {
	t.Helper()
	resp, err := post(t, context.Background(), ts, path, body, headers...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// do sends a request with a method (body may be empty) and returns the
// status and body.
func do(t *testing.T, ts *httptest.Server, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	resp, b := doResp(t, ts, method, path, body, headers...)
	return resp.StatusCode, b
}

// doResp is do returning the whole response, its body read and closed.
func doResp(t *testing.T, ts *httptest.Server, method, path, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, readAll(t, resp)
}

// events reads SSE data payloads until the body ends; err is the read
// error that ended it, nil at a clean EOF.
type sseReader struct{ r *bufio.Reader }

func newSSE(body io.Reader) *sseReader { return &sseReader{bufio.NewReader(body)} }

// next returns the next data payload.
func (s *sseReader) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			return data, nil
		}
	}
}

// all reads every remaining payload; err is nil at a clean EOF.
func (s *sseReader) all() ([]string, error) {
	var out []string
	for {
		d, err := s.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return out, err
		}
		out = append(out, d)
	}
}

// chunk is an OpenAI streaming chunk, chat or text completion.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage  *usage `json:"usage"`
	EmitNS int64  `json:"stub_emit_ns"`
}

func decodeStrict(t testing.TB, data string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	if dec.More() {
		t.Fatalf("trailing data in %s", data)
	}
}

// waitFor polls cond until it holds; a failure means it never did.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

// errorBody decodes OpenAI's error JSON.
func errorBody(t testing.TB, b []byte) apiError {
	t.Helper()
	var e struct {
		Error *apiError `json:"error"`
	}
	decodeStrict(t, string(bytes.TrimSpace(b)), &e)
	if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	return *e.Error
}
