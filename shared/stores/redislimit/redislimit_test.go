package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
)

// newClient returns a client of srv closed at the end of the test. Tests use
// a generous timeout: they check semantics, not latency.
func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	c, err := redisclient.NewClient(redisclient.ClientOptions{URL: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newKindClient is newClient on k: a cluster client for a cluster.
func newKindClient(t testing.TB, k redistest.Kind) redis.UniversalClient {
	t.Helper()
	c, err := redisclient.New(redisclient.ClientOptions{URL: k.URL, Cluster: k.Cluster, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t testing.TB, c redislimit.Client, cfg redislimit.Config) *redislimit.Store {
	t.Helper()
	s, err := redislimit.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func newMemory(t testing.TB, tokens uint64, interval time.Duration) limiter.Store {
	t.Helper()
	s, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// model is go-limiter v0.7.1 memorystore's bucket as a pure function of the
// tick a take falls in: the reference both stores are checked against.
type model struct {
	max, avail, lastTick uint64
	interval             time.Duration
}

func (m *model) take(tick uint64) (remaining uint64, ok bool) {
	if m.lastTick < tick {
		fill := uint64(float64(tick-m.lastTick) * (float64(m.interval) / float64(m.max)))
		m.avail = min(fill, m.max)
		m.lastTick = tick
	}
	if m.avail > 0 {
		m.avail--
		return m.avail, true
	}
	return 0, false
}

// tracked is one store's view of one key in the side-by-side run.
type tracked struct {
	start uint64 // bucket start, Unix ns, learned from the first reset
	model model
}

// observe checks one take's result against the model at the tick the store
// itself reports (reset = start + (tick+1)*interval) and returns that tick.
func (tr *tracked) observe(t *testing.T, name string, step int, interval time.Duration, tokens, limit, remaining, reset uint64, ok bool) uint64 {
	t.Helper()
	iv := uint64(interval)
	if tr.start == 0 {
		tr.start = reset - iv
		tr.model = model{max: tokens, avail: tokens, interval: interval}
	}
	if limit != tokens {
		t.Fatalf("step %d %s: limit %d, want %d", step, name, limit, tokens)
	}
	if reset < tr.start+iv || (reset-tr.start)%iv != 0 {
		t.Fatalf("step %d %s: reset %d is not on a tick of start %d", step, name, reset, tr.start)
	}
	tick := (reset-tr.start)/iv - 1
	if tick < tr.model.lastTick {
		t.Fatalf("step %d %s: tick went back from %d to %d", step, name, tr.model.lastTick, tick)
	}
	wantRem, wantOK := tr.model.take(tick)
	if ok != wantOK || remaining != wantRem {
		t.Fatalf("step %d %s tick %d: got ok=%v remaining=%d, model says ok=%v remaining=%d", step, name, tick, ok, remaining, wantOK, wantRem)
	}
	return tick
}

// TestMatchesMemorystore runs redislimit and memorystore side by side over
// random schedules (random keys, random gaps, bursts) and requires that they
// admit exactly the same takes.
//
// Time control: Redis TIME cannot be faked, so instead of controlling time
// the test makes every result self-describing. Both stores report reset =
// start + (tick+1)*interval, from which the test learns each bucket's start
// (first take) and the tick every later take was evaluated in. Each store is
// checked against a reference model (memorystore's algorithm as a pure
// function of that tick), which holds however late a take runs. Where both
// stores held the same bucket state and evaluated a take in the same tick,
// their outcomes are also compared directly; the schedule keeps takes at
// least `margin` (interval/6) away from both stores' tick boundaries so that
// this is the usual case, and the test requires it for half the steps. A
// stall longer than margin between the check and the take only moves that
// take to the next tick (both checks still hold); direct comparison resumes
// once the two states agree again, at the latest at the next full refill. Both clocks are this machine's wall clock
// (redis-server runs on loopback), which is what makes the phases comparable.
func TestMatchesMemorystore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv)

	for _, tc := range []struct {
		name     string
		tokens   uint64
		interval time.Duration
		keys     int
		steps    int
	}{
		{name: "4 per 100ms, 3 keys", tokens: 4, interval: 100 * time.Millisecond, keys: 3, steps: 150},
		{name: "1 per 60ms, 2 keys", tokens: 1, interval: 60 * time.Millisecond, keys: 2, steps: 80},
		{name: "7 per 150ms, 1 key", tokens: 7, interval: 150 * time.Millisecond, keys: 1, steps: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			ctx := context.Background()
			mem := newMemory(t, tc.tokens, tc.interval)
			rs := newStore(t, client, redislimit.Config{
				Tokens: tc.tokens, Interval: tc.interval,
				KeyPrefix: fmt.Sprintf("match:%d:", seed),
			})
			margin := tc.interval / 6

			type pair struct{ mem, red tracked }
			keys := make([]*pair, tc.keys)
			for i := range keys {
				keys[i] = &pair{}
			}
			compared, admitted := 0, 0

			// waitSafe sleeps until now is at least margin from every tick
			// boundary of both stores' buckets for key p.
			waitSafe := func(p *pair) {
				for _, tr := range []*tracked{&p.mem, &p.red} {
					if tr.start == 0 {
						continue
					}
					now := uint64(time.Now().UnixNano())
					phase := time.Duration((now - tr.start) % uint64(tc.interval))
					if phase < margin {
						time.Sleep(margin - phase)
					} else if phase > tc.interval-margin {
						time.Sleep(tc.interval - phase + margin)
					}
				}
			}

			for step := range tc.steps {
				k := rng.IntN(tc.keys)
				p := keys[k]
				key := fmt.Sprintf("k%d", k)
				switch r := rng.IntN(100); {
				case r < 60: // a burst of traffic
				case r < 90:
					time.Sleep(time.Duration(rng.Int64N(int64(tc.interval / 3))))
				default: // idle across one or more ticks
					time.Sleep(time.Duration(rng.Int64N(int64(tc.interval * 5 / 2))))
				}
				if rng.IntN(40) == 0 && p.mem.start != 0 && p.mem.model == p.red.model {
					// Burst on an existing bucket: extra tokens until the next tick.
					n := uint64(rng.IntN(3) + 1)
					waitSafe(p)
					if err := mem.Burst(ctx, key, n); err != nil {
						t.Fatal(err)
					}
					if err := rs.Burst(ctx, key, n); err != nil {
						t.Fatal(err)
					}
					p.mem.model.avail += n
					p.red.model.avail += n
					mt, mr, _ := mem.Get(ctx, key)
					rt, rr, err := rs.Get(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					if mt != rt || mr != rr {
						t.Fatalf("step %d: Get after Burst: memory (%d, %d), redis (%d, %d)", step, mt, mr, rt, rr)
					}
					continue
				}
				waitSafe(p)
				inStep := p.mem.model == p.red.model
				mTok, mRem, mReset, mOK, err := mem.Take(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				rTok, rRem, rReset, rOK, err := rs.Take(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				mTick := p.mem.observe(t, "memory", step, tc.interval, tc.tokens, mTok, mRem, mReset, mOK)
				rTick := p.red.observe(t, "redis", step, tc.interval, tc.tokens, rTok, rRem, rReset, rOK)
				if inStep && mTick == rTick {
					compared++
					if mOK != rOK || mRem != rRem {
						t.Fatalf("step %d key %s tick %d: memory ok=%v remaining=%d, redis ok=%v remaining=%d", step, key, mTick, mOK, mRem, rOK, rRem)
					}
				} else if mTick != rTick {
					// A stall longer than margin moved one take across a
					// boundary; the models still check each store, and the
					// direct comparison resumes once their states agree.
					t.Logf("step %d key %s: memory tick %d, redis tick %d", step, key, mTick, rTick)
				}
				if rOK {
					admitted++
				}
			}
			t.Logf("%d takes compared directly, %d admitted by redis", compared, admitted)
			if compared < tc.steps/2 {
				t.Errorf("only %d of %d steps compared directly; the schedule did not keep the stores in phase", compared, tc.steps)
			}
		})
	}
}

// TestSetGetBurst checks the rest of the limiter.Store contract against
// memorystore, each case on a fresh key well inside its first tick.
func TestSetGetBurst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv)
	const tokens, interval = 3, time.Minute

	type op func(ctx context.Context, s limiter.Store, key string) (string, error)
	take := func(ctx context.Context, s limiter.Store, key string) (string, error) {
		tok, rem, _, ok, err := s.Take(ctx, key)
		return fmt.Sprintf("take(%d,%d,%v)", tok, rem, ok), err
	}
	get := func(ctx context.Context, s limiter.Store, key string) (string, error) {
		tok, rem, err := s.Get(ctx, key)
		return fmt.Sprintf("get(%d,%d)", tok, rem), err
	}
	set := func(n uint64, d time.Duration) op {
		return func(ctx context.Context, s limiter.Store, key string) (string, error) {
			return fmt.Sprintf("set(%d,%s)", n, d), s.Set(ctx, key, n, d)
		}
	}
	burst := func(n uint64) op {
		return func(ctx context.Context, s limiter.Store, key string) (string, error) {
			return fmt.Sprintf("burst(%d)", n), s.Burst(ctx, key, n)
		}
	}
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"get missing key", []op{get}},
		{"takes until refused", []op{take, take, take, take, take, get}},
		{"set replaces shape", []op{take, set(5, time.Hour), get, take, take, take, take, take, take, get}},
		{"set zero tokens", []op{set(0, time.Hour), take, get}},
		{"burst existing", []op{take, take, take, take, burst(2), get, take, take, take}},
		{"burst missing creates bigger bucket", []op{burst(4), get, take, get}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem := newMemory(t, tokens, interval)
			rs := newStore(t, client, redislimit.Config{Tokens: tokens, Interval: interval, KeyPrefix: "sgb:" + tc.name + ":"})
			for i, o := range tc.ops {
				want, err := o(ctx, mem, "k")
				if err != nil {
					t.Fatal(err)
				}
				got, err := o(ctx, rs, "k")
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("op %d: redis %s, memory %s", i, got, want)
				}
			}
		})
	}
}

// TestConcurrentTakes fires many goroutines at one key, through one client
// and through two clients (two replicas) on one Redis, and requires exactly
// Tokens admitted in the tick, each remaining value handed out exactly once;
// on a single node and on a three-primary cluster (cluster clients: a
// take's one key is in one slot, on whichever node owns it).
func TestConcurrentTakes(t *testing.T) {
	t.Parallel()
	for _, k := range redistest.Kinds(t) {
		for _, tc := range []struct {
			name     string
			replicas int
		}{
			{"one client", 1},
			{"two replicas", 2},
		} {
			t.Run(k.Name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				testConcurrentTakes(t, k, tc.name, tc.replicas)
			})
		}
	}
}

func testConcurrentTakes(t *testing.T, k redistest.Kind, name string, replicas int) {
	const tokens, goroutines, takesEach = 50, 100, 5
	var stores []*redislimit.Store
	for range replicas {
		// A separate client per replica: separate pools, as two processes.
		stores = append(stores, newStore(t, newKindClient(t, k), redislimit.Config{
			Tokens: tokens, Interval: time.Minute, KeyPrefix: "conc:" + name + ":",
		}))
	}
	var (
		mu        sync.Mutex
		remaining []uint64
		resets    = map[uint64]bool{}
		wg        sync.WaitGroup
		gate      = make(chan struct{})
	)
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			<-gate
			for range takesEach {
				_, rem, reset, ok, err := s.Take(context.Background(), "tenant")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				resets[reset] = true
				if ok {
					remaining = append(remaining, rem)
				}
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	if len(resets) != 1 {
		t.Fatalf("takes spanned %d ticks of a one-minute interval", len(resets))
	}
	if len(remaining) != tokens {
		t.Fatalf("admitted %d of %d takes, want exactly %d", len(remaining), goroutines*takesEach, tokens)
	}
	sort.Slice(remaining, func(i, j int) bool { return remaining[i] < remaining[j] })
	for i, r := range remaining {
		if r != uint64(i) {
			t.Fatalf("remaining values %v: want each of 0..%d once", remaining, tokens-1)
		}
	}
}

// TestConcurrentNeverOverAdmits hammers one key across several short ticks
// and checks, per tick (identified by its reset), that no more than Tokens
// were admitted, and that a tick hammered from start to end admitted all.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const tokens = 20
	s := newStore(t, newClient(t, srv), redislimit.Config{Tokens: tokens, Interval: 100 * time.Millisecond, KeyPrefix: "over:"})
	var (
		mu       sync.Mutex
		admitted = map[uint64]int{}
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(600 * time.Millisecond)
	for range 50 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				_, _, reset, ok, err := s.Take(context.Background(), "tenant")
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					admitted[reset]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for reset, n := range admitted {
		if n > tokens {
			t.Errorf("tick ending %d admitted %d, limit %d", reset, n, tokens)
		}
	}
	if len(admitted) < 2 {
		t.Errorf("takes covered %d ticks; the test wants several", len(admitted))
	}
}

// TestKeysExpire checks idle buckets cost nothing: every key has a TTL, at
// least two intervals.
func TestKeysExpire(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		interval time.Duration
		ttl      time.Duration
		minTTL   time.Duration
	}{
		{"default", time.Second, 0, 50 * time.Second},
		{"long interval wins", 10 * time.Minute, time.Second, 19 * time.Minute},
		{"explicit", time.Second, 5 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, client, redislimit.Config{Tokens: 1, Interval: tc.interval, TTL: tc.ttl, KeyPrefix: "ttl:"})
			if _, _, _, _, err := s.Take(ctx, tc.name); err != nil {
				t.Fatal(err)
			}
			ttl, err := client.PTTL(ctx, "ttl:"+tc.name).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < tc.minTTL || ttl > max(tc.ttl, 2*tc.interval, redislimit.DefaultTTL) {
				t.Errorf("PTTL = %s, want between %s and the configured TTL", ttl, tc.minTTL)
			}
		})
	}
}

// TestRedisClock checks that the bucket's clock is Redis TIME: the start
// recovered from the reset lies between two TIME readings around the take.
func TestRedisClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	const interval = time.Hour
	s := newStore(t, client, redislimit.Config{Tokens: 1, Interval: interval, KeyPrefix: "clock:"})
	before, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, _, reset, _, err := s.Take(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	after, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, int64(reset)).Add(-interval)
	if start.Before(before.Truncate(time.Microsecond)) || start.After(after) {
		t.Errorf("bucket start %s not within Redis TIME [%s, %s]", start, before, after)
	}
}

func TestStopped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv), redislimit.Config{})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := s.Take(context.Background(), "k"); !errors.Is(err, limiter.ErrStopped) {
		t.Errorf("Take after Close: err = %v, want ErrStopped", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range []struct {
		name string
		cfg  redislimit.Config
	}{
		{"sub-microsecond interval", redislimit.Config{Interval: 1500 * time.Nanosecond}},
		{"too many tokens", redislimit.Config{Tokens: 1<<53 + 1}},
		{"negative ttl", redislimit.Config{TTL: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := redislimit.New(c, tc.cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
	if _, err := redislimit.New(nil, redislimit.Config{}); err == nil {
		t.Error("New accepted a nil client")
	}
}
