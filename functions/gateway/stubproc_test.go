package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// benchStubEnv chooses where BenchmarkGatewayRequest's stub backend runs:
// unset, a child process built from scripts/cmd/stub; a path, that stub
// binary (to measure two trees against one stub build); "inprocess", in
// the benchmark's own process, as before the stub moved out of it (its
// bytes and allocations are then counted as the gateway's).
const benchStubEnv = "LLMGW_BENCH_STUB"

// benchStubInProcess is benchStubEnv's value for the in-process stub.
const benchStubInProcess = "inprocess"

// benchStub is the stub binary a benchmark's stubs run from, as child
// processes; "" when benchStubEnv asks for them in process.
func benchStub(t testing.TB) string {
	t.Helper()
	if os.Getenv(benchStubEnv) == benchStubInProcess {
		return ""
	}
	return stubBinary(t)
}

// startStubProcess runs bin, a stub command, with so as a child process
// on a loopback port and returns its URL; the test's cleanup stops it.
// Only the options the stub command takes as flags may be set.
func startStubProcess(t testing.TB, bin string, so stub.Options) string {
	t.Helper()
	if so.IgnoreMaxTokens || so.Step != nil {
		t.Fatal("stub process: IgnoreMaxTokens and Step have no flags")
	}
	args := []string{"-addr", "127.0.0.1:0",
		"-ttft", so.TTFT.String(), "-interval", so.Interval.String(),
		"-tokens", strconv.Itoa(so.Tokens), "-prompt-tokens", strconv.Itoa(so.PromptTokens),
		"-api-key", so.APIKey, "-name", so.Name,
		"-non-stream-delay", so.NonStreamDelay.String(),
		"-prose=" + strconv.FormatBool(so.Prose)}
	if len(so.Models) > 0 {
		args = append(args, "-models", strings.Join(so.Models, ","))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second // then it is killed
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("stub process: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "stub listening on ")
	if err != nil || !ok {
		t.Fatalf("stub process: first line %q: %v", line, err)
	}
	return "http://" + addr
}

// stubBinary is the stub command to run: benchStubEnv's path, or one
// built from this tree's scripts/cmd/stub into the test's temporary
// directory.
func stubBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(benchStubEnv); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "stub")
	cmd := exec.Command("go", "build", "-o", bin, "./scripts/cmd/stub")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stub: %v\n%s", err, out)
	}
	return bin
}
