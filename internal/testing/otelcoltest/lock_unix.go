//go:build unix

package otelcoltest

import (
	"os"
	"syscall"
)

// lock takes an exclusive lock on path (created if missing), waiting for
// whoever holds it; the returned func releases it. The kernel releases it
// too when the holder dies, so a killed build never blocks the next.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
