// Package rawconn reads and writes a TCP connection's socket with raw
// system calls, so that a single-core process's request path does not
// keep waking the Go runtime's sysmon thread.
//
// Why: with GOMAXPROCS=1 the one P goes idle whenever every goroutine
// waits (between a stream's events, between bursts), and sysmon then
// sleeps deeply. The next system call made through the runtime's syscall
// bookkeeping (entersyscall: net.Conn's Read and Write) wakes it, and it
// polls every 20 µs for the next millisecond before it backs off, taking
// the P from a call that spans two of its polls and handing it to
// another thread. At 300 streams on one core sysmon's thread took 9% of
// the gateway's CPU (817 of 8,941 ms in one A/B run; the zero-logic Go
// relay's took as much), and 3% with this package (256 of 8,353 ms),
// the P's work then staying on two threads, not five. A
// socket here is non-blocking, so a read or write returns in
// microseconds and never blocks in the kernel: nothing needs sysmon to
// hand the P off during one.
//
// What it gives up, two things:
//
//   - Sysmon's preemption after an idle spell. Sysmon also preempts a
//     goroutine that has run for 10 ms without blocking. Asleep, it does
//     so only once it wakes, at the timer that was next due when it went
//     to sleep or at the next system call made through the runtime (an
//     accept, a connect, the access log's write): a goroutine that
//     computes for long right after an idle spell of the P can hold it
//     for longer than 10 ms. The gateway's work per request is bounded
//     (the body cap, the event cap), and a stream's work per event is
//     microseconds.
//   - The reads and writes in go tool trace. A raw system call skips the
//     runtime's syscall bookkeeping, so an execution trace shows no
//     syscall event for them: a stream's socket time reads as the
//     goroutine running.
//
// An interleaved A/B measured 0.81, 0.95 and 0.81 times the gateway's
// CPU per event at 100, 300 and 500 streams with it, which is why it is
// on by default. To turn it off, for a trace or for a workload that
// needs sysmon's preemption, set raw_syscalls: false in the gateway's
// configuration: the listener (listener.Options.PlainConns) and the
// backend clients (assemble.Backends.PlainConns) then keep net's own
// connections.
//
// What stays the runtime's: readiness (the netpoller parks a reader or
// writer on EAGAIN, through syscall.RawConn), deadlines, Close (the
// descriptor cannot be closed under a call: RawConn holds it), and every
// method but Read and Write, which are *net.TCPConn's own. Errors read as
// net's do: a *net.OpError with Op "read" or "write", the errno as an
// *os.SyscallError, io.EOF bare (TestAsNet compares them).
package rawconn
