package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// Connection limits under test: short, so that the tests are quick; the
// bounds they check are generous (slack), for a busy two-core machine.
const (
	connBodyTimeout   = time.Second
	connHeaderTimeout = time.Second
	connIdleTimeout   = 2 * time.Second
	connMaxHeader     = 4096
	slack             = 3 * time.Second
)

func startBoundedGateway(t *testing.T, stubOpts stub.Options) *gw {
	t.Helper()
	return startGateway(t, options{stubOpts: stubOpts, extra: fmt.Sprintf(
		"body_read_timeout: %s\nread_header_timeout: %s\nidle_timeout: %s\nmax_header_bytes: %d\n",
		connBodyTimeout, connHeaderTimeout, connIdleTimeout, connMaxHeader)})
}

// ended reports whether the connection was closed by the server: EOF, or a
// reset (a close with bytes still unread on the server's side).
func ended(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset")
}

// readToEnd reads the connection until the server closes it; it fails when
// that does not happen before the connection's deadline.
func readToEnd(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	if err == nil || ended(err) {
		return nil
	}
	return err
}

// TestStalledBodiesAreBounded: a client that announces a body and then sends
// nothing, with or without a token, on any route, gets its answer and loses
// its connection within body_read_timeout, while others are served.
func TestStalledBodiesAreBounded(t *testing.T) {
	t.Parallel()
	g := startBoundedGateway(t, stub.Options{})
	tok := g.token("contoso")
	// A proxied route may check the token first (401 at once) or wait for
	// the body first (408 at body_read_timeout): either way it is bounded.
	proxied := []int{http.StatusUnauthorized, http.StatusRequestTimeout}
	routes := []struct {
		method, path, auth string
		status             []int
	}{
		{"POST", "/v1/chat/completions", "", proxied},
		{"POST", "/v1/embeddings", "Bearer not-a-jwt", proxied},
		{"GET", "/healthz", "", []int{http.StatusOK}},
		{"HEAD", "/healthz", "", []int{http.StatusOK}},
		{"GET", "/v1/models", "", []int{http.StatusUnauthorized}},
		{"POST", "/v1/nope", "", []int{http.StatusNotFound}},
		{"PUT", "/v1/chat/completions", "", []int{http.StatusMethodNotAllowed}},
		// With a valid token the body is waited for, and still bounded.
		{"POST", "/v1/chat/completions", "Bearer " + tok, []int{http.StatusRequestTimeout}},
	}
	const conns = 100
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	stalled := make(chan struct{}, conns)
	for i := range conns {
		rt := routes[i%len(routes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
				if err != nil {
					return err
				}
				defer c.Close()
				req := rt.method + " " + rt.path + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
				if rt.auth != "" {
					req += "Authorization: " + rt.auth + "\r\n"
				}
				start := time.Now()
				if _, err := io.WriteString(c, req+"\r\n"); err != nil {
					return err
				}
				stalled <- struct{}{}
				// The bound: answered or closed within
				// body_read_timeout + 2 s.
				_ = c.SetReadDeadline(start.Add(connBodyTimeout + 2*time.Second))
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: rt.method})
				if err != nil {
					return fmt.Errorf("no answer: %w", err)
				}
				resp.Body.Close()
				if !slices.Contains(rt.status, resp.StatusCode) {
					return fmt.Errorf("status %d, want one of %v", resp.StatusCode, rt.status)
				}
				if !resp.Close {
					return errors.New("answer without Connection: close")
				}
				if err := readToEnd(br); err != nil {
					return fmt.Errorf("connection still open %s after the headers: %w", time.Since(start).Round(time.Millisecond), err)
				}
				return nil
			}()
			if err != nil {
				errs <- fmt.Errorf("%s %s (auth %t): %w", rt.method, rt.path, rt.auth != "", err)
			}
		}()
	}
	for range conns {
		<-stalled
	}
	// Meanwhile a well-behaved client is served.
	resp := g.post("/v1/chat/completions", tok, chatBody)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("valid request during the stall: %d %s", resp.StatusCode, b)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestChunkedWithContentLength: net/http reads a request carrying both
// Transfer-Encoding: chunked and Content-Length as chunked; RFC 9112 §6.1
// then requires closing the connection after the answer, so that bytes a
// front proxy read as body are never read here as a next request.
func TestChunkedWithContentLength(t *testing.T) {
	t.Parallel()
	g := startBoundedGateway(t, stub.Options{})
	tok := g.token("contoso")
	smuggled := "GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n"
	tests := []struct {
		name   string
		req    string
		status int
	}{
		{"proxied with a token", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok +
			"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chatBody), chatBody) + smuggled, http.StatusOK},
		{"without a token", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, http.StatusUnauthorized},
		{"healthz", "GET /healthz HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := g.rawConn(t)
			start := time.Now()
			// One write, so the server reads the smuggled request along
			// with the first and closes with nothing left unread.
			if _, err := io.WriteString(c, tt.req); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(start.Add(connBodyTimeout + slack))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !resp.Close {
				t.Fatalf("status %d close %t, want %d and Connection: close: %s", resp.StatusCode, resp.Close, tt.status, body)
			}
			rest, err := io.ReadAll(br)
			if err != nil && !ended(err) {
				t.Fatalf("connection not closed: %v", err)
			}
			if len(rest) > 0 {
				t.Fatalf("the smuggled request was answered: %q", rest)
			}
		})
	}
}

// TestHeaderLimits: a header block over max_header_bytes gets 431 and a
// closed connection; headers that never end are cut at read_header_timeout;
// ordinary headers pass.
func TestHeaderLimits(t *testing.T) {
	t.Parallel()
	g := startBoundedGateway(t, stub.Options{})
	t.Run("over max_header_bytes", func(t *testing.T) {
		t.Parallel()
		c := g.rawConn(t)
		// net/http allows 4 KiB beyond MaxHeaderBytes; send four times the limit.
		big := strings.Repeat("a", 4*connMaxHeader)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: "+big+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(slack))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close {
			t.Fatalf("status %d close %t, want 431 and Connection: close", resp.StatusCode, resp.Close)
		}
		if err := readToEnd(br); err != nil {
			t.Fatalf("connection not closed: %v", err)
		}
	})
	t.Run("under max_header_bytes", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequest(http.MethodGet, g.URL+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("a", connMaxHeader/2))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("headers that never end", func(t *testing.T) {
		t.Parallel()
		c := g.rawConn(t)
		start := time.Now()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(start.Add(connHeaderTimeout + slack))
		if err := readToEnd(c); err != nil {
			t.Fatalf("connection still open after %s: %v", time.Since(start).Round(time.Millisecond), err)
		}
	})
}

// TestIdleKeepAliveClosed: a kept-alive connection with no next request is
// closed after idle_timeout, not before it.
func TestIdleKeepAliveClosed(t *testing.T) {
	t.Parallel()
	g := startBoundedGateway(t, stub.Options{})
	c := g.rawConn(t)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(connIdleTimeout + slack))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d close %t, want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	idle := time.Now()
	if err := readToEnd(br); err != nil {
		t.Fatalf("idle connection still open after %s: %v", time.Since(idle).Round(time.Millisecond), err)
	}
	if d := time.Since(idle); d < connIdleTimeout/2 {
		t.Fatalf("closed after %s, before idle_timeout %s", d, connIdleTimeout)
	}
}

// TestStreamOutlivesBodyDeadline: the body deadline ends with the body; a
// stream that runs longer than body_read_timeout is relayed to its end.
func TestStreamOutlivesBodyDeadline(t *testing.T) {
	t.Parallel()
	tokens := 40
	g := startBoundedGateway(t, stub.Options{Tokens: tokens, Interval: 2 * connBodyTimeout / time.Duration(tokens)})
	resp := g.post("/v1/chat/completions", g.token("contoso"), streamBody)
	defer resp.Body.Close()
	start := time.Now()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d err %v: %s", resp.StatusCode, err, b)
	}
	data := sseData(b)
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream did not end with [DONE] after %s:\n%s", time.Since(start), b)
	}
	if time.Since(start) < connBodyTimeout {
		t.Fatalf("the stream took %s, not longer than body_read_timeout: the test proves nothing", time.Since(start))
	}
}
