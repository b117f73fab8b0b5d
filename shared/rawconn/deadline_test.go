package rawconn

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestWriteDeadline: a raw Write to a peer that reads nothing ends at the
// write deadline, as net's does (the listener's send_timeout relies on
// it), having written what the socket took.
func TestWriteDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := Wrap(sc)
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Skip("no raw connections on this platform")
	}
	_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	start := time.Now()
	n, err := c.Write(make([]byte, 256<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 {
		t.Fatalf("wrote %d, err %v: want part of it, then the deadline", n, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the write ended after %s, want about its deadline", took)
	}
}
