package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
)

// A host is one way to run the gateway: the in-process HTTP server, or the
// real binary as a Lambda function behind a (emulated) Function URL. The
// contract tests send the same *http.Request to each and compare what a
// client gets.
type host interface {
	name() string
	do(t *testing.T, r *http.Request) reply
}

// reply is what a client of either host sees.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// functionURLHost is the Host header a Function URL request carries.
const functionURLHost = "abcdefghij.lambda-url.us-east-1.on.aws"

// gatewayBinary builds the production binary (CGO off, lambda.norpc), once
// per test process.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	return lambdatest.BuildTestBinary(t, ".", "lambda.norpc")
}

// functionEnv is the environment of g's gateway run as a Lambda function:
// the same config file and secrets, plus extra.
func functionEnv(g *gw, extra ...string) []string {
	env := []string{"GATEWAY_CONFIG=" + g.cfgPath}
	for k, v := range g.env {
		env = append(env, k+"="+v)
	}
	return append(env, extra...)
}

// httpHost sends requests to the in-process gateway over loopback HTTP.
type httpHost struct{ g *gw }

func (h httpHost) name() string { return "http" }

func (h httpHost) do(t *testing.T, r *http.Request) reply {
	t.Helper()
	u, err := url.Parse(h.g.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, ""
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("http host: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("http host: reading body: %v", err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// lambdaHost sends requests as Function URL events through the real AWS
// Lambda Runtime Interface Emulator to the real gateway binary. The
// emulator returns a streamed response whole (see lambdatest.Emulator), so
// this host proves the mapping and the bytes, not incremental delivery.
type lambdaHost struct{ emu *lambdatest.Emulator }

// startLambdaHost runs the gateway binary under aws-lambda-rie with g's
// config; the function starts at the first invocation and stays warm.
func startLambdaHost(t *testing.T, g *gw) lambdaHost {
	t.Helper()
	env := functionEnv(g, "AWS_LAMBDA_FUNCTION_TIMEOUT=60")
	return lambdaHost{lambdatest.StartEmulator(t, gatewayBinary(t), env)}
}

func (h lambdaHost) name() string { return "lambda" }

func (h lambdaHost) do(t *testing.T, r *http.Request) reply {
	t.Helper()
	r.Host = functionURLHost
	ev, err := lambdatest.URLEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, header, cookies, body, err := h.emu.Invoke(ctx, ev)
	if err != nil {
		t.Fatalf("lambda host: %v\n%s", err, h.emu.Process.Output())
	}
	if len(cookies) > 0 {
		t.Errorf("lambda host: the gateway set cookies %q", cookies)
	}
	return reply{status, header, body}
}

// Headers that belong to one transport, not to the gateway's answer: they
// are left out when the hosts' answers are compared.
var transportHeaders = map[string]bool{
	"Date":              true, // net/http adds its own; the Function URL too
	"Content-Length":    true, // net/http adds it to small bodies; Function URL streams are chunked
	"Transfer-Encoding": true,
	"Connection":        true,
}

// Headers whose values differ per request or per host (each host has its
// own bucket, created at its own time): compared by presence only.
var volatileHeaders = map[string]bool{
	"X-Request-Id":               true,
	"X-Ratelimit-Reset-Requests": true,
	"Retry-After":                true,
}

// volatileJSON matches the body fields that differ between two otherwise
// identical answers of the stub backend: ids, clocks.
var volatileJSON = regexp.MustCompile(`"(id|created|stub_emit_ns)":("[^"]*"|[0-9]+)`)

func normalizeBody(b []byte) string {
	return volatileJSON.ReplaceAllString(string(b), `"$1":"~"`)
}

// sameAnswer fails t unless two hosts' replies are the same answer: equal
// status, the same gateway headers with equal values (volatile ones only
// present), and equal bodies once ids and clocks are masked.
func sameAnswer(t *testing.T, a, b reply, an, bn string) {
	t.Helper()
	if a.status != b.status {
		t.Errorf("status: %s %d, %s %d", an, a.status, bn, b.status)
	}
	ha, hb := headerView(a.header), headerView(b.header)
	keys := map[string]bool{}
	for k := range ha {
		keys[k] = true
	}
	for k := range hb {
		keys[k] = true
	}
	var diffs []string
	for k := range keys {
		va, oka := ha[k]
		vb, okb := hb[k]
		switch {
		case oka != okb:
			diffs = append(diffs, k+": "+an+" "+present(oka)+", "+bn+" "+present(okb))
		case volatileHeaders[k]:
		case va != vb:
			diffs = append(diffs, k+": "+an+" "+va+", "+bn+" "+vb)
		}
	}
	sort.Strings(diffs)
	for _, d := range diffs {
		t.Errorf("header %s", d)
	}
	if na, nb := normalizeBody(a.body), normalizeBody(b.body); na != nb {
		t.Errorf("bodies differ:\n%s: %q\n%s: %q", an, na, bn, nb)
	}
}

func headerView(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, vv := range h {
		if !transportHeaders[k] {
			m[k] = strings.Join(vv, ", ")
		}
	}
	return m
}

func present(ok bool) string {
	if ok {
		return "has it"
	}
	return "lacks it"
}

// errorCode checks OpenAI's error JSON in r and returns its code.
func errorCode(t *testing.T, r reply) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error with Content-Type %q", ct)
	}
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == nil {
		t.Fatalf("not OpenAI error JSON: %s", r.body)
	}
	var raw map[string]map[string]json.RawMessage
	_ = json.Unmarshal(r.body, &raw)
	if _, ok := raw["error"]["param"]; !ok {
		t.Errorf("error JSON lacks param: %s", r.body)
	}
	return *e.Error.Code
}
