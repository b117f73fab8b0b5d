package loopback

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestFreeAddrsDistinctAndBindable(t *testing.T) {
	t.Parallel()
	addrs, err := FreeAddrs(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s twice in %v", a, addrs)
		}
		seen[a] = true
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("binding %s: %v", a, err)
		}
		ln.Close()
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("binding port %d: %v", port, err)
	}
	ln.Close()
}

func TestWaitListening(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs, err := FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	close(closed)
	tests := []struct {
		name    string
		addr    string
		exited  <-chan struct{}
		timeout time.Duration
		want    func(error) bool
	}{
		{"listening", ln.Addr().String(), nil, 5 * time.Second, func(err error) bool { return err == nil }},
		{"exited", addrs[0], closed, 5 * time.Second, func(err error) bool { return errors.Is(err, ErrExited) }},
		{"timeout", addrs[0], nil, 100 * time.Millisecond, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()
			if err := WaitListening(ctx, tt.addr, tt.exited); !tt.want(err) {
				t.Errorf("WaitListening = %v", err)
			}
		})
	}
}
