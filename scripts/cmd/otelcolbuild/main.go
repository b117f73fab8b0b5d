// Command otelcolbuild builds the test collector (scripts/otelcol) into
// bin/otelcol as the tests would, and prints its path. make test starts it
// in the background first, so the collector's build (minutes on a fresh
// machine: it is a module of its own with the collector's dependencies)
// overlaps lint, the npm installs and the first test packages; the tests
// that need the collector wait on its lock instead of building it again.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/llmgw/gateway/internal/testing/otelcoltest"
)

func main() {
	start := time.Now()
	bin, err := otelcoltest.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelcolbuild:", err)
		os.Exit(1)
	}
	fmt.Printf("%s (%s)\n", bin, time.Since(start).Round(time.Millisecond))
}
