// Command gateway is the LLM gateway: one binary that serves HTTP on $PORT
// (Azure Container Apps, any container host) or, when AWS_LAMBDA_RUNTIME_API
// is set, runs as a Lambda function behind a streaming Function URL.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/llmgw/gateway/shared/config"
)

func main() {
	// The relay allocates nothing per event and little per request, so a
	// lower GC target costs almost no CPU and keeps RSS near the live heap
	// (one core, hundreds of open streams). GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		var p config.Problems
		if errors.As(err, &p) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
