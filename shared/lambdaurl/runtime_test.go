package lambdaurl_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
)

// gatedUpstream is a stub SSE backend that emits event k only once the
// test opens gate k.
type gatedUpstream struct {
	URL   string
	gates []chan struct{}
}

func startGatedUpstream(t *testing.T, n int) *gatedUpstream {
	t.Helper()
	u := &gatedUpstream{gates: make([]chan struct{}, n)}
	for i := range u.gates {
		u.gates[i] = make(chan struct{})
	}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, g := range u.gates {
			select {
			case <-g:
			case <-r.Context().Done():
				return
			case <-stop:
				return
			}
			fmt.Fprintf(w, "data: event %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: unblocks handlers so Close returns
	u.URL = srv.URL
	return u
}

func invokeRelay(t *testing.T, rt *lambdatest.RuntimeAPI, query url.Values) *lambdatest.Invocation {
	t.Helper()
	ev := events.LambdaFunctionURLRequest{
		Version: "2.0", RawPath: "/relay", RawQueryString: query.Encode(),
		RequestContext: events.LambdaFunctionURLRequestContext{HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: "GET"}},
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := rt.Invoke(testContext(t), payload, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// startStreamFn runs testdata/streamfn, built with -tags lambda.norpc as
// production is, against a fresh Runtime API: the real aws-lambda-go
// runtime client posts its responses.
func startStreamFn(t *testing.T) *lambdatest.RuntimeAPI {
	t.Helper()
	bin := lambdatest.BuildTestBinary(t, "./testdata/streamfn", "lambda.norpc")
	rt := lambdatest.StartRuntimeAPI(t)
	lambdatest.StartFunction(t, bin, []string{rt.Env()})
	return rt
}

// TestIncrementalDeliveryThroughRuntimeAPI proves that each flushed event
// leaves the function process as it is produced: the stub backend may emit
// event k+1 only after event k has been received by the Runtime API (read
// there chunk by chunk). A lambdaurl or runtime client that buffered the
// response would deadlock here, and the test fails at its timeout.
func TestIncrementalDeliveryThroughRuntimeAPI(t *testing.T) {
	t.Parallel()
	rt := startStreamFn(t)
	const n = 4
	up := startGatedUpstream(t, n)
	inv := invokeRelay(t, rt, url.Values{"upstream": {up.URL}})
	ctx := testContext(t)

	close(up.gates[0])
	prelude, body, err := lambdatest.ParseStreamingResponse(inv.Body(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if prelude.StatusCode != 200 || prelude.Headers["Content-Type"] != "text/event-stream" {
		t.Errorf("prelude = %+v", prelude)
	}
	events := bufio.NewReader(body)
	for i := range n {
		ev, err := readEvent(events)
		if err != nil {
			t.Fatalf("event %d not received by the Runtime API before event %d was emitted: %v", i, i+1, err)
		}
		if want := fmt.Sprintf("data: event %d\n\n", i); ev != want {
			t.Fatalf("event %d = %q, want %q", i, ev, want)
		}
		if i+1 < n {
			close(up.gates[i+1])
		}
	}

	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Endpoint != "response" || res.Header.Get("Content-Type") != lambdatest.StreamingContentType {
		t.Errorf("posted to %s with Content-Type %q", res.Endpoint, res.Header.Get("Content-Type"))
	}
	if len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked" {
		t.Errorf("TransferEncoding = %q, want chunked", res.TransferEncoding)
	}
	if len(res.Chunks) < n {
		t.Errorf("%d chunks, want at least one per event (%d)", len(res.Chunks), n)
	}
	if et := res.ErrorType(); et != "" || res.ReadErr != nil {
		t.Errorf("error type %q, read error %v", et, res.ReadErr)
	}
}

// TestPanicMidStreamThroughRuntimeAPI: a panic after the first event ends
// the stream with an error the runtime reports in its trailer, and the
// function keeps serving the next invocation.
func TestPanicMidStreamThroughRuntimeAPI(t *testing.T) {
	t.Parallel()
	rt := startStreamFn(t)
	up := startGatedUpstream(t, 2)
	close(up.gates[0])
	close(up.gates[1])
	ctx := testContext(t)

	inv := invokeRelay(t, rt, url.Values{"upstream": {up.URL}, "panic": {"after"}})
	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.ErrorType(); got != "PanicError" {
		t.Errorf("error type = %q, want PanicError (trailer %v)", got, res.Trailer)
	}
	_, body, err := lambdatest.ParseStreamingResponse(bytes.NewReader(res.Body))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(body); string(b) != "data: event 0\n\n" {
		t.Errorf("body = %q, want only the first event", b)
	}

	inv = invokeRelay(t, rt, url.Values{"upstream": {up.URL}})
	res, err = inv.Wait(ctx)
	if err != nil {
		t.Fatalf("invocation after the panic: %v", err)
	}
	if res.ErrorType() != "" {
		t.Errorf("invocation after the panic failed: %v", res.Trailer)
	}
}
