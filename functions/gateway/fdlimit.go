package main

import (
	"fmt"

	"github.com/llmgw/gateway/shared/server/listener"
)

// fdReserve is the open files kept beyond those of the client
// connections: the listener, Redis pools, JWKS and token fetches,
// telemetry, the runtime's own. Under a small limit it is at most a
// quarter of the limit, so that a 256-file container still serves about
// eighty connections.
const fdReserve = 256

// fdReserveMin is the least reserve: stdio, the listener, the poller.
const fdReserveMin = 16

// connsWithin is the client-connection cap the open-file limit fds
// allows with maxConns configured (0 = no cap): maxConns when the limit
// holds it (or is unknown, 0), else what the limit does hold. Each
// connection takes two descriptors (its own and its backend request's),
// and the refusals in progress (listener.Refusing, a quarter of the cap)
// one each. Without the clamp accepted connections took every descriptor
// and no backend dial succeeded, a total outage; with it a
// connection beyond the cap is refused cleanly. A limit too small for
// one connection is an error.
func connsWithin(maxConns int, fds uint64) (int, error) {
	if fds == 0 {
		return maxConns, nil
	}
	reserve := max(min(uint64(fdReserve), fds/4), fdReserveMin)
	fits := func(n int) bool { return uint64(2*n+listener.Refusing(n))+reserve <= fds }
	if !fits(1) {
		return 0, fmt.Errorf("max_connections: the open-file limit (%d) leaves no descriptor for a client connection; raise it (ulimit -n)", fds)
	}
	if maxConns > 0 && fits(maxConns) {
		return maxConns, nil
	}
	// The largest n that fits: 2n + n/4 + reserve <= fds, near (fds-reserve)*4/9.
	n := int((fds - reserve) * 4 / 9)
	for n > 1 && !fits(n) {
		n--
	}
	for fits(n + 1) {
		n++
	}
	return n, nil
}
