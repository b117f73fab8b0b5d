package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/internal/privateca"
)

// fakeResults is a small, complete set of results: every table has rows.
func fakeResults(withNginx bool) *results {
	p := quickPlan()
	p.levels = []int{100, 500}
	res := newResults(p, cpuPlan{total: 2, relay: []int{0}, stub: []int{1}, loadgen: []int{1}})
	res.targets = []string{"direct", "floor", "gateway"}
	res.nginx = nginxPeer{why: "nginx is not installed"}
	if withNginx {
		res.targets = []string{"direct", "floor", "nginx", "gateway"}
		res.nginx = nginxPeer{bin: "/usr/sbin/nginx", version: "nginx/1.22.1"}
	}
	cpu := map[string]time.Duration{"floor": 20 * time.Microsecond, "nginx": 15 * time.Microsecond, "gateway": 22 * time.Microsecond}
	for _, n := range p.levels {
		for _, t := range res.targets {
			for range 2 {
				d := Dist{N: 100, P50: time.Millisecond, P90: 2 * time.Millisecond, P99: 3 * time.Millisecond, P999: 4 * time.Millisecond, Max: 5 * time.Millisecond}
				res.add(runResult{target: t, mode: "closed", level: n, ttft: d, end: d, perEvent: d, events: 1000, done: 10,
					cpuPerEvt: cpu[t], rssMax: 30 << 20, errors: map[string]int{}})
			}
		}
		for _, t := range res.targets {
			res.add(runResult{target: t, mode: "open-plain", level: p.fixedRate, done: 10, errors: map[string]int{}})
		}
	}
	// The TLS legs: every relay but direct, the gateway's CPU 1.3× nginx's.
	res.legs = allLegs
	legCPU := map[string]time.Duration{"floor": 24 * time.Microsecond, "nginx": 20 * time.Microsecond, "gateway": 26 * time.Microsecond}
	for _, leg := range allLegs {
		for _, t := range res.targets[1:] {
			proto := "HTTP/1.1"
			if leg != legPlain {
				proto += " over TLS"
			}
			if leg == legH2 && t != "nginx" {
				proto = "HTTP/2 over TLS"
			}
			res.backendProto[legKey{leg, t}] = proto
			if leg == legPlain {
				continue
			}
			for _, n := range p.levels {
				res.add(runResult{target: t, mode: legMode("closed", leg), level: n, events: 1000, done: 10,
					cpuPerEvt: legCPU[t], rssMax: 30 << 20, errors: map[string]int{}})
			}
		}
	}
	for _, s := range p.gcSettings {
		res.add(runResult{target: "gateway", mode: gcMode(s), level: p.gcLevel, done: 10, errors: map[string]int{}})
	}
	res.idleRSS["gateway"] = []int64{10 << 20}
	res.tracer = "perf stat"
	res.syscalls = []syscallRun{
		{target: "gateway", leg: legPlain, run: runResult{events: 1000, errors: map[string]int{}}, count: syscallCount{total: 5000, eagain: 900, ctxsw: -1, byCall: map[string]int64{"read": 2000, "write": 1000}}},
		{target: "nginx", leg: legTLS, err: "perf: no such process"},
	}
	res.coldEvent, res.coldHealthy = []time.Duration{time.Millisecond}, []time.Duration{time.Millisecond}
	return res
}

func TestMarkdownRenders(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		nginx bool
		want  []string
	}{
		{"with nginx", true, []string{"| 100 | nginx |", "| 500 | nginx | 1.00× |", "CPU per relayed event ≤ 1.1× nginx's, every level", "| gateway | plain | 1000 | 5.00 | 2.00 | 0.90 | 1.00 |", "| nginx | TLS | — | *perf: no such process* |", "GOGC=off, GOMEMLIMIT=64MiB", "|  | floor | nginx | gateway |",
			"### Backend legs: plain, TLS, HTTP/2", "| backend leg | floor | nginx | gateway |",
			"| TLS, h2 offered | HTTP/2 over TLS | HTTP/1.1 over TLS (nginx's proxy speaks HTTP/1.1 only) | HTTP/2 over TLS |",
			"| 100 | plain | 20.0 µs | 15.0 µs | 22.0 µs | 1.10× | 1.47× |", "| 500 | TLS | 24.0 µs | 20.0 µs | 26.0 µs | 1.08× | 1.30× |"}},
		{"without nginx", false, []string{"not measured on this machine: nginx is not installed", "| n/a |"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := newReport(fakeResults(tt.nginx), ".")
			md := rep.markdown([]string{"rss.png"}, "docs/bench")
			for _, w := range tt.want {
				if !strings.Contains(md, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			if strings.Contains(md, "<no value>") || strings.Contains(md, "%!") {
				t.Errorf("report has a formatting slip:\n%s", md)
			}
			sum := rep.summary()
			for _, w := range []string{"== backend legs", "TLS, h2 offered: floor HTTP/2 over TLS"} {
				if !strings.Contains(sum, w) {
					t.Errorf("summary lacks %q:\n%s", w, sum)
				}
			}
			if strings.Contains(sum, "%!") {
				t.Errorf("summary has a formatting slip:\n%s", sum)
			}
		})
	}
}

func TestNginxConfig(t *testing.T) {
	t.Parallel()
	common := []string{"master_process off;", "proxy_buffering off;", "keepalive 500;", "server 127.0.0.1:9100;", "listen 127.0.0.1:9300", "proxy_http_version 1.1;", `proxy_set_header Connection "";`, "pid /tmp/x/nginx.pid;", "access_log /tmp/x/nginx-access.log;"}
	sslLines := []string{"proxy_pass https://backend;", "proxy_ssl_verify on;", "proxy_ssl_trusted_certificate /tmp/ca.pem;", "proxy_ssl_name localhost;", "proxy_ssl_session_reuse on;", "proxy_ssl_protocols TLSv1.2 TLSv1.3;"}
	for _, tt := range []struct {
		name      string
		ssl       *nginxSSL
		want, not []string
	}{
		{"plain", nil, append([]string{"proxy_pass http://backend;"}, common...), []string{"proxy_ssl"}},
		{"tls", &nginxSSL{trusted: "/tmp/ca.pem", name: "localhost"}, append(sslLines, common...), []string{"proxy_pass http://"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := nginxConfig("/tmp/x", "127.0.0.1:9300", "127.0.0.1:9100", tt.ssl, 500)
			for _, w := range tt.want {
				if !strings.Contains(c, w) {
					t.Errorf("config lacks %q:\n%s", w, c)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(c, w) {
					t.Errorf("config has %q:\n%s", w, c)
				}
			}
		})
	}
}

// TestNginxAcceptsConfig runs nginx -t on both configs, the TLS one with a
// CA from privateca, where nginx is installed (make bench-nginx).
func TestNginxAcceptsConfig(t *testing.T) {
	t.Parallel()
	peer := findNginx()
	if peer.bin == "" {
		t.Skip(peer.why)
	}
	dir := t.TempDir()
	pki, err := privateca.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	for listen, ssl := range map[string]*nginxSSL{"127.0.0.1:9300": nil, "127.0.0.1:9301": {trusted: pki.CA, name: privateca.Names.DNS}} {
		path, err := writeNginxConfig(dir, listen, "127.0.0.1:9100", ssl, 16)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(peer.bin, "-t", "-p", filepath.Dir(path), "-c", path).CombinedOutput(); err != nil {
			t.Errorf("nginx -t (TLS %v): %v\n%s", ssl != nil, err, out)
		}
	}
}

func TestParsePerfStat(t *testing.T) {
	t.Parallel()
	args := []string{"-e", "raw_syscalls:sys_enter", "-e", "syscalls:sys_enter_read", "-e", "syscalls:sys_enter_futex",
		"-e", "syscalls:sys_exit_read", "--filter", "ret == -11", "-e", "context-switches"}
	out := "# started on x\n\n100,,raw_syscalls:sys_enter,1,100.00,,\n40,,syscalls:sys_enter_read,1,100.00,,\n7,,syscalls:sys_enter_futex,1,100.00,,\n19,,syscalls:sys_exit_read,1,100.00,,\n3,,context-switches,1,100.00,,\n"
	c, err := parsePerfStat([]byte(out), args)
	if err != nil {
		t.Fatal(err)
	}
	if c.total != 100 || c.byCall["read"] != 40 || c.byCall["futex"] != 7 || c.eagain != 19 || c.ctxsw != 3 {
		t.Fatalf("got %+v", c)
	}
	if k := c.kinds(); k["read"] != 40 || k["futex"] != 7 || k["other"] != 53 {
		t.Fatalf("kinds %v", k)
	}
	if _, err := parsePerfStat([]byte("40,,syscalls:sys_enter_read,1,100.00,,\n"), args); err == nil {
		t.Fatal("short output: no error")
	}
}

func TestParseStraceC(t *testing.T) {
	t.Parallel()
	out := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.004000           2      2000       900 read
 30.00    0.003000           3      1000           write
 20.00    0.002000           2       800           epoll_pwait
 10.00    0.001000           1       100        12 futex
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           2      3900       912 total
`
	c, err := parseStraceC([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if c.total != 3900 || c.byCall["read"] != 2000 || c.eagain != 900 || c.byCall["epoll_pwait"] != 800 {
		t.Fatalf("got %+v", c)
	}
}
