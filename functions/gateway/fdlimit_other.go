//go:build !unix

package main

// raiseFDLimit: no open-file limit to raise here (0 = unknown).
func raiseFDLimit() uint64 { return 0 }
