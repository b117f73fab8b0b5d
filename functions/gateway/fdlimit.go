package main

import "fmt"

// fdReserve is the open files kept beyond two per client connection (one
// for it, one for its backend request): the listener, Redis pools, JWKS
// and token fetches, telemetry, idle backend connections. Under a small
// limit it is at most a quarter of the limit, so that a 256-file
// container still serves about a hundred connections.
const fdReserve = 256

// connsWithin is the client-connection cap the open-file limit fds
// allows with maxConns configured: maxConns when the limit holds two
// descriptors per connection plus the reserve (or is unknown, 0), else
// what it does hold. Without the clamp accepted connections took every
// descriptor and no backend dial succeeded, a total outage (issue 32);
// with it a connection beyond the cap is refused cleanly. A limit too
// small for even one connection is an error.
func connsWithin(maxConns int, fds uint64) (int, error) {
	if fds == 0 {
		return maxConns, nil
	}
	reserve := min(uint64(fdReserve), fds/4)
	if fds <= reserve+2 {
		return 0, fmt.Errorf("max_connections: the open-file limit (%d) leaves no descriptor for a client connection; raise it (ulimit -n)", fds)
	}
	room := int(min((fds-reserve)/2, uint64(maxConns)))
	if maxConns <= 0 {
		room = int((fds - reserve) / 2)
	}
	return room, nil
}
