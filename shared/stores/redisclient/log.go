package redisclient

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// SetLogger sends go-redis's own diagnostics (a failed dial, re-AUTH or
// pooled connection) to log as warnings, instead of the library's default
// plain lines on stderr. go-redis has one logger for the process (swapped
// atomically): the binary sets it once at start.
func SetLogger(log *slog.Logger) { redis.SetLogger(logger{log}) }

// logger is go-redis's logging interface on a slog.Logger.
type logger struct{ log *slog.Logger }

func (l logger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
