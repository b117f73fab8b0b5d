//go:build !linux

package rawconn

import "net"

// Wrap is c as it is: raw reads and writes are Linux's here.
func Wrap(c net.Conn) net.Conn { return c }
