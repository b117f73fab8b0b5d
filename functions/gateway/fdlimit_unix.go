//go:build unix

package main

import "syscall"

// raiseFDLimit raises the soft open-file limit to the hard one, where the
// platform allows, and returns the soft limit then in force (0 when
// unknown). Go's runtime does the same at start on Linux since Go 1.19;
// doing it here too makes the limit certain and logged, whatever started
// the process.
func raiseFDLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	if l.Cur < l.Max {
		want := l
		want.Cur = l.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			l = want
		}
	}
	return uint64(l.Cur)
}
