package rawconn

import (
	"context"
	"net"
)

// DialContext is d's DialContext with each connection wrapped (Wrap), for
// an http.Transport's DialContext.
func DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}
