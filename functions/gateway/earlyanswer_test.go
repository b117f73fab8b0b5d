package main

// Early answers: a request refused before its body is read (too large,
// no valid token) is answered while the client still sends, and the
// connection lingers, within bounds, until the client has read it.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Lingering bounds under test: short, so that the tests are quick.
const (
	lingerTime    = 2 * time.Second
	lingerTimeout = time.Second
)

// startLingerGateway is a gateway with short lingering bounds and a
// 64 KiB body cap; extra is appended to the top of its config.
func startLingerGateway(t *testing.T, extra string) *gw {
	t.Helper()
	return startGateway(t, options{tenants: fmt.Sprintf("max_body_bytes: 65536\nlingering_time: %s\nlingering_timeout: %s\n%s",
		lingerTime, lingerTimeout, extra)})
}

// TestEarlyAnswerReachesGoClient: Go's client posting a body far over
// max_body_bytes, with a valid token or none, reads the 413 or 401 every
// time. Before, the gateway closed while the client was still
// sending, and the client got "broken pipe" or "connection reset" instead.
func TestEarlyAnswerReachesGoClient(t *testing.T) {
	t.Parallel()
	g := startLingerGateway(t, "")
	tok := g.token("contoso")
	big := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("x", 4<<20) + `"}]}`
	tests := []struct {
		name, token string
		chunked     bool
		status      int
		code        string
	}{
		{"too large, with a token", tok, false, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"too large, chunked", tok, true, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"no token", "", false, http.StatusUnauthorized, "invalid_token"},
		{"bad token, chunked", "not-a-jwt", true, http.StatusUnauthorized, "invalid_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 4 {
				var body io.Reader = strings.NewReader(big)
				if tt.chunked {
					body = struct{ io.Reader }{body} // no length: sent chunked
				}
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", body)
				req.Header.Set("Content-Type", "application/json")
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				// A fresh connection each try, as a new client would open.
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("try %d: %v", i, err)
				}
				openAIError(t, resp, tt.status, tt.code)
			}
		})
	}
}

// TestLingerIsBounded: a raw client that keeps sending after the early
// answer reads the whole answer, and the gateway still ends the connection
// within lingering_time (a client that sends slowly for ever), or after
// lingering_max_bytes (one that sends fast), with a token or without.
func TestLingerIsBounded(t *testing.T) {
	t.Parallel()
	g := startLingerGateway(t, "lingering_max_bytes: 1048576\n")
	tok := g.token("contoso")
	tests := []struct {
		name, auth string
		pace       time.Duration // between 4 KiB writes
		after      time.Duration // the gateway reads on at least this long (it lingers)
		within     time.Duration // and ends the connection within this
		status     int
	}{
		// 200 KB/s: lingering_max_bytes (1 MiB) is not reached within
		// lingering_time, and no gap reaches lingering_timeout.
		{"slow sender, token", "Bearer " + tok, 20 * time.Millisecond, lingerTime / 2, lingerTime + 3*time.Second, http.StatusRequestEntityTooLarge},
		{"slow sender, no token", "", 20 * time.Millisecond, lingerTime / 2, lingerTime + 3*time.Second, http.StatusUnauthorized},
		// At full speed the bound is the size: 1 MiB.
		{"fast sender, token", "Bearer " + tok, 0, 0, lingerTime + 3*time.Second, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := g.rawConn(t)
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n"
			if tt.auth != "" {
				req += "Authorization: " + tt.auth + "\r\n"
			}
			if _, err := io.WriteString(c, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cut := make(chan time.Duration, 1)
			go func() {
				chunk := []byte(strings.Repeat("x", 4<<10))
				for {
					if _, err := c.Write(chunk); err != nil {
						cut <- time.Since(start)
						return
					}
					if tt.pace > 0 {
						time.Sleep(tt.pace)
					}
				}
			}()
			_ = c.SetReadDeadline(start.Add(tt.within + 5*time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while sending: %v", err)
			}
			if !resp.Close {
				t.Errorf("answer without Connection: close")
			}
			openAIError(t, resp, tt.status, "")
			select {
			case d := <-cut:
				if d > tt.within || d < tt.after {
					t.Fatalf("the gateway ended the connection after %s, want after %s and within %s", d.Round(time.Millisecond), tt.after, tt.within)
				}
			case <-time.After(tt.within + 5*time.Second):
				t.Fatalf("the gateway still reads a body it refused after %s", tt.within+5*time.Second)
			}
		})
	}
}

// TestSDKNodeEarlyAnswers: the official npm openai client posting a 3 MB
// prompt (over the default 1 MiB max_body_bytes), with a valid token or a
// bad one, gets the 413 or 401 APIError on each of three tries. Before,
// it got APIConnectionError ("Connection error") after uploading
// the prompt three times.
func TestSDKNodeEarlyAnswers(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	g := startGateway(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "earlyanswers.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pass 2") {
		t.Fatalf("node --test did not pass both tests:\n%s", out)
	}
}
