package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

const waitTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// next plays the function's side of /runtime/invocation/next.
func next(t *testing.T, ctx context.Context, rt *RuntimeAPI) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+rt.Addr+"/2018-06-01/runtime/invocation/next", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func post(t *testing.T, ctx context.Context, rt *RuntimeAPI, path string, body io.Reader, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+rt.Addr+"/2018-06-01/runtime/"+path, body)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// fetched queues an invocation and fetches it as the function would.
func fetched(t *testing.T, ctx context.Context, rt *RuntimeAPI) *Invocation {
	t.Helper()
	inv, err := rt.Invoke(ctx, []byte(`{}`), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	next(t, ctx, rt)
	return inv
}

// streamResponse posts a streamed response to inv whose body is what the
// test writes to the returned pipe; the POST's status arrives on posted
// (0 if it failed) once the pipe is closed.
func streamResponse(ctx context.Context, rt *RuntimeAPI, inv *Invocation) (pw *io.PipeWriter, posted <-chan int) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+rt.Addr+"/2018-06-01/runtime/invocation/"+inv.ID+"/response", pr)
	req.Header.Set("Content-Type", StreamingContentType)
	req.Header.Set(HeaderResponseMode, "streaming")
	status := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	return pw, status
}

func TestRuntimeAPINext(t *testing.T) {
	t.Parallel()
	rt := StartRuntimeAPI(t)
	ctx := testContext(t)
	deadline := time.Now().Add(42 * time.Second)
	inv, err := rt.Invoke(ctx, []byte(`{"k":1}`), deadline)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := next(t, ctx, rt)
	if resp.StatusCode != 200 || string(body) != `{"k":1}` {
		t.Fatalf("next = %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get(HeaderRequestID); got != inv.ID {
		t.Errorf("request id = %q, want %q", got, inv.ID)
	}
	if got := resp.Header.Get(HeaderDeadlineMS); got != strconv.FormatInt(deadline.UnixMilli(), 10) {
		t.Errorf("deadline = %q", got)
	}
	if resp.Header.Get(HeaderFunctionARN) != FunctionARN {
		t.Errorf("arn = %q", resp.Header.Get(HeaderFunctionARN))
	}
}

// TestRuntimeAPIChunkByChunk proves the Runtime API hands out the bytes
// of a streamed POST as they arrive: the second part is written only after
// the first has been observed through the Invocation.
func TestRuntimeAPIChunkByChunk(t *testing.T) {
	t.Parallel()
	rt := StartRuntimeAPI(t)
	ctx := testContext(t)
	inv := fetched(t, ctx, rt)
	pw, posted := streamResponse(ctx, rt, inv)
	body := inv.Body(ctx)
	for _, part := range []string{"first part", "second part", "third"} {
		if _, err := io.WriteString(pw, part); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(part))
		if _, err := io.ReadFull(body, got); err != nil || string(got) != part {
			t.Fatalf("read %q, %v; want %q before anything more is written", got, err, part)
		}
	}
	pw.Close()
	if status := <-posted; status != http.StatusAccepted {
		t.Errorf("POST status = %d", status)
	}
	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Body) != "first partsecond partthird" || len(res.Chunks) < 3 {
		t.Errorf("body %q in %d chunks", res.Body, len(res.Chunks))
	}
	for i := 1; i < len(res.Chunks); i++ {
		if res.Chunks[i].At.Before(res.Chunks[i-1].At) {
			t.Errorf("chunk %d arrived before chunk %d", i, i-1)
		}
	}
	if res.Endpoint != "response" || res.Header.Get(HeaderResponseMode) != "streaming" || res.TransferEncoding[0] != "chunked" {
		t.Errorf("result = %+v", res)
	}
	if _, err := io.ReadAll(body); err != nil {
		t.Errorf("body after the end: %v", err)
	}
}

func TestRuntimeAPIErrors(t *testing.T) {
	t.Parallel()
	rt := StartRuntimeAPI(t)
	ctx := testContext(t)

	inv := fetched(t, ctx, rt)
	resp := post(t, ctx, rt, "invocation/"+inv.ID+"/error", strings.NewReader(`{"errorType":"X","errorMessage":"m"}`),
		http.Header{HeaderErrorType: {"Function.X"}, "Content-Type": {"application/json"}})
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("error POST = %d", resp.StatusCode)
	}
	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Endpoint != "error" || res.ErrorType() != "Function.X" || !strings.Contains(string(res.Body), `"m"`) {
		t.Errorf("result = %+v", res)
	}

	if resp := post(t, ctx, rt, "invocation/"+inv.ID+"/response", strings.NewReader("x"), nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("second result: status %d, want 403", resp.StatusCode)
	}
	if resp := post(t, ctx, rt, "invocation/nope/response", strings.NewReader("x"), nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown id: status %d, want 400", resp.StatusCode)
	}
	if resp := post(t, ctx, rt, "init/error", strings.NewReader(`{"errorType":"Init"}`), http.Header{HeaderErrorType: {"Runtime.Init"}}); resp.StatusCode != http.StatusAccepted {
		t.Errorf("init error: status %d", resp.StatusCode)
	}
	if errs := rt.InitErrors(); len(errs) != 1 || errs[0].Header.Get(HeaderErrorType) != "Runtime.Init" {
		t.Errorf("InitErrors = %+v", errs)
	}
}

// TestEchoFunctionOnRuntimeAPI runs testdata/echofn, a real lambdaurl
// function, against the Runtime API: a normal response and a handler panic
// before any output, which the runtime posts to /error.
func TestEchoFunctionOnRuntimeAPI(t *testing.T) {
	t.Parallel()
	bin := BuildTestBinary(t, "./testdata/echofn", "lambda.norpc")
	rt := StartRuntimeAPI(t)
	StartFunction(t, bin, []string{rt.Env()})
	ctx := testContext(t)

	invoke := func(query string) *Result {
		t.Helper()
		payload, _ := json.Marshal(events.LambdaFunctionURLRequest{RawPath: "/echo", RawQueryString: query})
		inv, err := rt.Invoke(ctx, payload, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := inv.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := invoke("status=201&events=2")
	p, body, err := ParseStreamingResponse(strings.NewReader(string(res.Body)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	if p.StatusCode != 201 || !strings.HasPrefix(string(b), "data: event 0\n\ndata: event 1\n\ndata: {") {
		t.Errorf("status %d body %q", p.StatusCode, b)
	}

	res = invoke("panic=before")
	if res.Endpoint != "error" || res.ErrorType() != "PanicError" {
		t.Errorf("panic before output: endpoint %s error type %q body %s", res.Endpoint, res.ErrorType(), res.Body)
	}
}

// TestFirstBytes posts a streamed response in parts, each written only
// after the Runtime API has seen the one before, and checks that
// FirstBytes times the first byte and the first body byte by the chunks
// that carried them, wherever the prelude's eight NULs fall.
func TestFirstBytes(t *testing.T) {
	t.Parallel()
	const prelude = `{"statusCode":200}`
	tests := []struct {
		name  string
		parts []string
		body  int // index of the part that holds the first body byte
	}{
		{"prelude then body", []string{prelude + "\x00\x00\x00\x00\x00\x00\x00\x00", "data: x\n\n"}, 1},
		{"NULs split", []string{prelude + "\x00\x00\x00", "\x00\x00\x00\x00\x00", "data: x\n\n"}, 2},
		{"one part", []string{prelude + "\x00\x00\x00\x00\x00\x00\x00\x00data: x\n\n"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := StartRuntimeAPI(t)
			ctx := testContext(t)
			inv := fetched(t, ctx, rt)
			pw, _ := streamResponse(ctx, rt, inv)
			for i, part := range tt.parts {
				if _, err := io.WriteString(pw, part); err != nil {
					t.Fatal(err)
				}
				if _, err := inv.Chunk(ctx, i); err != nil {
					t.Fatal(err)
				}
			}
			pw.Close()
			head, body, err := inv.FirstBytes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			res, err := inv.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Chunks) != len(tt.parts) {
				t.Fatalf("%d chunks, want %d", len(res.Chunks), len(tt.parts))
			}
			if !head.Equal(res.Chunks[0].At) || !body.Equal(res.Chunks[tt.body].At) {
				t.Errorf("FirstBytes = %v, %v; chunks arrived at %v", head, body, res.Chunks)
			}
		})
	}

	t.Run("error post", func(t *testing.T) {
		t.Parallel()
		rt := StartRuntimeAPI(t)
		ctx := testContext(t)
		inv := fetched(t, ctx, rt)
		post(t, ctx, rt, "invocation/"+inv.ID+"/error", strings.NewReader(`{"errorType":"X"}`), nil)
		if _, _, err := inv.FirstBytes(ctx); !errors.Is(err, ErrNoPrelude) {
			t.Errorf("FirstBytes = %v, want ErrNoPrelude", err)
		}
	})
}

// TestProgramAPI uses the Runtime API and a function process as a program
// does, without a testing.TB: errors returned, Close and Stop called by the
// caller, Close twice harmless.
func TestProgramAPI(t *testing.T) {
	t.Parallel()
	bin := BuildTestBinary(t, "./testdata/echofn", "lambda.norpc")
	rt, err := NewRuntimeAPI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	p, err := StartProcess(bin, nil, append(os.Environ(), rt.Env()))
	if err != nil {
		t.Fatal(err)
	}
	if p.Started.IsZero() || p.Started.After(time.Now()) {
		t.Errorf("Started = %v", p.Started)
	}
	ctx := testContext(t)
	payload, _ := json.Marshal(events.LambdaFunctionURLRequest{RawPath: "/echo", RawQueryString: "events=1"})
	inv, err := rt.Invoke(ctx, payload, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	head, body, err := inv.FirstBytes(ctx)
	if err != nil || head.Before(p.Started) || body.Before(head) {
		t.Errorf("FirstBytes = %v, %v, %v; started %v", head, body, err, p.Started)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Error(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Stop returned before the process exited")
	}
	rt.Close()
	rt.Close()
	if _, err := rt.Invoke(ctx, payload, time.Time{}); err == nil {
		t.Error("Invoke after Close succeeded")
	}

	if _, err := StartProcess("/nonexistent/binary", nil, nil); err == nil {
		t.Error("StartProcess of a missing binary succeeded")
	}
	if _, err := Build("./testdata/nonexistent"); err == nil {
		t.Error("Build of a missing package succeeded")
	}
}
