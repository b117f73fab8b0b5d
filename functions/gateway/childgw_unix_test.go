//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// The environment of a test binary re-executed as a gateway process
// (childGateway): the config it runs, and the open-file limit it sets
// first (soft and hard, so nothing can raise it).
const (
	childConfigEnv = "GATEWAY_CHILD_CONFIG"
	childNofileEnv = "GATEWAY_CHILD_NOFILE"
)

// runAsChild makes this test binary the gateway childGateway asked for,
// and exits; it returns at once in any other process. A test that starts
// children calls it first.
func runAsChild() {
	path := os.Getenv(childConfigEnv)
	if path == "" {
		return
	}
	if s := os.Getenv(childNofileEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		l := syscall.Rlimit{Cur: n, Max: n}
		if err == nil {
			err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			os.Exit(3)
		}
	}
	os.Args = []string{"gateway", "-config", path}
	main()
	os.Exit(0)
}

// child is a gateway process started by childGateway.
type child struct {
	URL  string
	Logs *syncbuf.Buffer
	// MaxConnections and FDLimit are its listening line's.
	MaxConnections, FDLimit int
}

// childGateway runs g's config and environment in a gateway process of
// its own (this binary re-executed with -test.run=^test$, which calls
// runAsChild), under an open-file limit of nofile (0: the inherited
// one), and kills it when the test ends: a process whose limit, CPU and
// descriptors are its alone, as a replica's are.
func childGateway(t *testing.T, test string, g *gw, nofile int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), childConfigEnv+"="+g.cfgPath)
	if nofile > 0 {
		cmd.Env = append(cmd.Env, childNofileEnv+"="+strconv.Itoa(nofile))
	}
	for k, v := range g.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{Logs: &syncbuf.Buffer{}}
	cmd.Stderr = c.Logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.Logs.Write(append(sc.Bytes(), '\n'))
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l := <-lines:
			var m struct {
				Msg, Addr      string
				MaxConnections int `json:"max_connections"`
				FDLimit        int `json:"fd_limit"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "gateway listening" {
				c.URL, c.MaxConnections, c.FDLimit = m.Addr, m.MaxConnections, m.FDLimit
				return c
			}
		case <-timeout:
			t.Fatalf("child gateway never listened:\n%s", c.Logs.String())
		}
	}
}
