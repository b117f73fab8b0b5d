package redisclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// TestSlowConnectionWithinDialBudget: a new connection whose handshake
// takes longer than the answer timeout (a proxy holds it 150ms, as TLS and
// a login may) is waited for within the dial budget, while an answer on an
// established connection is still held to the timeout.
func TestSlowConnectionWithinDialBudget(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr(), 150*time.Millisecond)
	c, err := redisclient.NewClient(redisclient.ClientOptions{URL: px.URL(), Timeout: timeout, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("first command on a slow new connection: %v", err)
	}
	if err := redisclient.WarmPool(context.Background(), c); err != nil {
		t.Fatalf("warm pool: %v", err)
	}
	if n, want := c.PoolStats().TotalConns, uint32(c.Options().PoolSize); n < 2 || n > want {
		t.Errorf("warm pool: %d connections, want 2..%d", n, want)
	}

	px.Blackhole(true)
	start := time.Now()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING answered through a blackhole")
	}
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("an answer on an open connection waited %s, want about the %s timeout", took, timeout)
	}
}
