package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/gateway/scripts/internal/privateca"
	"github.com/llmgw/gateway/scripts/stub"
)

// The backend legs: how a relay reaches the stub. Production backends
// (Azure OpenAI, most vLLM deployments) are HTTPS and some offer HTTP/2,
// and what a relay spends per event depends on it (Go's TLS reads whole
// records, nginx reads the socket and then OpenSSL's buffer), so speed
// claims are measured in these shapes beside plain HTTP.
const (
	legPlain = "plain" // HTTP/1.1 over TCP
	legTLS   = "tls"   // HTTP/1.1 over TLS, the stub's certificate signed by the bench's private CA
	legH2    = "h2"    // TLS as legTLS, the stub also offering h2 by ALPN
)

// allLegs are the legs in the order they run and tables list them.
var allLegs = []string{legPlain, legTLS, legH2}

// parseLegs reads -backend: a comma-separated subset of allLegs, put in
// allLegs' order.
func parseLegs(s string) ([]string, error) {
	var legs []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allLegs, f) {
			return nil, fmt.Errorf("-backend: unknown leg %q (want %s)", f, strings.Join(allLegs, ", "))
		}
		if !slices.Contains(legs, f) {
			legs = append(legs, f)
		}
	}
	slices.SortFunc(legs, func(a, b string) int { return slices.Index(allLegs, a) - slices.Index(allLegs, b) })
	return legs, nil
}

// legMode is the runKey mode of mode's runs on leg. Plain keeps the bare
// mode, so every table of the plain leg reads its runs as before.
func legMode(mode, leg string) string {
	if leg == legPlain {
		return mode
	}
	return mode + " " + leg
}

// legTitle is how tables name a leg.
func legTitle(leg string) string {
	switch leg {
	case legTLS:
		return "TLS"
	case legH2:
		return "TLS, h2 offered"
	}
	return "plain"
}

// backendLeg is the stub process that serves one leg.
type backendLeg struct {
	addr string // 127.0.0.1:port
	tls  bool
}

func (l backendLeg) url() string {
	if l.tls {
		return "https://" + l.addr
	}
	return "http://" + l.addr
}

// legTargets are the relays measured on leg, in table order. The direct
// run is the harness's own floor, with no backend leg of its own: it runs
// once per repetition, not once per leg. floor-epoll's prototype dials
// plain TCP only.
func (b *bench) legTargets(leg string) []string {
	return slices.DeleteFunc(b.targets(), func(t string) bool {
		return t == "direct" || (t == "floor-epoll" && leg != legPlain)
	})
}

// startStubs starts one stub per leg on the stub CPUs: plain always (the
// direct run and every phase but the legs' use it), and for the TLS legs
// the private CA's certificate, written first into the bench's temporary
// folder.
func (b *bench) startStubs(ctx context.Context) error {
	b.backends = map[string]backendLeg{}
	tr := &http.Transport{TLSClientConfig: &tls.Config{}}
	b.stubClient = &http.Client{Timeout: 5 * time.Second, Transport: tr}
	for _, leg := range allLegs {
		if leg != legPlain && !slices.Contains(b.legs, leg) {
			continue
		}
		args := []string{}
		if leg != legPlain && b.pki.CA == "" {
			var err error
			if b.pki, err = privateca.Write(b.tmp); err != nil {
				return fmt.Errorf("private CA: %w", err)
			}
			roots, err := privateca.Pool(b.pki.CA)
			if err != nil {
				return err
			}
			tr.TLSClientConfig.RootCAs = roots
		}
		if leg != legPlain {
			args = append(args, "-tls-cert", b.pki.Cert, "-tls-key", b.pki.Key)
		}
		if leg == legH2 {
			args = append(args, "-http2")
		}
		addr, err := freePort()
		if err != nil {
			return err
		}
		pr, _, err := b.procs.start("stub-"+leg, b.cpus.stub, nil, nil, b.bins.stub, append([]string{"-addr", addr}, args...)...)
		if err != nil {
			return err
		}
		if err := waitListening(ctx, pr, addr, 10*time.Second); err != nil {
			return err
		}
		b.backends[leg] = backendLeg{addr: addr, tls: leg != legPlain}
	}
	b.stubAddr = b.backends[legPlain].addr
	return nil
}

// stubStats reads the counters of leg's stub.
func (b *bench) stubStats(ctx context.Context, leg string) (stub.Stats, error) {
	var st stub.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.backends[leg].url()+"/stub/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := b.stubClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("stub stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("stub stats: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("stub stats: %w", err)
	}
	return st, nil
}

// protocolOf names what a relay spoke to the stub between two readings of
// its counters: the stub counts what arrived over HTTP/2, so this is what
// ALPN really negotiated, whatever the relay was configured to try.
func protocolOf(before, after stub.Stats, tls bool) string {
	n, h2 := after.Requests-before.Requests, after.HTTP2-before.HTTP2
	var p string
	switch {
	case n == 0:
		return "no requests"
	case h2 == 0:
		p = "HTTP/1.1"
	case h2 == n:
		p = "HTTP/2"
	default:
		p = fmt.Sprintf("HTTP/1.1 and HTTP/2 (%d of %d requests)", h2, n)
	}
	if tls {
		p += " over TLS"
	}
	return p
}

// legKey names a relay on a leg, for what is measured per leg and relay
// rather than per run.
type legKey struct{ leg, relay string }

// gatewayEndpoint is the bench pool's endpoint line for leg: the stub's
// URL and, behind TLS, the private CA through the gateway's ordinary
// per-endpoint trust (ca_file).
func (b *bench) gatewayEndpoint(leg string) string {
	be := b.backends[leg]
	if !be.tls {
		return fmt.Sprintf(`{url: "%s"}`, be.url())
	}
	return fmt.Sprintf(`{url: "%s", ca_file: "%s"}`, be.url(), filepath.ToSlash(b.pki.CA))
}
