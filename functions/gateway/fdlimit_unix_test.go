//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// TestFDLimitRaised: at start the soft open-file limit is the hard one,
// and the gateway logs it with max_connections (the limit bounds the connections, backend dials included).
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

// TestFDLimitClampsConnections: under ulimit -n 256 (soft and hard, so
// nothing can raise it) the gateway lowers max_connections from 4,096 to
// what the descriptors hold, logs it, and 400 concurrent streams are
// either served whole or refused 503 too_many_connections, never 502 for
// want of a descriptor; /healthz answers through it. Before the clamp it
// only warned: accepted connections took every descriptor and 0 of 400
// streams were served. The gateway runs in a child process (this test
// binary, re-executed) so that the limit binds it alone.
func TestFDLimitClampsConnections(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	if path := os.Getenv("GATEWAY_FDLIMIT_TEST_CONFIG"); path != "" {
		l := syscall.Rlimit{Cur: 256, Max: 256}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			os.Exit(3)
		}
		os.Args = []string{"gateway", "-config", path}
		main()
		os.Exit(0)
	}
	t.Parallel()
	g := startGateway(t, options{}) // its config, issuer and stub serve the child
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDLimitClampsConnections$")
	cmd.Env = append(os.Environ(), "GATEWAY_FDLIMIT_TEST_CONFIG="+g.cfgPath, "BACKEND_KEY="+backendKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	want, err := connsWithin(4096, 256)
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	timeout := time.After(20 * time.Second)
	for addr == "" {
		select {
		case l := <-lines:
			var m struct {
				Msg, Addr      string
				MaxConnections int `json:"max_connections"`
				FDLimit        int `json:"fd_limit"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "gateway listening" {
				if m.MaxConnections != want || m.FDLimit != 256 {
					t.Fatalf("listening with max_connections %d fd_limit %d, want %d and 256: %s", m.MaxConnections, m.FDLimit, want, l)
				}
				addr = m.Addr
			}
		case <-timeout:
			t.Fatalf("child gateway never listened:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), "max_connections lowered to what the open-file limit allows") {
		t.Errorf("no line for the lowered cap:\n%s", logs.String())
	}
	tok := g.token("contoso")
	const streams = 400
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome := func() string {
				req, _ := http.NewRequest(http.MethodPost, addr+"/v1/chat/completions", strings.NewReader(streamBody))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("X-Stub-Interval", "50ms")
				req.Header.Set("X-Stub-Tokens", "20")
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 40 * time.Second}
				resp, err := client.Do(req)
				if err != nil {
					return "error: " + err.Error()
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				switch data := sseData(body); {
				case resp.StatusCode == http.StatusOK && err == nil && len(data) > 0 && data[len(data)-1] == "[DONE]":
					return "served"
				case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "too_many_connections"):
					return "refused"
				default:
					return fmt.Sprintf("%d %.80s", resp.StatusCode, body)
				}
			}()
			mu.Lock()
			got[outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got["served"] == 0 || got["served"]+got["refused"] != streams {
		t.Errorf("of %d streams under ulimit -n 256: %v; want each served whole or refused 503", streams, got)
	}
	t.Logf("under ulimit -n 256, max_connections %d: %v", want, got)
	resp, err := http.Get(addr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz after the burst: %v %v", err, resp)
	}
	resp.Body.Close()
}
