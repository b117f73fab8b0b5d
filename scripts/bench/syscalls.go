package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// syscallKind groups the system calls that do one thing for a relay: Go
// reads and writes with read/write, nginx with recvfrom/readv and writev.
type syscallKind struct {
	name  string
	calls []string
}

// syscallKinds are the columns of the syscalls-per-event table, in order;
// "other" is the total less these.
var syscallKinds = []syscallKind{
	{"read", []string{"read", "readv", "recvfrom", "recvmsg"}},
	{"write", []string{"write", "writev", "sendto", "sendmsg"}},
	{"epoll", []string{"epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl"}},
	{"futex", []string{"futex"}},
	{"nanosleep", []string{"nanosleep", "clock_nanosleep"}},
}

// eagainCalls are the reads whose EAGAIN answers are counted apart: a read
// that finds nothing is the cost of not owning readiness.
var eagainCalls = []string{"read", "readv", "recvfrom", "recvmsg"}

// syscallCount is what one tracer counted over a fixed load.
type syscallCount struct {
	tool   string           // "perf stat" or "strace -c -f"
	byCall map[string]int64 // entries per syscall name
	eagain int64            // reads (eagainCalls) that returned EAGAIN
	total  int64            // every syscall
	ctxsw  int64            // context switches of the relay's threads; -1: not counted
}

// kinds folds byCall into syscallKinds, plus "other".
func (c syscallCount) kinds() map[string]int64 {
	out := map[string]int64{}
	var known int64
	for _, k := range syscallKinds {
		for _, s := range k.calls {
			out[k.name] += c.byCall[s]
			known += c.byCall[s]
		}
	}
	out["other"] = max(c.total-known, 0)
	return out
}

// syscallRun is one relay's syscall count over a fixed number of events.
type syscallRun struct {
	target string
	leg    string // the backend leg
	count  syscallCount
	run    runResult
	err    string // why there is no count
}

// tracer counts a process's system calls between start and stop: perf's
// in-kernel tracepoint counters where perf works (cheap: no stop per
// call), strace -c -f otherwise (ptrace: every call stops the relay twice,
// so the relay is slower while counted and may batch differently).
type tracer struct {
	tool   string // "perf" or "strace"
	bin    string
	events []string // perf: the event list, in output order
	why    string   // no tracer: why
}

// findTracer probes perf (syscall tracepoints readable) and then strace.
func findTracer(ctx context.Context) tracer {
	if bin, err := exec.LookPath("perf"); err == nil {
		ev := perfEvents(ctx, bin)
		if len(ev) > 0 {
			return tracer{tool: "perf", bin: bin, events: ev}
		}
	}
	if bin, err := exec.LookPath("strace"); err == nil {
		return tracer{tool: "strace", bin: bin}
	}
	return tracer{why: "neither perf (with syscall tracepoints) nor strace is available"}
}

// perfEvents returns the perf stat arguments for every tracepoint this
// kernel has, probing each (a missing one fails the whole perf run).
func perfEvents(ctx context.Context, bin string) []string {
	probe := func(args ...string) bool {
		args = append([]string{"stat", "-x,"}, append(args, "--", "true")...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return err == nil && !bytes.Contains(out, []byte("<not supported>")) && !bytes.Contains(out, []byte("rror"))
	}
	if !probe("-e", "raw_syscalls:sys_enter") {
		return nil
	}
	args := []string{"-e", "raw_syscalls:sys_enter"}
	// Context switches: a Go relay on one core hands work between its
	// threads (futex, sysmon's nanosleep); nginx's one thread does not.
	if probe("-e", "context-switches") {
		args = append(args, "-e", "context-switches")
	}
	for _, k := range syscallKinds {
		for _, s := range k.calls {
			if e := "syscalls:sys_enter_" + s; probe("-e", e) {
				args = append(args, "-e", e)
			}
		}
	}
	for _, s := range eagainCalls {
		if e := "syscalls:sys_exit_" + s; probe("-e", e, "--filter", "ret == -11") {
			args = append(args, "-e", e, "--filter", "ret == -11")
		}
	}
	return args
}

func (t tracer) describe() string {
	switch t.tool {
	case "perf":
		return "perf stat (in-kernel syscall tracepoint counters, -p PID: every thread, no stop per call)"
	case "strace":
		return "strace -c -f (ptrace: the relay stops twice per call while counted, so it runs slower and may batch differently)"
	}
	return t.why
}

// attach starts counting pid's system calls; the returned function stops
// the tracer (SIGINT, by its PID) and parses what it counted.
func (t tracer) attach(pid int, dir string) (func() (syscallCount, error), error) {
	out := filepath.Join(dir, fmt.Sprintf("%s-%d.txt", t.tool, pid))
	var cmd *exec.Cmd
	switch t.tool {
	case "perf":
		args := append([]string{"stat", "-x,", "-o", out, "-p", strconv.Itoa(pid)}, t.events...)
		cmd = exec.Command(t.bin, args...)
	case "strace":
		cmd = exec.Command(t.bin, "-c", "-f", "-o", out, "-p", strconv.Itoa(pid))
	default:
		return nil, errors.New(t.why)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Both attach asynchronously; give them a moment to reach every thread.
	time.Sleep(300 * time.Millisecond)
	return func() (syscallCount, error) {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return syscallCount{}, fmt.Errorf("%s: %w: %s", t.tool, err, stderr.String())
		}
		if t.tool == "perf" {
			return parsePerfStat(b, t.events)
		}
		return parseStraceC(b)
	}, nil
}

// parsePerfStat reads perf stat -x, output: one line per -e, in the
// order given (the EAGAIN counters repeat a name, so order, not name,
// says which is which).
func parsePerfStat(out []byte, args []string) (syscallCount, error) {
	var events []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-e":
			i++
			events = append(events, args[i])
		case "--filter":
			i++
			events[len(events)-1] += " [EAGAIN]"
		}
	}
	c := syscallCount{tool: "perf stat", byCall: map[string]int64{}, ctxsw: -1}
	i := 0
	for line := range bytes.SplitSeq(out, []byte("\n")) {
		f := strings.Split(string(line), ",")
		if len(f) < 3 || !(strings.Contains(f[2], "syscalls:") || f[2] == "context-switches") {
			continue
		}
		if i >= len(events) {
			break
		}
		ev := events[i]
		i++
		n, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
		if err != nil {
			return c, fmt.Errorf("perf stat: %s: %q", ev, f[0])
		}
		switch name, eagain := strings.CutSuffix(ev, " [EAGAIN]"); {
		case eagain:
			c.eagain += n
		case name == "raw_syscalls:sys_enter":
			c.total = n
		case name == "context-switches":
			c.ctxsw = n
		default:
			c.byCall[strings.TrimPrefix(name, "syscalls:sys_enter_")] = n
		}
	}
	if i < len(events) {
		return c, fmt.Errorf("perf stat: %d of %d counters in its output", i, len(events))
	}
	return c, nil
}

// parseStraceC reads strace -c's table: "% time seconds usecs/call calls
// [errors] syscall". The errors of a read on a non-blocking socket are its
// EAGAINs.
func parseStraceC(out []byte) (syscallCount, error) {
	c := syscallCount{tool: "strace -c -f", byCall: map[string]int64{}, ctxsw: -1}
	reads := map[string]bool{}
	for _, s := range eagainCalls {
		reads[s] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	rows := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] == "%" || strings.HasPrefix(f[0], "-") {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		calls, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			c.total = calls
			continue
		}
		rows++
		c.byCall[name] += calls
		if len(f) == 6 && reads[name] {
			if e, err := strconv.ParseInt(f[4], 10, 64); err == nil {
				c.eagain += e
			}
		}
	}
	if rows == 0 {
		return c, errors.New("strace -c: no table in its output")
	}
	return c, nil
}

// fixedStreams runs exactly total streams, conc at a time, and returns
// what the client received: the fixed load the syscall counts are divided
// by.
func fixedStreams(ctx context.Context, t *target, conc, total int, hardLimit time.Duration) runResult {
	res := runResult{target: t.name, mode: "fixed", level: conc, errors: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, hardLimit)
	defer cancel()
	var next, events atomic.Int64
	var mu sync.Mutex
	var ttft []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(total) && ctx.Err() == nil {
				r := t.doStream(ctx, reqOpts{}, nil)
				events.Add(int64(r.events))
				mu.Lock()
				if r.err != "" {
					res.errors[r.err]++
				} else {
					ttft = append(ttft, r.ttft)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.requests, res.done = total, len(ttft)
	res.ttft = summarize(ttft)
	res.events = events.Load()
	res.eventRate = float64(res.events) / res.elapsed.Seconds()
	return res
}

// syscalls counts, for every relay, the system calls of a fixed load
// (sysStreams streams, sysConc at a time, each 128 tokens + the usage
// chunk + [DONE]) with a tracer attached only while it runs, on every
// backend leg. Connections on both legs are opened before the count (one
// short stream per virtual user), so the count is the steady state's.
func (b *bench) syscalls(ctx context.Context, res *results) error {
	tr := findTracer(ctx)
	res.tracer = tr.describe()
	b.logf("syscalls: %s", res.tracer)
	for _, leg := range b.legs {
		if err := b.syscallsOn(ctx, leg, tr, res); err != nil {
			return err
		}
	}
	return nil
}

// syscallsOn is syscalls for the relays on one backend leg.
func (b *bench) syscallsOn(ctx context.Context, leg string, tr tracer, res *results) error {
	p := b.plan
	for _, kind := range b.legTargets(leg) {
		err := b.withLeg(ctx, leg, kind, p.sysConc, nil, res, func(t *target, pid int) error {
			var wg sync.WaitGroup
			for range p.sysConc {
				wg.Go(func() { t.doStream(ctx, reqOpts{ttft: "0s", tokens: "2"}, nil) })
			}
			wg.Wait()
			sr := syscallRun{target: kind, leg: leg}
			stop, err := tr.attach(pid, b.tmp)
			if err != nil {
				sr.err = err.Error()
			} else {
				sr.run = b.measured(pid, func() runResult {
					return fixedStreams(ctx, t, p.sysConc, p.sysStreams, time.Minute)
				})
				if sr.count, err = stop(); err != nil {
					sr.err = err.Error()
				}
			}
			res.syscalls = append(res.syscalls, sr)
			if sr.err != "" {
				b.logf("syscalls %-5s %-7s: %s", leg, kind, sr.err)
				return nil
			}
			ev := float64(max(sr.run.events, 1))
			k := sr.count.kinds()
			b.logf("syscalls %-5s %-7s %d events, %d errors: %.2f syscalls/event (read %.2f, EAGAIN %.2f, write %.2f, epoll %.2f, futex %.2f, nanosleep %.2f, other %.2f), cpu %s/event",
				leg, kind, sr.run.events, sr.run.errCount(), float64(sr.count.total)/ev, float64(k["read"])/ev, float64(sr.count.eagain)/ev,
				float64(k["write"])/ev, float64(k["epoll"])/ev, float64(k["futex"])/ev, float64(k["nanosleep"])/ev, float64(k["other"])/ev, us(sr.run.cpuPerEvt))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
