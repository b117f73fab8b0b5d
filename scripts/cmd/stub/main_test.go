package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/internal/privateca"
	"github.com/llmgw/gateway/scripts/stub"
)

// startRun runs the command with args and returns its base URL, from the
// "stub listening on" line, and a stop that cancels it and returns run's
// error.
func startRun(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, io.Discard)
		pw.CloseWithError(errors.New("run returned"))
		errc <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err != nil {
		cancel()
		t.Fatalf("no listening line: %v (run: %v)", err, <-errc)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "stub listening on ")
	if !ok {
		cancel()
		t.Fatalf("first line %q", line)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(2 * shutdownGrace):
			return errors.New("run did not return after cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + addr, stop
}

func TestRunServesAndStops(t *testing.T) {
	t.Parallel()
	url, stop := startRun(t, "-addr", "127.0.0.1:0", "-ttft=-1ms", "-interval=-1ms", "-tokens", "3", "-api-key", "k", "-name", "s1")
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Stub-Name") != "s1" {
		t.Fatalf("status %d, err %v, headers %v", resp.StatusCode, err, resp.Header)
	}
	if got := strings.Count(string(body), `"content":" tok"`); got != 3 {
		t.Fatalf("%d tokens, want 3:\n%s", got, body)
	}
	if !strings.Contains(string(body), `"completion_tokens":3`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("stream:\n%s", body)
	}
	if err := stop(); err != nil {
		t.Fatalf("run returned %v after cancel, want nil", err)
	}
}

func TestRunProse(t *testing.T) {
	t.Parallel()
	url, _ := startRun(t, "-addr", "127.0.0.1:0", "-tokens", "6", "-prose")
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || strings.Contains(string(body), " tok") || !strings.Contains(string(body), `"completion_tokens":6`) {
		t.Fatalf("status %d, err %v: %s", resp.StatusCode, err, body)
	}
}

// TestRunStopsWithHungRequest checks that a stop is not held up by a
// request that a hang fault holds.
func TestRunStopsWithHungRequest(t *testing.T) {
	t.Parallel()
	url, stop := startRun(t, "-addr", "127.0.0.1:0")
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Stub-Fault", "hang")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// The request may or may not have arrived when stop runs; either way
	// run must return promptly and the client must not get a 200.
	time.Sleep(20 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	if err := <-done; err == nil {
		t.Fatal("hung request got a response")
	}
}

func TestRunBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-tokens", "x"}, {"-nope"}, {"extra"}, {"-addr", "256.0.0.1:1"}, {"-tls-cert", "c.pem"}, {"-http2"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

// TestRunTLS: with a certificate the stub serves HTTPS, offers h2 only
// with -http2, and its stats count the requests that came over HTTP/2.
func TestRunTLS(t *testing.T) {
	t.Parallel()
	pki, err := privateca.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := privateca.Pool(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		proto int
	}{
		{"http1 only", nil, 1},
		{"http2 offered", []string{"-http2"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, _ := startRun(t, append([]string{"-addr", "127.0.0.1:0", "-tls-cert", pki.Cert, "-tls-key", pki.Key, "-tokens", "2", "-ttft=-1ms", "-interval=-1ms"}, tc.flags...)...)
			base = "https" + strings.TrimPrefix(base, "http")
			// A client that would take h2 whenever it is offered, as the
			// gateway's does.
			client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
			t.Cleanup(client.CloseIdleConnections)
			resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("status %d, err %v:\n%s", resp.StatusCode, err, body)
			}
			if resp.ProtoMajor != tc.proto {
				t.Fatalf("negotiated %s, want HTTP/%d", resp.Proto, tc.proto)
			}
			resp, err = client.Get(base + statsPath)
			if err != nil {
				t.Fatal(err)
			}
			var st stub.Stats
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			wantH2 := int64(0)
			if tc.proto == 2 {
				wantH2 = 1
			}
			if st.Requests != 1 || st.HTTP2 != wantH2 {
				t.Fatalf("stats %+v: want 1 request, %d over HTTP/2 (the stats request itself not counted)", st, wantH2)
			}
		})
	}
}
