package main

// The neighbour phase: one tenant's added TTFT on a
// gateway while another tenant floods it, with the flooding tenant
// uncapped and capped by max_concurrent_requests, while the flood reads
// its streams as fast as the stub sends them, and while anonymous
// connections hold the connection cap (idle keep-alives, half-sent
// headers), against the same tenant alone.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The neighbour phase's shape: floodStreams streams of tenant flood held
// in a closed loop (a refused one retries after its Retry-After, 1 s
// give or take half, as clients with jitter do) while neighbourStreams streams of tenant bench run;
// floodCap is the flood's max_concurrent_requests in the capped run.
const (
	floodStreams     = 400
	neighbourStreams = 30
	floodCap         = 64
)

// The anonymous floods: anonConns connections at a max_connections of
// anonCap, each re-opened as soon as the gateway closes it; the fast
// flood's streams are fastTokens events sent back to back.
const (
	anonConns  = 512
	anonCap    = 512
	fastTokens = "2000"
)

// neighbourRun is one scenario's figures.
type neighbourRun struct {
	name             string
	neighbour        runResult
	floodDone        int64 // flood streams completed in the window
	floodRefused     int64 // flood requests refused 429
	floodOtherErrors int64
	anonReopened     int64 // anonymous connections the gateway closed (and the flood re-opened)
}

// mintToken mints a dev-issuer token for tenant.
func (b *bench) mintToken(tenant string) (string, error) {
	resp, err := http.Get(b.issuerURL + "/mint?tenant=" + tenant + "&sub=bench&aud=llm-gateway&ttl=6h")
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("mint: %d %v %s", resp.StatusCode, err, body)
	}
	return strings.TrimSpace(string(body)), nil
}

// neighbours measures the three scenarios, each on a fresh gateway.
func (b *bench) neighbours(ctx context.Context, res *results) error {
	floodToken, err := b.mintToken("flood")
	if err != nil {
		return err
	}
	p := b.plan
	for _, sc := range []struct {
		name     string
		flood    int  // flood streams; 0 = the neighbour alone
		cap      int  // the flood tenant's max_concurrent_requests
		fast     bool // the flood's streams: events back to back, read at once
		anon     int  // anonymous connections held at the cap
		halfSent bool // … each with half a request header, else idle after a GET /healthz
	}{
		{name: "alone"},
		{name: fmt.Sprintf("flood of %d streams, uncapped", floodStreams), flood: floodStreams, cap: 100000},
		{name: fmt.Sprintf("flood of %d streams, max_concurrent_requests %d", floodStreams, floodCap), flood: floodStreams, cap: floodCap},
		{name: fmt.Sprintf("flood of %d streams read as fast as sent, max_concurrent_requests %d", floodStreams, floodCap), flood: floodStreams, cap: floodCap, fast: true},
		{name: fmt.Sprintf("%d idle anonymous connections, max_connections %d", anonConns, anonCap), anon: anonConns},
		{name: fmt.Sprintf("%d half-sent headers, max_connections %d", anonConns, anonCap), anon: anonConns, halfSent: true},
	} {
		b.floodCap = max(sc.cap, 1)
		b.maxConns = 0
		if sc.anon > 0 {
			b.maxConns = anonCap
		}
		// A non-nil env: these gateways do not count among the idle RSS samples.
		err := b.withTargetEnv(ctx, "gateway", floodStreams+neighbourStreams+64, []string{}, res, func(t *target, _ int) error {
			run := neighbourRun{name: sc.name}
			fctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			flood := &target{name: "flood", base: t.base, token: floodToken, client: newClient(floodStreams + 16)}
			defer flood.close()
			measureFrom := time.Now().Add(p.ramp)
			for i := range sc.flood {
				wg.Go(func() {
					// Started across the ramp, as closedLoop starts its
					// streams, and retried with jitter, as clients are:
					// 400 refusals in lockstep each second would measure
					// a synchronised wave no real flood sends.
					select {
					case <-time.After(time.Duration(int64(p.ramp) * int64(i) / int64(sc.flood))):
					case <-fctx.Done():
					}
					o := reqOpts{}
					if sc.fast {
						o = reqOpts{interval: "0s", tokens: fastTokens}
					}
					for fctx.Err() == nil {
						r := flood.doStream(fctx, o, nil)
						switch {
						case r.err == "" && time.Now().After(measureFrom):
							atomic.AddInt64(&run.floodDone, 1)
						case r.err == "status 429":
							atomic.AddInt64(&run.floodRefused, 1)
							select {
							case <-time.After(time.Second/2 + rand.N(time.Second)):
							case <-fctx.Done():
							}
						case r.err != "" && fctx.Err() == nil:
							atomic.AddInt64(&run.floodOtherErrors, 1)
						}
					}
				})
			}
			for range sc.anon {
				wg.Go(func() { holdAnonymous(fctx, t.base, sc.halfSent, &run.anonReopened) })
			}
			run.neighbour = closedLoop(ctx, t, neighbourStreams, p.ramp, p.window, p.tail)
			stop()
			wg.Wait()
			res.neighbours = append(res.neighbours, run)
			b.logf("neighbour %-48s: neighbour's added TTFT p50 %s p90 %s p99 %s (%d streams, %d errors); flood %d done, %d refused 429, %d other errors; %d anonymous connections closed by the gateway",
				sc.name, ms(run.neighbour.ttft.P50), ms(run.neighbour.ttft.P90), ms(run.neighbour.ttft.P99), run.neighbour.done, run.neighbour.errCount(),
				run.floodDone, run.floodRefused, run.floodOtherErrors, run.anonReopened)
			return nil
		})
		if err != nil {
			return err
		}
	}
	b.floodCap, b.maxConns = 0, 0
	return nil
}

// holdAnonymous holds one anonymous connection to base until ctx ends:
// a GET /healthz and then idle, or half a request header (halfSent), and
// a new one as soon as the gateway closes it, counting those in reopened.
func holdAnonymous(ctx context.Context, base string, halfSent bool, reopened *int64) {
	addr := strings.TrimPrefix(base, "http://")
	req := "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
	if halfSent {
		req = "GET /healthz HTTP/1.1\r\nHost: gw\r\n"
	}
	var d net.Dialer
	buf := make([]byte, 512)
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		if _, err := io.WriteString(c, req); err == nil {
			for { // the answer (idle) or nothing (half-sent), then the close
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
		}
		stop()
		c.Close()
		if ctx.Err() == nil {
			atomic.AddInt64(reopened, 1)
		}
	}
}

// neighbourTable is the report's table of the neighbour phase.
func neighbourTable(runs []neighbourRun) *mdTable {
	if len(runs) == 0 {
		return nil
	}
	t := newTable("scenario", "neighbour's added TTFT p50>", "p90>", "p99>", "neighbour's streams>", "errors>", "flood streams done>", "flood refused 429>")
	for _, r := range runs {
		t.add(r.name, ms(r.neighbour.ttft.P50), ms(r.neighbour.ttft.P90), ms(r.neighbour.ttft.P99),
			fmt.Sprint(r.neighbour.done), fmt.Sprint(r.neighbour.errCount()), fmt.Sprint(r.floodDone), fmt.Sprint(r.floodRefused))
	}
	return t
}
