package lambdatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/llmgw/gateway/internal/testing/loopback"
)

// EmulatorTool is the AWS Lambda Runtime Interface Emulator binary name;
// `make test` installs it with
// go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d
const EmulatorTool = "aws-lambda-rie"

// emulatorReadyTimeout bounds the wait for the emulator's port; generous
// because a busy CI machine may be slow to start a process.
const emulatorReadyTimeout = 30 * time.Second

// Emulator is a running aws-lambda-rie serving one function binary.
//
// What this emulator version does that AWS does not (checked by hand and in
// TestEmulatorContract): it starts the function at the first invocation,
// not at startup; it buffers a streamed response and returns it whole, as
// 200 application/octet-stream with a Content-Length, the body still framed
// as prelude + eight NULs + payload (it does not apply the prelude, unlike a
// Function URL); a function error (/error) comes back as HTTP 200 with
// {"errorMessage","errorType"} JSON and no X-Amz-Function-Error header; an
// error in the middle of a stream (the Lambda-Runtime-Function-Error-Type
// trailer) is dropped: the truncated body comes back as a success. So it
// proves the framing and the request mapping, not incremental delivery:
// use RuntimeAPI for that.
type Emulator struct {
	// Addr is the emulator's invoke endpoint, host:port.
	Addr string
	// RuntimeAPIAddr is the Runtime API address the function talks to.
	RuntimeAPIAddr string
	// Process is the emulator process (the function is its child).
	Process *Process

	bootstrap string // absolute path of the function binary
	client    *http.Client
}

// NewEmulator runs bootstrap under aws-lambda-rie, both of the emulator's
// listeners on 127.0.0.1, and waits until it accepts connections. The
// emulator starts the function at the first invocation. env is added to
// this process's environment (later entries win) and reaches the function;
// AWS_LAMBDA_FUNCTION_TIMEOUT (seconds, default 300) sets the invocation
// deadline. Close stops both.
//
// Never run aws-lambda-rie with --help: it takes that for the function and
// listens on every interface.
func NewEmulator(bootstrap string, env []string) (*Emulator, error) {
	bootstrap, err := filepath.Abs(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("lambdatest: %w", err)
	}
	tool, err := findTool(EmulatorTool)
	if err != nil {
		return nil, fmt.Errorf("lambdatest: %w; `make test` installs it (go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d)", err)
	}
	var base []string
	for _, kv := range os.Environ() {
		// AWS_LAMBDA_MAX_CONCURRENCY switches the emulator to another mode;
		// an inherited AWS_LAMBDA_RUNTIME_API would override the emulator's
		// own for the function.
		if strings.HasPrefix(kv, "AWS_LAMBDA_MAX_CONCURRENCY=") || strings.HasPrefix(kv, "AWS_LAMBDA_RUNTIME_API=") {
			continue
		}
		base = append(base, kv)
	}
	base = append(base, "AWS_LAMBDA_FUNCTION_NAME=function")
	env = append(base, env...)

	// The ports are picked free and handed over, so another process may
	// take one first: try again with new ports when the emulator exits.
	var lastOutput string
	for range 3 {
		addrs, err := loopback.FreeAddrs(2)
		if err != nil {
			return nil, fmt.Errorf("lambdatest: %w", err)
		}
		p, err := StartProcess(tool, []string{
			"--runtime-interface-emulator-address", addrs[0],
			"--runtime-api-address", addrs[1],
			bootstrap,
		}, env)
		if err != nil {
			return nil, err
		}
		e := &Emulator{
			Addr:           addrs[0],
			RuntimeAPIAddr: addrs[1],
			Process:        p,
			bootstrap:      bootstrap,
			client:         &http.Client{Transport: &http.Transport{Proxy: nil}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), emulatorReadyTimeout)
		err = loopback.WaitListening(ctx, addrs[0], p.Exited())
		cancel()
		if err == nil {
			return e, nil
		}
		lastOutput = p.Output()
		_ = e.Close()
		if !errors.Is(err, loopback.ErrExited) {
			return nil, fmt.Errorf("lambdatest: %s not listening on %s after %v:\n%s", EmulatorTool, addrs[0], emulatorReadyTimeout, lastOutput)
		}
	}
	return nil, fmt.Errorf("lambdatest: %s exited before listening, three times; last output:\n%s", EmulatorTool, lastOutput)
}

// StartEmulator is NewEmulator for a test: it stops the emulator and the
// function when the test ends, and logs the emulator's output if the test
// failed.
func StartEmulator(t testing.TB, bootstrap string, env []string) *Emulator {
	t.Helper()
	e, err := NewEmulator(bootstrap, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", EmulatorTool, e.Process.Cmd.Process.Pid, e.Process.Output())
		}
	})
	return e
}

// emulatorGrace is how long the emulator gets to stop the function on SIGTERM.
const emulatorGrace = 5 * time.Second

// Close stops the emulator: SIGTERM, on which it stops the function, then
// SIGKILL; and the function too if still alive: the emulator runs it in a
// process group of its own, so killing the emulator's group would miss it.
func (e *Emulator) Close() error {
	kids := children(e.Process.Cmd.Process.Pid)
	err := e.Process.Stop(emulatorGrace)
	for _, pid := range kids {
		// Kill only a leftover that is still our bootstrap, not a reused PID.
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == e.bootstrap {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return err
}

// InvokeRaw posts payload to the emulator's invoke endpoint and returns the
// HTTP response and its whole body: the emulator buffers a streamed
// response and returns it at once.
func (e *Emulator) InvokeRaw(ctx context.Context, payload []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+e.Addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(payload))
	if err != nil {
		return nil, nil, fmt.Errorf("lambdatest: %w", err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("lambdatest: invoking the emulator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, body, fmt.Errorf("lambdatest: reading the emulator's response: %w", err)
	}
	return resp, body, nil
}

// FunctionError is what Invoke returns when the function reported an error
// through /runtime/invocation/{id}/error (or its handler returned one): the
// emulator answers HTTP 200 with this JSON instead of a streaming response.
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("lambdatest: function error %s: %s", e.Type, e.Message)
}

// Invoke sends a Function URL event through the emulator and parses the
// function's streaming response (prelude, eight NULs, body) into what the
// Function URL client would get. A function error returns a *FunctionError;
// a failure after the response started is not visible here (see Emulator).
func (e *Emulator) Invoke(ctx context.Context, ev events.LambdaFunctionURLRequest) (status int, header http.Header, cookies []string, body []byte, err error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return 0, nil, nil, nil, fmt.Errorf("lambdatest: %w", err)
	}
	resp, raw, err := e.InvokeRaw(ctx, payload)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, nil, nil, fmt.Errorf("lambdatest: emulator answered %s: %s", resp.Status, raw)
	}
	prelude, rest, err := ParseStreamingResponse(bytes.NewReader(raw))
	if err != nil {
		var fe FunctionError
		if json.Unmarshal(raw, &fe) == nil && fe.Type != "" {
			return 0, nil, nil, nil, &fe
		}
		return 0, nil, nil, nil, fmt.Errorf("lambdatest: emulator response %q: %w", truncate(raw, 512), err)
	}
	body, err = io.ReadAll(rest)
	if err != nil {
		return 0, nil, nil, nil, fmt.Errorf("lambdatest: %w", err)
	}
	return prelude.StatusCode, prelude.Header(), prelude.Cookies, body, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
