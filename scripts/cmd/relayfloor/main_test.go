package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

func TestRunBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-backend", "ftp://x"}, {"-nope"}, {"extra"}, {"-listen", "256.0.0.1:1"}, {"-ca-file", "/nonexistent/ca.pem"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

// TestRunServes starts the command on a free port in front of a backend,
// relays one request through it, and stops it with the context.
func TestRunServes(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "from the backend "+r.URL.Path)
	}))
	defer backend.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-backend", backend.URL}, &stdout, io.Discard)
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a, ok := strings.CutPrefix(stdout.String(), "relayfloor listening on "); ok && strings.HasSuffix(a, "\n") {
			addr = strings.TrimSpace(a)
			break
		}
	}
	if addr == "" {
		t.Fatalf("not listening: %q", stdout.String())
	}
	resp, err := http.Get("http://" + addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "from the backend /x" {
		t.Errorf("got %q", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}
