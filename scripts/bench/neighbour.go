package main

// The neighbour phase (issue 22): one tenant's added TTFT on a gateway
// while another tenant floods it, with the flooding tenant uncapped and
// capped by max_concurrent_requests, against the same tenant alone.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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

// neighbourRun is one scenario's figures.
type neighbourRun struct {
	name             string
	neighbour        runResult
	floodDone        int64 // flood streams completed in the window
	floodRefused     int64 // flood requests refused 429
	floodOtherErrors int64
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
		name  string
		flood int // flood streams; 0 = the neighbour alone
		cap   int // the flood tenant's max_concurrent_requests
	}{
		{"alone", 0, 0},
		{fmt.Sprintf("flood of %d streams, uncapped", floodStreams), floodStreams, 100000},
		{fmt.Sprintf("flood of %d streams, max_concurrent_requests %d", floodStreams, floodCap), floodStreams, floodCap},
	} {
		b.floodCap = max(sc.cap, 1)
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
					for fctx.Err() == nil {
						r := flood.doStream(fctx, reqOpts{}, nil)
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
			run.neighbour = closedLoop(ctx, t, neighbourStreams, p.ramp, p.window, p.tail)
			stop()
			wg.Wait()
			res.neighbours = append(res.neighbours, run)
			b.logf("neighbour %-48s: neighbour's added TTFT p50 %s p90 %s p99 %s (%d streams, %d errors); flood %d done, %d refused 429, %d other errors",
				sc.name, ms(run.neighbour.ttft.P50), ms(run.neighbour.ttft.P90), ms(run.neighbour.ttft.P99), run.neighbour.done, run.neighbour.errCount(),
				run.floodDone, run.floodRefused, run.floodOtherErrors)
			return nil
		})
		if err != nil {
			return err
		}
	}
	b.floodCap = 0
	return nil
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
