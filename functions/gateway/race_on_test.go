//go:build race

package main

// raceEnabled: the race detector slows every goroutine five to ten
// times, so the end-to-end tests that measure connections give way and
// refusals arrive in order (their clients write within the listener's
// bounds) skip under it. The listener's own concurrency is race-tested
// in shared/server (TestListenerHighWater, TestListenerLingeringGivesWay).
const raceEnabled = true
