// Package relayfloor is the zero-logic floor the benchmark measures the
// gateway against: net/http/httputil.ReverseProxy in front of one backend,
// flushing after every write, on a transport tuned like the gateway's (a
// keep-alive pool sized for the concurrency, no transparent gzip, HTTP/2
// where a TLS backend offers it). It has no
// auth, no limiter, no routing, no usage counting and no log, so whatever
// the gateway costs beyond it is the cost of its logic. scripts/cmd/relayfloor
// serves it.
package relayfloor

import (
	"crypto/tls"
	"crypto/x509"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// New is the floor: the standard library's reverse proxy to backend with
// FlushInterval -1 (flush after every write, as an SSE relay must) and a
// transport pool of idlePerHost keep-alive connections, as large as the
// gateway's. roots are the CAs an https backend is verified against (nil:
// the system's). Like the gateway's transport it takes h2 when a TLS
// backend offers it (ForceAttemptHTTP2: a custom TLS config would
// otherwise turn it off), so the two are measured on the same protocol.
// errLog receives the proxy's errors (nil: the log package's standard
// logger).
func New(backend *url.URL, idlePerHost int, roots *x509.CertPool, errLog *log.Logger) *httputil.ReverseProxy {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(backend) },
		FlushInterval: -1,
		Transport:     tr,
		ErrorLog:      errLog,
	}
}
