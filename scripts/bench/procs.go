package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/gateway/internal/testing/loopback"
	"golang.org/x/sys/unix"
)

// cpuPlan is which CPUs each party of the bench runs on: the relay under
// test alone on one core, the stub (and dev issuer) and the load generator
// on the others, apart where there are enough of them.
type cpuPlan struct {
	total   int
	relay   []int // the gateway or the floor: one core
	stub    []int // the stub backend and the dev issuer
	loadgen []int // this process
}

func planCPUs(allowed []int) (cpuPlan, error) {
	if len(allowed) < 2 {
		return cpuPlan{}, fmt.Errorf("need at least 2 CPUs (the relay alone on one), have %v", allowed)
	}
	p := cpuPlan{total: len(allowed), relay: allowed[:1]}
	rest := allowed[1:]
	switch {
	case len(rest) == 1:
		p.stub, p.loadgen = rest, rest
	default:
		half := len(rest) / 2
		p.stub, p.loadgen = rest[:half], rest[half:]
	}
	return p, nil
}

func (p cpuPlan) describe() string {
	shared := ""
	if slicesEqual(p.stub, p.loadgen) {
		shared = " (shared: the stub and the load generator compete for it, so the direct run is the harness's own floor)"
	}
	return fmt.Sprintf("%d CPUs: relay under test (gateway, floor or nginx) on cpu %s with GOMAXPROCS=1; stub + dev issuer on cpu %s; load generator on cpu %s%s",
		p.total, cpuList(p.relay), cpuList(p.stub), cpuList(p.loadgen), shared)
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func cpuList(c []int) string {
	s := make([]string, len(c))
	for i, v := range c {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func cpuSet(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// allowedCPUs is this process's affinity mask, as a list.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// pinSelf moves every thread of this process onto cpus. Threads created
// later inherit the mask of the thread that creates them, so two passes
// over /proc/self/task catch the ones born during the first.
func pinSelf(cpus []int) error {
	set := cpuSet(cpus)
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pin thread %d: %w", tid, err)
			}
		}
	}
	return nil
}

// procs tracks the processes the bench starts, so that every exit path
// (the end, a failure, Ctrl-C) stops exactly those, by PID.
type procs struct {
	mu   sync.Mutex
	list map[int]*proc
	home []int // the harness's own CPUs, restored after a pinned start
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	stderr *tailBuffer
}

func newProcs(home []int) *procs { return &procs{list: map[int]*proc{}, home: home} }

// start execs bin with args on cpus, and returns once it is running: the
// returned time is taken right before the fork, for cold-start figures.
// The child inherits the CPU mask of the forking thread, so the thread is
// locked and pinned for the fork only: no taskset exec sits between the
// clock and the binary.
func (ps *procs) start(name string, cpus []int, env []string, stdout io.Writer, bin string, args ...string) (*proc, time.Time, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	tail := &tailBuffer{max: 4096}
	cmd.Stdout = stdout
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	cmd.Stderr = tail
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.SchedSetaffinity(0, cpuSet(cpus)); err != nil {
		return nil, time.Time{}, fmt.Errorf("pin for %s: %w", name, err)
	}
	t0 := time.Now()
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, cpuSet(ps.home)); rerr != nil && err == nil {
		err = fmt.Errorf("restore affinity: %w", rerr)
	}
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, time.Time{}, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), stderr: tail}
	ps.mu.Lock()
	ps.list[cmd.Process.Pid] = p
	ps.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, t0, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM, waits up to grace, then SIGKILL.
func (ps *procs) stop(p *proc, grace time.Duration) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	ps.mu.Lock()
	delete(ps.list, p.pid())
	ps.mu.Unlock()
}

// stopAll stops every process still running, for the exit paths.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := make([]*proc, 0, len(ps.list))
	for _, p := range ps.list {
		list = append(list, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Go(func() { ps.stop(p, 3*time.Second) })
	}
	wg.Wait()
}

// tailBuffer keeps the last max bytes written: a child's stderr, for the
// error message when it dies.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// freePort returns a loopback address nobody listens on now.
func freePort() (string, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// waitListening polls addr until it accepts a TCP connection.
func waitListening(ctx context.Context, p *proc, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %v: %s", p.name, p.err, p.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s: %s", p.name, addr, limit, p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// binaries are the programs the bench runs.
type binaries struct {
	gateway, stub, issuer, floor string
}

// build compiles the gateway exactly as `make build` does, and the helper
// programs beside it; go build's cache makes a second run cheap.
func build(ctx context.Context, root string, skipGateway bool, log io.Writer) (binaries, error) {
	b := binaries{
		gateway: filepath.Join(root, "bin/gateway"),
		stub:    filepath.Join(root, "bin/bench/stub"),
		issuer:  filepath.Join(root, "bin/bench/devissuer"),
		floor:   filepath.Join(root, "bin/bench/relayfloor"),
	}
	type job struct{ out, pkg string }
	jobs := []job{{b.stub, "./scripts/cmd/stub"}, {b.issuer, "./scripts/cmd/devissuer"}, {b.floor, "./scripts/cmd/relayfloor"}}
	if !skipGateway {
		jobs = append([]job{{b.gateway, "./functions/gateway"}}, jobs...)
	}
	for _, j := range jobs {
		if err := goBuild(ctx, root, j.out, j.pkg); err != nil {
			return b, err
		}
		fmt.Fprintf(log, "built %s\n", j.out)
	}
	return b, nil
}

// goBuild builds pkg of the module in dir into out as `make build` builds
// the gateway.
func goBuild(ctx context.Context, dir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// buildAtRev builds the gateway as it was at git revision rev, so that a
// change's before and after are measured by the same bench code on the
// same config: the tree at rev is exported (git archive: no worktree or
// checkout of this repository changes) into a temporary folder and built
// into bin/bench/gateway-COMMIT. It returns the binary and the commit.
func buildAtRev(ctx context.Context, root, rev string, log io.Writer) (bin, commit string, err error) {
	commit, err = gitOut(root, "rev-parse", "--short=12", "--verify", rev+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("-gateway-rev %q: not a commit here: %w", rev, err)
	}
	src, err := os.MkdirTemp("", "bench-src-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	archive.Dir = root
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", "", err
	}
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return "", "", fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", "", fmt.Errorf("git archive %s: %w: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", "", fmt.Errorf("tar: %w: %s", err, untarErr.String())
	}
	bin = filepath.Join(root, "bin/bench/gateway-"+commit)
	if err := goBuild(ctx, src, bin, "./functions/gateway"); err != nil {
		return "", "", fmt.Errorf("gateway at %s: %w", commit, err)
	}
	fmt.Fprintf(log, "built %s (the gateway at %s)\n", bin, commit)
	return bin, commit, nil
}
