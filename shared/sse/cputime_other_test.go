//go:build !unix

package sse

import "time"

func processCPU() time.Duration { return 0 }
