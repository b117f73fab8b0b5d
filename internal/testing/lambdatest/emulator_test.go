package lambdatest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// echo mirrors testdata/echofn's report of the request it saw.
type echo struct {
	Method        string              `json:"method"`
	RequestURI    string              `json:"requestURI"`
	Host          string              `json:"host"`
	RemoteAddr    string              `json:"remoteAddr"`
	Header        map[string][]string `json:"header"`
	Body          string              `json:"body"`
	ContentLength int64               `json:"contentLength"`
	DeadlineLeft  string              `json:"deadlineLeft"`
}

// TestEmulatorContract runs testdata/echofn, built as production is, under
// the real AWS Lambda Runtime Interface Emulator and checks the Function
// URL contract end to end: event → request, and the streaming response's
// prelude (status, headers, cookies) + eight NULs + body.
func TestEmulatorContract(t *testing.T) {
	t.Parallel()
	bin := BuildTestBinary(t, "./testdata/echofn", "lambda.norpc")
	const timeout = 60 // seconds
	emu := StartEmulator(t, bin, []string{"AWS_LAMBDA_FUNCTION_TIMEOUT=60"})
	ctx := testContext(t)

	ev := events.LambdaFunctionURLRequest{
		Version:         "2.0",
		RawPath:         "/v1/echo",
		RawQueryString:  "status=201&events=2&cookie=a%3D1&cookie=b%3D2&header=X-Reply:yes&header=X-Reply:again",
		Headers:         map[string]string{"host": "fn.lambda-url.us-east-1.on.aws", "authorization": "Bearer t", "x-multi": "1,2"},
		Cookies:         []string{"s=1", "t=2"},
		Body:            base64.StdEncoding.EncodeToString([]byte("hello")),
		IsBase64Encoded: true,
		RequestContext: events.LambdaFunctionURLRequestContext{
			DomainName: "fn.lambda-url.us-east-1.on.aws",
			HTTP:       events.LambdaFunctionURLRequestContextHTTPDescription{Method: "POST", SourceIP: "203.0.113.9"},
		},
	}
	status, header, cookies, body, err := emu.Invoke(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if status != 201 {
		t.Errorf("status = %d, want 201", status)
	}
	if got := header.Get("Content-Type"); got != "text/event-stream" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := header.Get("X-Reply"); got != "yes, again" {
		t.Errorf("X-Reply = %q, want the values joined", got)
	}
	if !slices.Equal(cookies, []string{"a=1", "b=2"}) {
		t.Errorf("cookies = %q", cookies)
	}
	const events2 = "data: event 0\n\ndata: event 1\n\ndata: "
	if !strings.HasPrefix(string(body), events2) {
		t.Fatalf("body = %q, want two events then the echo", body)
	}
	var got echo
	if err := json.Unmarshal(body[len(events2):], &got); err != nil {
		t.Fatalf("echo %q: %v", body[len(events2):], err)
	}
	if got.Method != "POST" || got.RequestURI != "/v1/echo?"+ev.RawQueryString || got.Host != "fn.lambda-url.us-east-1.on.aws" ||
		got.RemoteAddr != "203.0.113.9:0" || got.Body != "hello" || got.ContentLength != 5 {
		t.Errorf("request seen = %+v", got)
	}
	if h := got.Header; !slices.Equal(h["Cookie"], []string{"s=1; t=2"}) || !slices.Equal(h["X-Multi"], []string{"1,2"}) || !slices.Equal(h["Authorization"], []string{"Bearer t"}) {
		t.Errorf("header seen = %v", got.Header)
	}
	left, err := time.ParseDuration(got.DeadlineLeft)
	if err != nil || left > timeout*time.Second-2*time.Second || left < timeout*time.Second/2 {
		t.Errorf("request deadline %s from now, want just under %ds minus the 2s margin", got.DeadlineLeft, timeout)
	}

	// A panic before any output is a function error: the emulator answers
	// 200 with error JSON, not the streaming framing.
	ev.RawQueryString = "panic=before"
	_, _, _, _, err = emu.Invoke(ctx, ev)
	var fe *FunctionError
	if !errors.As(err, &fe) || fe.Type != "PanicError" {
		t.Errorf("panic before output: err = %v, want FunctionError PanicError", err)
	}

	// The function survived both and still serves.
	ev.RawQueryString = ""
	if status, _, _, _, err := emu.Invoke(ctx, ev); err != nil || status != 200 {
		t.Errorf("after the panic: %d, %v", status, err)
	}
}
