package main

import (
	"fmt"

	"github.com/llmgw/gateway/shared/server/listener"
)

// fdReserve is the open files kept beyond those of the client
// connections and the store's pools: the listener, JWKS and token
// fetches, telemetry, the runtime's own. Under a small limit it is at
// most a quarter of the limit, so that a 256-file container still serves
// about eighty connections.
const fdReserve = 256

// fdReserveMin is the least reserve: stdio, the listener, the poller.
const fdReserveMin = 16

// storeFDShare is the part of the open-file limit fds the store's pools
// may hold (stores.Config.MaxConns): a quarter of it, so that under a
// small limit the pools shrink (a 256-file container's four pools hold
// 64, where go-redis's default on two cores is 80) and the client
// connections keep the rest; under a large one the default pools fit.
// 0 (no bound) when the limit is unknown.
func storeFDShare(fds uint64) int { return int(fds / 4) }

// connsWithin is the client-connection cap the open-file limit fds
// allows with maxConns configured (0 = no cap), beside storeConns held
// by the store's pools (stores.Set.Conns): maxConns when the limit holds
// it (or is unknown, 0), else what the limit does hold. Each connection
// takes two descriptors (its own and its backend request's), and the
// refusals in progress (listener.Refusing, a quarter of the cap) one
// each. Without the clamp accepted connections took every descriptor and
// no backend dial succeeded, a total outage; with a reserve that left out
// the Redis pools (80 sockets on two cores against 64 kept), streams got
// 502 too many open files and /healthz hung; with it a connection beyond
// the cap is refused cleanly. A limit too small for one connection is an
// error.
func connsWithin(maxConns int, fds uint64, storeConns int) (int, error) {
	if fds == 0 {
		return maxConns, nil
	}
	reserve := max(min(uint64(fdReserve), fds/4), fdReserveMin) + uint64(storeConns)
	fits := func(n int) bool { return uint64(2*n+listener.Refusing(n))+reserve <= fds }
	if !fits(1) {
		return 0, fmt.Errorf("max_connections: the open-file limit (%d) leaves no descriptor for a client connection; raise it (ulimit -n)", fds)
	}
	if maxConns > 0 && fits(maxConns) {
		return maxConns, nil
	}
	// The largest n that fits: 2n + n/4 + reserve <= fds, near (fds-reserve)*4/9.
	n := int((fds - min(reserve, fds)) * 4 / 9)
	for n > 1 && !fits(n) {
		n--
	}
	for fits(n + 1) {
		n++
	}
	return n, nil
}
