package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/stub"
)

func TestParseLegs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"plain,tls,h2", allLegs, false},
		{"h2, plain,h2", []string{legPlain, legH2}, false},
		{"tls", []string{legTLS}, false},
		{"tls,http3", nil, true},
		{"", nil, true},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseLegs(tt.in)
			if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
				t.Fatalf("parseLegs(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// TestLegModeKeepsPlain: the plain leg's runs keep the bare mode that
// every older table reads.
func TestLegModeKeepsPlain(t *testing.T) {
	t.Parallel()
	if legMode("closed", legPlain) != "closed" || legMode("closed", legTLS) == "closed" || legMode("closed", legTLS) == legMode("closed", legH2) {
		t.Fatal("legMode: plain must be the bare mode, every other leg its own")
	}
}

func TestProtocolOf(t *testing.T) {
	t.Parallel()
	before := stub.Stats{Requests: 10, HTTP2: 4}
	for _, tt := range []struct {
		name  string
		after stub.Stats
		tls   bool
		want  string
	}{
		{"plain", stub.Stats{Requests: 110, HTTP2: 4}, false, "HTTP/1.1"},
		{"tls", stub.Stats{Requests: 110, HTTP2: 4}, true, "HTTP/1.1 over TLS"},
		{"h2", stub.Stats{Requests: 110, HTTP2: 104}, true, "HTTP/2 over TLS"},
		{"mixed", stub.Stats{Requests: 110, HTTP2: 54}, true, "HTTP/1.1 and HTTP/2 (50 of 100 requests) over TLS"},
		{"none", before, true, "no requests"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocolOf(before, tt.after, tt.tls); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestGatewayEndpoint: a TLS leg's endpoint names the private CA through
// the gateway's ca_file; the plain leg's is the URL alone, as before.
func TestGatewayEndpoint(t *testing.T) {
	t.Parallel()
	b := &bench{backends: map[string]backendLeg{
		legPlain: {addr: "127.0.0.1:1"},
		legTLS:   {addr: "127.0.0.1:2", tls: true},
	}}
	b.pki.CA = "/tmp/bench-x/ca.pem"
	if got, want := b.gatewayEndpoint(legPlain), `{url: "http://127.0.0.1:1"}`; got != want {
		t.Errorf("plain: %s, want %s", got, want)
	}
	if got := b.gatewayEndpoint(legTLS); !strings.Contains(got, `url: "https://127.0.0.1:2"`) || !strings.Contains(got, `ca_file: "/tmp/bench-x/ca.pem"`) {
		t.Errorf("tls: %s", got)
	}
}
