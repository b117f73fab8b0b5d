package lambdatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// builds caches Build's work for the life of the process:
// key → *build. Test-helper state only; no production code reads it.
var builds sync.Map

type build struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// Build builds the main package pkg (an import path, or a path relative to
// the working directory such as "./testdata/echofn") with CGO off and the
// given build tags, once per process, and returns the binary's path, under
// the system's temporary directory. Test binaries of several packages may
// build the same binary at once, so each build lands under a private name
// and is renamed into place atomically; Go's build cache makes the
// repeated link in each process cheap. Pass "lambda.norpc" for Lambda
// functions, as the production build does.
func Build(pkg string, tags ...string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("lambdatest: %w", err)
	}
	sum := sha256.Sum256([]byte(wd + "\x00" + pkg + "\x00" + strings.Join(tags, ",")))
	key := hex.EncodeToString(sum[:8])
	v, _ := builds.LoadOrStore(key, new(build))
	b := v.(*build)
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("lambdatest-%d", os.Getuid()), key)
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		name := path.Base(strings.TrimSuffix(filepath.ToSlash(pkg), "/"))
		if name == "." || name == ".." || name == "/" {
			name = filepath.Base(wd)
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", name, os.Getpid()))
		args := []string{"build", "-o", tmp}
		if len(tags) > 0 {
			args = append(args, "-tags", strings.Join(tags, ","))
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b.out, b.err = cmd.CombinedOutput()
		if b.err != nil {
			return
		}
		b.path = filepath.Join(dir, name)
		b.err = os.Rename(tmp, b.path)
	})
	if b.err != nil {
		return "", fmt.Errorf("lambdatest: go build %s (tags %v): %w\n%s", pkg, tags, b.err, b.out)
	}
	return b.path, nil
}

// BuildTestBinary is Build for a test (pkg relative to the test's
// directory): it fails the test if the build fails.
func BuildTestBinary(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	bin, err := Build(pkg, tags...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Process is a subprocess started by StartProcess, StartFunction or
// NewEmulator.
type Process struct {
	Cmd *exec.Cmd
	// Started is the time just before the exec: what a cold start is
	// measured from.
	Started time.Time

	out    syncbuf.Buffer
	exited chan struct{}
	err    error // set before exited closes
}

// Output returns what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns how the process ended; call it after Exited is closed.
func (p *Process) Err() error { return p.err }

// StartProcess runs binary with args and env, its whole environment as in
// exec.Cmd (nil: this process's), collecting its stdout and stderr for
// Output. Stop ends it.
func StartProcess(binary string, args, env []string) (*Process, error) {
	p := &Process{Cmd: exec.Command(binary, args...), exited: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout = &p.out
	p.Cmd.Stderr = &p.out
	p.Started = time.Now()
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("lambdatest: starting %s: %w", binary, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// StartFunction runs binary as a Lambda function for a test: its
// environment is the test's plus env (later entries win), so env should
// hold AWS_LAMBDA_RUNTIME_API (see RuntimeAPI.Env). The process is killed
// by its PID when the test ends, and its output is logged if the test
// failed.
func StartFunction(t testing.TB, binary string, env []string) *Process {
	t.Helper()
	p, err := StartProcess(binary, nil, append(os.Environ(), env...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stopForTest(t, 0) })
	return p
}

// killWait bounds the wait for a process to exit after SIGKILL.
const killWait = 10 * time.Second

// Stop ends the process by its PID: SIGTERM and up to grace to exit when
// grace > 0, then SIGKILL. It returns an error only if the process has not
// exited 10 s after SIGKILL.
func (p *Process) Stop(grace time.Duration) error {
	if grace > 0 {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	_ = p.Cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("lambdatest: %s (pid %d) did not exit after SIGKILL", p.Cmd.Path, p.Cmd.Process.Pid)
	}
}

// stopForTest is Stop for a test's cleanup: it logs the output if the test
// failed.
func (p *Process) stopForTest(t testing.TB, grace time.Duration) {
	if err := p.Stop(grace); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("output of %s (pid %d):\n%s", filepath.Base(p.Cmd.Path), p.Cmd.Process.Pid, p.Output())
	}
}

// children returns the PIDs whose parent is pid, from /proc (Linux).
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		var state string
		var kid, ppid int
		if _, err := fmt.Sscanf(string(b[:bytes.IndexByte(b, ' ')]), "%d", &kid); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(string(b[i+1:]), " %s %d", &state, &ppid); err == nil && ppid == pid {
			kids = append(kids, kid)
		}
	}
	return kids
}

// findTool looks for a go-installed tool in PATH, then in $(go env GOPATH)/bin.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPATH: %w", err)
	}
	for dir := range strings.SplitSeq(strings.TrimSpace(string(out)), string(os.PathListSeparator)) {
		p := filepath.Join(dir, "bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", errors.New(name + " not found in PATH or $(go env GOPATH)/bin")
}
