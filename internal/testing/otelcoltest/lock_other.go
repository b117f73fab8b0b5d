//go:build !unix

package otelcoltest

// lock is a no-op where flock is missing: concurrent builders then each
// build, and the last rename wins (the binaries are the same).
func lock(string) (func(), error) { return func() {}, nil }
