//go:build unix

package sse

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user+system) this process has used. On a busy
// machine it measures the relay's cost better than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
