package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// nginxPeer is nginx as a peer beside the floor: what a purpose-built C
// event loop spends per relayed event on the same stub and load. It is
// optional: `make bench` installs nginx-light when it is missing, and a
// machine without it gets a report that says so.
type nginxPeer struct {
	bin     string // "" when nginx is not installed
	version string
	why     string // why it is not measured, when bin is ""
}

// findNginx looks for nginx on PATH and where Debian puts it (sbin is not
// on every user's PATH).
func findNginx() nginxPeer {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
			if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		return nginxPeer{why: "nginx is not installed (make bench installs nginx-light with apt-get when it can; it could not here)"}
	}
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return nginxPeer{why: fmt.Sprintf("%s -v failed: %v", bin, err)}
	}
	v := strings.TrimSpace(string(out))
	v = strings.TrimPrefix(v, "nginx version: ")
	return nginxPeer{bin: bin, version: v}
}

// nginxConfig is the peer's configuration: one process that is its own
// worker (master_process off: the same event loop as one worker, and one
// PID to measure), epoll, an access log to a file as in production,
// proxy_buffering off (every
// backend read is written to the client at once, as an SSE relay must),
// HTTP/1.1 to the backend with a keep-alive pool (upstream keepalive),
// and client keep-alive long enough for the load generator's connections.
// Every path it writes is under dir. ssl, when set, puts the backend leg
// behind TLS (nginxSSL).
func nginxConfig(dir, listen, backend string, ssl *nginxSSL, conns int) string {
	p := func(name string) string { return filepath.Join(dir, name) }
	scheme, sslDirectives := "http", ""
	if ssl != nil {
		scheme, sslDirectives = "https", ssl.directives()
	}
	return fmt.Sprintf(`# Written by scripts/bench: nginx as a peer of the relay under test.
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile %d;
pid %s;
error_log %s warn;

events {
    worker_connections %d;
    use epoll;
}

http {
    access_log %s;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;
    keepalive_timeout 120s;
    keepalive_requests 1000000;

    upstream backend {
        server %s;
        keepalive %d;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }

    server {
        listen %s backlog=4096;
        location / {
            proxy_pass %s://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
%s        }
    }
}
`, 4*conns+1024, p("nginx.pid"), p("nginx-error.log"), 2*conns+256,
		p("nginx-access.log"), p("nginx-body"), p("nginx-proxy"), p("nginx-fastcgi"), p("nginx-uwsgi"), p("nginx-scgi"),
		backend, conns, listen, scheme, sslDirectives)
}

// nginxSSL is the TLS backend leg as a production nginx in front of an
// HTTPS backend runs it: the certificate verified against the private CA
// (proxy_ssl_verify; nginx checks a host name, not an IP SAN, hence
// proxy_ssl_name), sessions resumed on new connections, and TLS 1.3
// allowed as Go's client uses it (nginx 1.22's default stops at 1.2).
// nginx's proxy speaks HTTP/1.1 to a backend whatever it offers: it has
// no HTTP/2 upstream, so on the h2 leg it still reads HTTP/1.1.
type nginxSSL struct {
	trusted string // PEM CA file
	name    string // the name the backend's certificate is verified for
}

func (s nginxSSL) directives() string {
	return fmt.Sprintf(`            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate %s;
            proxy_ssl_name %s;
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;
            proxy_ssl_protocols TLSv1.2 TLSv1.3;
`, s.trusted, s.name)
}

// writeNginxConfig writes the peer's configuration for listen into dir and
// returns its path.
func writeNginxConfig(dir, listen, backend string, ssl *nginxSSL, conns int) (string, error) {
	sub := filepath.Join(dir, "nginx-"+strings.ReplaceAll(listen, ":", "_"))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(sub, "nginx.conf")
	return path, os.WriteFile(path, []byte(nginxConfig(sub, listen, backend, ssl, conns)), 0o644)
}
