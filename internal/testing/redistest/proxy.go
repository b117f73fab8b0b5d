package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy in front of a Server, for tests of what a
// client does while connections are slow to establish or the network drops
// everything. Every new connection is held for a delay before its first
// byte is relayed (as a TLS handshake and a login would hold it); Blackhole
// makes it drop every byte in both directions, on open and new connections,
// without closing any (a partition, not a refusal).
type Proxy struct {
	target string
	delay  time.Duration
	ln     net.Listener

	blackhole atomic.Bool
	mute      atomic.Bool
	accepted  atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 and relays to target (host:port) after
// holding each new connection for delay. It closes when the test ends.
func NewProxy(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{target: target, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// URL is redis://host:port of the proxy.
func (p *Proxy) URL() string { return "redis://" + p.ln.Addr().String() }

// Accepted is the number of client connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Blackhole starts (true) or ends (false) dropping every byte.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// DropReplies starts (true) or ends (false) dropping what the server
// sends, only: commands still land, their answers are lost (a client that
// times out on a command the store applied).
func (p *Proxy) DropReplies(on bool) { p.mute.Store(on) }

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.relay(c)
	}
}

// relay holds client for the delay, then copies both ways until either
// side closes.
func (p *Proxy) relay(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	time.Sleep(p.delay)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(server, client, false); done <- struct{}{} }()
	go func() { p.copy(client, server, true); done <- struct{}{} }()
	<-done
	_ = server.Close()
	_ = client.Close()
	<-done
}

// copy relays src to dst, dropping what arrives while blackholed (and,
// for the server's replies, while muted).
func (p *Proxy) copy(dst, src net.Conn, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() && !(replies && p.mute.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or a side closed
		}
	}
}
