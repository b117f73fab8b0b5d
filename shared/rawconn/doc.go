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
// relay's took as much), and 3% with this package (226 of 8,185 ms),
// the P's work then staying on one thread (issue 38). A socket here is
// non-blocking, so a read or write returns in microseconds and never
// blocks in the kernel: nothing needs sysmon to hand the P off during
// one.
//
// What stays the runtime's: readiness (the netpoller parks a reader or
// writer on EAGAIN, through syscall.RawConn), deadlines, Close (the
// descriptor cannot be closed under a call: RawConn holds it), and every
// method but Read and Write, which are *net.TCPConn's own. Errors read as
// net's do: a *net.OpError with Op "read" or "write", the errno as an
// *os.SyscallError, io.EOF bare (TestAsNet compares them).
package rawconn
