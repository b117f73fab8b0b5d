package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// procStat is one reading of a process's resource use.
type procStat struct {
	cpu      time.Duration // time on a CPU: schedRuntime, else utime + stime
	sys      time.Duration // stime: the kernel's share of cpu
	rss, hwm int64         // VmRSS, VmHWM in bytes
}

// readProc reads /proc/PID/stat, /proc/PID/status and, for its CPU time,
// the scheduler's own count of each thread's time on a CPU.
func readProc(pid int) (procStat, error) {
	var st procStat
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, err
	}
	st.cpu, st.sys, err = parseStatTimes(stat)
	if err != nil {
		return st, err
	}
	if ns, err := schedRuntime(pid); err == nil && ns > 0 {
		st.cpu = ns
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return st, err
	}
	st.rss = statusKB(status, "VmRSS:") * 1024
	st.hwm = statusKB(status, "VmHWM:") * 1024
	return st, nil
}

// schedRuntime is the process's time on a CPU to the nanosecond: the sum
// of its threads' /proc/PID/task/TID/schedstat first fields. stat's
// utime and stime count in clock ticks (10 ms), which over a run of a
// relay at a fifth of a core (0.5 s of CPU in 2.5 s) is a step of 2%,
// as much as the gaps the A/B targets bound. A thread that exits takes
// its time with it; the Go relays' threads live as long as the process,
// and nginx runs one.
func schedRuntime(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // exited since the listing
		}
		ns, err := parseSchedstat(b)
		if err != nil {
			return 0, err
		}
		total += ns
	}
	return total, nil
}

// parseSchedstat reads a schedstat line's first field: nanoseconds on a
// CPU.
func parseSchedstat(b []byte) (time.Duration, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat: %q", b)
	}
	n, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("schedstat: %q", b)
	}
	return time.Duration(n), nil
}

// parseStatCPU returns utime+stime from a /proc/PID/stat line. The command
// name (field 2) may hold spaces and parentheses, so fields are counted
// from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	cpu, _, err := parseStatTimes(stat)
	return cpu, err
}

// parseStatTimes returns utime+stime and stime alone.
func parseStatTimes(stat []byte) (cpu, sys time.Duration, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("stat: no ')' in %q", stat)
	}
	f := bytes.Fields(stat[i+1:])
	// After the name: state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, time.Duration(st) * time.Second / clockTicks, nil
}

// statusKB returns the value of a "Key:   123 kB" line of /proc/PID/status
// in KiB, or 0.
func statusKB(status []byte, key string) int64 {
	i := bytes.Index(status, []byte(key))
	if i < 0 {
		return 0
	}
	rest := status[i+len(key):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return n
}

// sampler reads a process's RSS every period, low frequency so that it
// costs the measured process nothing, and keeps the largest.
type sampler struct {
	pid  int
	stop chan struct{}
	done sync.WaitGroup

	mu      sync.Mutex
	maxRSS  int64
	samples int
}

func startSampler(pid int, period time.Duration) *sampler {
	s := &sampler{pid: pid, stop: make(chan struct{})}
	s.take()
	s.done.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.take()
			}
		}
	})
	return s
}

func (s *sampler) take() {
	st, err := readProc(s.pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.maxRSS = max(s.maxRSS, st.rss)
	s.samples++
	s.mu.Unlock()
}

// finish stops the sampler, takes a last reading and returns the largest RSS.
func (s *sampler) finish() int64 {
	close(s.stop)
	s.done.Wait()
	s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRSS
}

// cpuBusy returns how long cpu has been busy since boot (user, nice,
// system, irq, softirq and steal time from /proc/stat): with the relay's
// own CPU time subtracted, the load that other processes put on the relay's
// core during a run.
func cpuBusy(cpu int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseCPUBusy(b, cpu)
}

func parseCPUBusy(stat []byte, cpu int) (time.Duration, error) {
	prefix := []byte("cpu" + strconv.Itoa(cpu) + " ")
	for line := range bytes.SplitSeq(stat, []byte("\n")) {
		if !bytes.HasPrefix(line, prefix) {
			continue
		}
		f := bytes.Fields(line[len(prefix):])
		if len(f) < 8 {
			return 0, fmt.Errorf("/proc/stat: short cpu%d line", cpu)
		}
		var ticks int64
		for _, i := range []int{0, 1, 2, 5, 6, 7} { // user nice system irq softirq steal
			n, err := strconv.ParseInt(string(f[i]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: cpu%d field %d: %w", cpu, i, err)
			}
			ticks += n
		}
		return time.Duration(ticks) * time.Second / clockTicks, nil
	}
	return 0, fmt.Errorf("/proc/stat: no cpu%d line", cpu)
}
