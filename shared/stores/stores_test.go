package stores

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/store"
)

// TestOpenMemory: the memory backend hands each part this process's
// store and builds no client.
func TestOpenMemory(t *testing.T) {
	for _, backend := range []string{"", Memory} {
		s, err := Open(t.Context(), Config{Backend: backend, Budgets: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Affinity.(*affinity.Memory); !ok {
			t.Errorf("%q: affinity store %T, want *affinity.Memory", backend, s.Affinity)
		}
		if _, ok := s.Budget.(*budget.Memory); !ok {
			t.Errorf("%q: budget store %T, want *budget.Memory", backend, s.Budget)
		}
		if s.Limiter != nil || s.Cooldowns != nil || len(s.clients) != 0 {
			t.Errorf("%q: memory built Redis parts: %+v", backend, s)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestOpenBadBackend: a backend that is neither is refused by name.
func TestOpenBadBackend(t *testing.T) {
	_, err := Open(t.Context(), Config{Backend: "mongo"})
	if err == nil || !strings.Contains(err.Error(), `"mongo"`) {
		t.Fatalf("got %v, want a refusal naming the backend", err)
	}
}

// TestOpenRedis: with Redis every part's store is on the one server,
// under the one key prefix, each client with its part's answer timeout;
// Close closes every client Open built.
func TestOpenRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, budgets := range []bool{false, true} {
		s, err := Open(t.Context(), Config{Backend: Redis, URL: srv.URL(), RedisSettings: RedisSettings{KeyPrefix: "t:"}, TakeTimeout: 70 * time.Millisecond, ReserveTimeout: 90 * time.Millisecond, Budgets: budgets})
		if err != nil {
			t.Fatal(err)
		}
		if s.Limiter == nil || s.Cooldowns == nil || s.Affinity == nil {
			t.Fatalf("budgets %v: a part without its store: %+v", budgets, s)
		}
		if (s.Budget != nil) != budgets {
			t.Errorf("budgets %v: budget store %v", budgets, s.Budget)
		}
		if got := s.clients[0].(*redis.Client).Options().ReadTimeout; got != 70*time.Millisecond {
			t.Errorf("limiter client's answer timeout %s, want limiter.timeout's 70ms", got)
		}
		want := 3 // limiter, state, cooldowns
		if budgets {
			want++ // reservations
			if got := s.clients[3].(*redis.Client).Options().ReadTimeout; got != 90*time.Millisecond {
				t.Errorf("reservation client's answer timeout %s, want budget.timeout's 90ms", got)
			}
		}
		if len(s.clients) != want {
			t.Errorf("budgets %v: %d clients, want %d", budgets, len(s.clients), want)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if err := s.Affinity.Put(ctx, "resp_1", affinity.Owner{Tenant: "t1"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		cancel()
		probe := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		if keys, err := probe.Keys(t.Context(), "t:*").Result(); err != nil || len(keys) == 0 {
			t.Errorf("keys under the prefix: %q, %v", keys, err)
		}
		_ = probe.Close()
		clients := s.clients
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range clients {
			if err := c.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
				t.Errorf("client %d after Close: %v, want closed", i, err)
			}
		}
	}
}

// TestOpenBadURL: a Redis URL the client cannot parse fails Open with an
// error (and whatever it built is closed), not a panic.
func TestOpenBadURL(t *testing.T) {
	s, err := Open(t.Context(), Config{Backend: Redis, URL: "bogus://x"})
	if err == nil || s != nil {
		t.Fatalf("got %v, %v; want an error and no set", s, err)
	}
}

// TestOpenKindMismatch: Open does no I/O, then finds in the background
// that the server's kind does not match redis_cluster (a single-node
// client on a cluster node; a cluster client on a single node): it sends
// the configuration error, naming the setting, on Misconfigured, and
// every part's calls fail with it from then on. A matching kind sends
// nothing.
func TestOpenKindMismatch(t *testing.T) {
	t.Parallel()
	single, cluster := redistest.Start(t), redistest.StartCluster(t)
	for _, tc := range []struct {
		name    string
		url     string
		cluster bool
		wrong   bool
	}{
		{name: "single client on a cluster node", url: cluster.Nodes[0].URL(), wrong: true},
		{name: "cluster client on a single node", url: single.URL(), cluster: true, wrong: true},
		{name: "cluster client on a cluster", url: cluster.URL(), cluster: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.Context(), Config{Backend: Redis, URL: tc.url, RedisCluster: tc.cluster, Budgets: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			select {
			case err := <-s.Misconfigured():
				if !tc.wrong || !errors.Is(err, store.ErrMisconfigured) || !strings.Contains(err.Error(), "store.redis_cluster") {
					t.Fatalf("misconfigured: %v", err)
				}
			case <-time.After(3 * time.Second):
				if tc.wrong {
					t.Fatal("no configuration error within 3s")
				}
			}
			_, _, err = s.Affinity.Get(t.Context(), "resp_1")
			if errors.Is(err, store.ErrMisconfigured) != tc.wrong {
				t.Fatalf("a call after the check: %v; want misconfigured %v", err, tc.wrong)
			}
		})
	}
}

// TestOpenConns: MaxConns shares a bound out between the clients' pools
// (each node's, three counted for a cluster) and Conns reports what they
// may hold: under a small open-file limit the pools shrink to its share;
// a share larger than go-redis's default pools, or none, keeps them; a
// pool_size in the URL wins.
func TestOpenConns(t *testing.T) {
	def := 10 * runtime.GOMAXPROCS(0)
	tests := []struct {
		name     string
		url      string
		cluster  bool
		budgets  bool
		maxConns int
		want     int
	}{
		{"the default pools", "redis://127.0.0.1:1", false, true, 0, 4 * def},
		{"a quarter of ulimit -n 256", "redis://127.0.0.1:1", false, true, 64, 4 * min(16, def)},
		{"three clients without budgets", "redis://127.0.0.1:1", false, false, 64, 3 * min(21, def)},
		{"a share larger than the defaults", "redis://127.0.0.1:1", false, true, 1 << 20, 4 * def},
		{"a tiny share keeps one connection a client", "redis://127.0.0.1:1", false, true, 2, 4},
		{"the URL's pool_size wins", "redis://127.0.0.1:1?pool_size=7", false, true, 64, 28},
		{"a cluster's three nodes", "redis://127.0.0.1:1", true, true, 64, 60},
		{"a cluster's default pools", "redis://127.0.0.1:1", true, true, 0, 4 * 3 * def / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No I/O until a command: the unreachable port is never asked
			// within the test, only the pools' sizes are read.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			s, err := Open(ctx, Config{Backend: Redis, URL: tt.url, RedisCluster: tt.cluster, Budgets: tt.budgets, MaxConns: tt.maxConns})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Conns(); got != tt.want {
				t.Fatalf("Conns() = %d, want %d", got, tt.want)
			}
		})
	}
}
