//go:build unix

package main

import (
	"encoding/json"
	"syscall"
	"testing"
)

// TestFDLimitRaised: at start the soft open-file limit is the hard one,
// and the gateway logs it with max_connections (issue 22: the limit
// bounds the connections, backend dials included).
func TestFDLimitRaised(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "max_connections: 1000\n"})
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur != l.Max {
		t.Errorf("soft open-file limit %d, hard %d: not raised", l.Cur, l.Max)
	}
	for _, line := range g.logs.Lines() {
		var m struct {
			Msg            string
			FDLimit        uint64 `json:"fd_limit"`
			MaxConnections int    `json:"max_connections"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "gateway listening" {
			if m.FDLimit != l.Cur || m.MaxConnections != 1000 {
				t.Fatalf("listening line: fd_limit %d max_connections %d; want %d and 1000: %s", m.FDLimit, m.MaxConnections, l.Cur, line)
			}
			return
		}
	}
	t.Fatal("no listening line")
}
