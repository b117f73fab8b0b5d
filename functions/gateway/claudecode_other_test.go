//go:build !unix

package main

import "os/exec"

// ownGroup is a no-op where there are no process groups: the context
// kills node only.
func ownGroup(*exec.Cmd) (kill func()) { return func() {} }
