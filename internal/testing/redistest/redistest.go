// Package redistest runs a real redis-server on a loopback port for tests:
// start, stop, restart on the same port, and make it slow. It speaks the few
// commands it needs (PING, DEBUG SLEEP, CLIENT PAUSE) in raw RESP so that it
// imports no Redis client.
//
// It only ever signals the process it started, by PID.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/loopback"
	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// Options tunes Start.
type Options struct {
	// Password, when set, is required of clients (--requirepass).
	Password string
	// Cluster starts the server as a Redis Cluster node (--cluster-enabled
	// yes), its bus on a second free port; StartCluster joins three.
	Cluster bool
}

// Server is one redis-server process owned by a test.
type Server struct {
	t        testing.TB
	bin      string
	args     func(port int) []string
	password string
	port     int
	bus      int // the cluster bus's port; 0 when not a cluster node

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *syncbuf.Buffer
}

// startTimeout bounds how long a start waits for PING to answer.
const startTimeout = 15 * time.Second

// Start starts redis-server on 127.0.0.1 on a free port, without persistence
// (--save "" --appendonly no), waits until it answers PING, and stops it when
// the test ends. A missing redis-server fails the test: `make test` installs
// it with apt-get.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not on PATH (%v); `make test` installs it with: apt-get update && apt-get install -y redis-server", err)
	}
	major := serverMajor(bin)
	s := &Server{t: t, bin: bin, password: o.Password}
	s.args = func(port int) []string {
		a := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", t.TempDir(),
			"--logfile", "",
		}
		if major >= 7 {
			// DEBUG is off by default since Redis 7; Slow needs it.
			a = append(a, "--enable-debug-command", "yes")
		}
		if o.Password != "" {
			a = append(a, "--requirepass", o.Password)
		}
		if o.Cluster {
			// cluster-port (Redis 7) frees the bus from port+10000,
			// which may be past 65535 for an ephemeral port.
			a = append(a, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(s.bus))
		}
		return a
	}
	t.Cleanup(s.Stop)
	// A free port found by listening may be taken again before redis binds
	// it; retry with a fresh one.
	var lastErr error
	for range 5 {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.port = port
		if o.Cluster {
			if s.bus, err = loopback.FreePort(); err != nil {
				t.Fatalf("redistest: %v", err)
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

var versionRE = regexp.MustCompile(`v=(\d+)\.`)

// serverMajor returns redis-server's major version, 0 if unknown.
func serverMajor(bin string) int {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return 0
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// start launches the process on s.port and waits for PING.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("already running")
	}
	log := &syncbuf.Buffer{}
	cmd := exec.Command(s.bin, s.args(s.port)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.log = cmd, exited, log

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("redis-server exited during start: %s", log.String())
		default:
		}
		if err := s.do(200*time.Millisecond, "PING"); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("no PONG within %s: %w", startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is redis://127.0.0.1:port (no password in it; see Options.Password).
func (s *Server) URL() string { return "redis://" + s.Addr() }

// PID is the process id of the running server, 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop stops the server (SIGTERM, SIGKILL after 5s) and waits for it to
// exit. Its clients see refused connections until Restart. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// kill stops the process; s.mu is held.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Restart stops the server if it runs and starts a fresh, empty one on the
// same port, returning once it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
	}
}

// Pause blocks every client command for d (CLIENT PAUSE, Redis >= 6.2 for
// the ALL mode). Unlike Sleep it is causal: when Pause returns, the pause
// is in effect, so a command sent afterwards waits until it ends.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	if err := s.do(5*time.Second, "CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "ALL"); err != nil {
		s.t.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}

// Sleep makes the server unresponsive for d with DEBUG SLEEP, sent from its
// own connection. It returns at once; the returned channel yields the
// command's outcome once the sleep is over. The sleep starts when the server
// reads the command, shortly after Sleep returns.
func (s *Server) Sleep(d time.Duration) <-chan error {
	done := make(chan error, 1)
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	go func() { done <- s.do(d+10*time.Second, "DEBUG", "SLEEP", secs) }()
	return done
}

// Do sends one command on a fresh connection and checks that the reply is
// not an error; for tests that need an odd command (FLUSHALL, CONFIG SET).
func (s *Server) Do(args ...string) {
	s.t.Helper()
	if err := s.do(5*time.Second, args...); err != nil {
		s.t.Fatalf("redistest: %s: %v", strings.Join(args, " "), err)
	}
}

// Query sends one command on a fresh connection and returns its reply
// (a bulk or simple string's content; "" for a nil or another kind),
// failing the test on an error reply; for tests that read a key the code
// under test wrote.
func (s *Server) Query(args ...string) string {
	s.t.Helper()
	reply, err := s.query(5*time.Second, args...)
	if err != nil {
		s.t.Fatalf("redistest: %s: %v", strings.Join(args, " "), err)
	}
	return reply
}

// Log is what the latest process wrote to stdout/stderr, for diagnostics.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// do sends one command (after AUTH when a password is set) and reads one
// simple reply per command, failing on an error reply.
func (s *Server) do(timeout time.Duration, args ...string) error {
	_, err := s.query(timeout, args...)
	return err
}

// query is do that returns the command's reply: a bulk or simple
// string's content, "" for other kinds.
func (s *Server) query(timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var buf bytes.Buffer
	n := 1
	if s.password != "" {
		writeCommand(&buf, "AUTH", s.password)
		n++
	}
	writeCommand(&buf, args...)
	if _, err := c.Write(buf.Bytes()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	var reply string
	for range n {
		if reply, err = readReply(r); err != nil {
			return "", err
		}
	}
	return reply, nil
}

func writeCommand(buf *bytes.Buffer, args ...string) {
	fmt.Fprintf(buf, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(buf, "$%d\r\n%s\r\n", len(a), a)
	}
}

// readReply reads one RESP2 reply: a simple or bulk string's content, ""
// for an integer or an array (whose elements it skips); an error reply is
// returned as an error.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case ':':
		return "", nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		for range n {
			if _, err := readReply(r); err != nil {
				return "", err
			}
		}
		return "", nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
