package relayfloor

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/internal/privateca"
	"github.com/llmgw/gateway/scripts/stub"
)

// startFloor serves a stub and the floor in front of it on loopback.
func startFloor(t testing.TB, opts stub.Options) (*stub.Server, string) {
	t.Helper()
	st := stub.New(opts)
	return st, floorFor(t, st, httptest.NewServer(st), nil)
}

// floorFor serves the floor, trusting roots, in front of backend, which
// serves st, and returns its URL; all three close with the test.
func floorFor(t testing.TB, st *stub.Server, backend *httptest.Server, roots *x509.CertPool) string {
	t.Helper()
	t.Cleanup(backend.Close)
	t.Cleanup(st.Close)
	u, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	floor := httptest.NewServer(New(u, 16, roots, log.New(io.Discard, "", 0)))
	t.Cleanup(floor.Close)
	return floor.URL
}

func postStream(t *testing.T, base string) *http.Response {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp
}

// TestFloorFlushesEachEvent proves the floor relays an event as soon as the
// stub writes it: the stub emits its next event only after the client has
// read the previous one through the floor, so a relay that buffered would
// block here.
func TestFloorFlushesEachEvent(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	_, base := startFloor(t, stub.Options{Tokens: 2, Step: step})
	resp := postStream(t, base)
	br := bufio.NewReader(resp.Body)
	// role, 2 tokens, finish, usage, [DONE]
	for i := range 6 {
		// Bounded: a stub whose stream ended early no longer takes a step,
		// and the test must fail saying so rather than hang to the
		// package's timeout.
		select {
		case step <- struct{}{}:
		case <-time.After(30 * time.Second):
			t.Fatalf("event %d: the stub took no step for 30 s (its stream ended?)", i)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("event %d: %q", i, line)
		}
		if i < 5 && !strings.Contains(line, `"stub_emit_ns":`) {
			t.Fatalf("event %d lost the emit stamp: %q", i, line)
		}
		if _, err := br.ReadString('\n'); err != nil { // the blank line
			t.Fatalf("event %d end: %v", i, err)
		}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after [DONE]: %q, %v", rest, err)
	}
}

func TestFloorPassesHeadersAndBody(t *testing.T) {
	t.Parallel()
	st, base := startFloor(t, stub.Options{TTFT: -1, Interval: -1, Tokens: 3})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(stub.TokensHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(body), `"content":" tok"`); got != 1 {
		t.Fatalf("%d tokens, want 1 (X-Stub-Tokens forwarded):\n%s", got, body)
	}
	if st.LastRequest().Header.Get(stub.TokensHeader) != "1" {
		t.Fatal("stub did not get the header")
	}
}

// TestFloorTrustsPrivateCA: the floor relays to an https backend behind a
// private CA it is given, takes h2 when the backend offers it (as the
// gateway's transport does), and refuses the backend without the CA.
func TestFloorTrustsPrivateCA(t *testing.T) {
	t.Parallel()
	pki, err := privateca.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(pki.Cert, pki.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := privateca.Pool(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	st := stub.New(stub.Options{TTFT: -1, Interval: -1, Tokens: 2})
	backend := httptest.NewUnstartedServer(st)
	backend.EnableHTTP2 = true
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	backend.StartTLS()
	resp := postStream(t, floorFor(t, st, backend, roots))
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("err %v:\n%s", err, body)
	}
	if got := st.Stats(); got.Requests != 1 || got.HTTP2 != 1 {
		t.Fatalf("stub stats %+v: want the one request over HTTP/2", got)
	}

	r, err := http.Post(floorFor(t, st, backend, nil)+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusBadGateway {
		t.Fatalf("floor without the CA: status %d, want 502", r.StatusCode)
	}
}
