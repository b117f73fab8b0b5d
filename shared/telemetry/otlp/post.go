package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// poster POSTs encoded OTLP requests to one signal's URL (OTLP/HTTP,
// application/x-protobuf), gzipped when configured, and retries what the
// specification calls retryable (429, 502, 503, 504, a reset or timed-out
// connection) with exponential backoff that honours Retry-After, the way
// the SDK's own exporters do (first wait 5s, at most 30s, a minute in all),
// but never past ctx: a wait that would outlast ctx's deadline is not
// started, so a flush on a failing collector ends at once instead of at
// its bound.
type poster struct {
	url    string
	header http.Header
	gzip   bool
	// grpc frames each export as one OTLP/gRPC call (grpc.go).
	grpc   bool
	client *http.Client
	// backoff is the first retry's wait (firstBackoff; tests shorten it).
	backoff time.Duration
	// zw and zbuf are kept from one export to the next (a gzip writer is
	// hundreds of KiB of state); send is called by one export at a time
	// (sender's lock).
	zw   *gzip.Writer
	zbuf bytes.Buffer
	// frame holds a gRPC call's length-prefixed message, kept likewise.
	frame bytes.Buffer
}

// Retry schedule (the SDK exporters' defaults).
const (
	firstBackoff = 5 * time.Second
	maxBackoff   = 30 * time.Second
	maxRetrying  = time.Minute
	// maxAnswer bounds how much of a collector's answer is read.
	maxAnswer = 64 << 10
)

// newPoster makes one signal's poster; grpc makes it an OTLP/gRPC
// client (url the Export method's).
func newPoster(url string, headers map[string]string, gzip, grpc bool, client *http.Client) *poster {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	h.Set("User-Agent", "llmgw-otlp")
	switch {
	case grpc:
		grpcHeader(h, gzip)
	case gzip:
		h.Set("Content-Encoding", "gzip")
		fallthrough
	default:
		h.Set("Content-Type", "application/x-protobuf")
	}
	return &poster{url: url, header: h, gzip: gzip, grpc: grpc, client: client, backoff: firstBackoff}
}

func (p *poster) close() { p.client.CloseIdleConnections() }

// send POSTs body until it is accepted, refused for good, or ctx ends. One
// call at a time.
func (p *poster) send(ctx context.Context, body []byte) error {
	if p.gzip {
		p.zbuf.Reset()
		if p.zw == nil {
			p.zw = gzip.NewWriter(&p.zbuf)
		} else {
			p.zw.Reset(&p.zbuf)
		}
		if _, err := p.zw.Write(body); err != nil {
			return err
		}
		if err := p.zw.Close(); err != nil {
			return err
		}
		body = p.zbuf.Bytes()
	}
	if p.grpc {
		body = grpcFrame(&p.frame, body, p.gzip)
	}
	start := time.Now()
	backoff := p.backoff
	for attempt := 0; ; attempt++ {
		retry, wait, err := p.once(ctx, body)
		if attempt == 0 && ctx.Err() == nil && stale(err) {
			continue // a kept-alive connection the collector (or a Lambda freeze) ended: a new one, at once
		}
		if err == nil || !retry {
			return err
		}
		wait = max(wait, jitter(backoff))
		backoff = min(backoff*3/2, maxBackoff)
		if time.Since(start)+wait > maxRetrying {
			return fmt.Errorf("otlp: giving up after %s: %w", time.Since(start).Round(time.Millisecond), err)
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return fmt.Errorf("otlp: no time left to retry: %w", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// stale reports an error of a connection that was already dead when the
// request went out on it (closed by the collector while idle, or across a
// Lambda freeze): worth one immediate retry on a new connection.
func stale(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// jitter spreads a backoff over [d/2, 3d/2), as the SDK's does.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// once makes one attempt; retry says whether another may succeed, after
// at least wait (the collector's Retry-After).
func (p *poster) once(ctx context.Context, body []byte) (retry bool, wait time.Duration, err error) {
	if p.grpc {
		return p.onceGRPC(ctx, body)
	}
	resp, retry, err := p.post(ctx, body)
	if err != nil {
		return retry, 0, err
	}
	defer resp.Body.Close()
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if rerr != nil || len(answer) == 0 || resp.Header.Get("Content-Type") != "application/x-protobuf" {
			return false, 0, nil
		}
		return false, 0, partialSuccess(answer)
	}
	msg := strings.TrimSpace(string(answer))
	if msg == "" {
		msg = "(empty)"
	}
	err = fmt.Errorf("otlp: %s answered %s: %s", p.url, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, retryAfter(resp.Header.Get("Retry-After")), err
	}
	return false, 0, err
}

// post sends body with the configured headers, for HTTP and gRPC alike;
// on a transport error retry says whether another attempt may succeed (a
// reset or a timeout while ctx still runs).
func (p *poster) post(ctx context.Context, body []byte) (resp *http.Response, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header = p.header.Clone()
	resp, err = p.client.Do(req)
	if err != nil {
		var ne net.Error
		return nil, ctx.Err() == nil && (errors.Is(err, syscall.ECONNRESET) || (errors.As(err, &ne) && ne.Timeout())), err
	}
	return resp, false, nil
}

// retryAfter reads Retry-After: seconds or an HTTP date (RFC 9110 10.2.3).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 32); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// errPartial is a collector's partial success: it kept the export but
// rejected some of it.
var errPartial = errors.New("otlp: partial success")

// partialSuccess reads Export{Metrics,Trace}ServiceResponse{partial_success
// = 1}: {rejected_data_points or rejected_spans = 1, error_message = 2}.
func partialSuccess(b []byte) error {
	var rejected int64
	var msg string
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) {
		if num != 1 || typ != protowire.BytesType {
			return
		}
		_ = fields(v, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) {
			switch {
			case num == 1 && typ == protowire.VarintType:
				rejected = int64(n)
			case num == 2 && typ == protowire.BytesType:
				msg = string(v)
			}
		})
	})
	if err != nil || (rejected == 0 && msg == "") {
		return nil
	}
	return fmt.Errorf("%w: %d rejected: %s", errPartial, rejected, msg)
}

// fields calls f with each field of the message b: a varint's value in n,
// a length-delimited field's bytes in v.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64)) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
		}
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		f(num, typ, v, n)
	}
	return nil
}

// httpClient is one signal's client: its own transport (proxies from the
// environment, idle connections kept for the next export), the export
// timeout on each attempt, and tf's CA and client certificate, whose
// files are read here (only when set). With grpc it speaks HTTP/2 only,
// cleartext (prior knowledge, as gRPC does) for an http URL.
func httpClient(timeout time.Duration, tf TLSFiles, grpc bool) (*http.Client, error) {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if grpc {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	if tf != (TLSFiles{}) {
		c := &tls.Config{MinVersion: tls.VersionTLS12}
		if tf.CA != "" {
			pem, err := os.ReadFile(tf.CA)
			if err != nil {
				return nil, fmt.Errorf("otlp: CA certificate: %w", err)
			}
			c.RootCAs = x509.NewCertPool()
			if !c.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("otlp: CA certificate %s: no PEM certificate in it", tf.CA)
			}
		}
		if tf.Cert != "" {
			kp, err := tls.LoadX509KeyPair(tf.Cert, tf.Key)
			if err != nil {
				return nil, fmt.Errorf("otlp: client certificate: %w", err)
			}
			c.Certificates = []tls.Certificate{kp}
		}
		t.TLSClientConfig = c
	}
	return &http.Client{Transport: t, Timeout: timeout}, nil
}
