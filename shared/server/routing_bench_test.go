package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/route"
)

// The routing bench (make bench-routing): real loopback backends behind the
// real server, each iteration one streaming request from one of 16
// concurrent callers (RunParallel, parallelism 8 on 2 cores), and the
// client's time to first token reported per choice.

// simBackend is a streaming backend with a time to first token, a few
// tokens after it, and optionally a simulated prefix cache: an LRU of the
// prefixes it saw (the agent named in the system message); a hit has a
// shorter time to first token and reports its cached tokens, as Azure
// and OpenAI do in usage.prompt_tokens_details.cached_tokens.
type simBackend struct {
	ttft, hitTTFT time.Duration
	cacheSize     int // prefixes held; 0 = no cache
	prefixTokens  int

	served atomic.Int64

	mu    sync.Mutex
	cache []string // most recent last
}

func (s *simBackend) lookup(prefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cacheSize == 0 {
		return false
	}
	if i := slices.Index(s.cache, prefix); i >= 0 {
		s.cache = append(slices.Delete(s.cache, i, i+1), prefix)
		return true
	}
	if len(s.cache) == s.cacheSize {
		s.cache = s.cache[1:]
	}
	s.cache = append(s.cache, prefix)
	return false
}

func (s *simBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.served.Add(1)
	b, _ := io.ReadAll(r.Body)
	prefix := ""
	if i := bytes.Index(b, []byte(`"content":"agent-`)); i >= 0 {
		j := i + len(`"content":"agent-`)
		k := j
		for k < len(b) && b[k] >= '0' && b[k] <= '9' {
			k++
		}
		prefix = string(b[j:k])
	}
	hit := prefix != "" && s.lookup(prefix)
	wait, cached := s.ttft, 0
	if hit {
		wait, cached = s.hitTTFT, s.prefixTokens
	}
	w.Header().Set("Content-Type", "text/event-stream")
	time.Sleep(wait)
	for i := 0; i < 4; i++ {
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n", s.prefixTokens+20, cached)
}

// sample is one request as the client saw it.
type sample struct {
	ttft   time.Duration
	cached int
}

// stream posts body and reads the stream to its end: the time to the
// first data event and the cached tokens the usage chunk reports.
func stream(c *http.Client, url, body string) (sample, error) {
	start := time.Now()
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return sample{}, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var s sample
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		if s.ttft == 0 {
			s.ttft = time.Since(start)
		}
		if i := strings.Index(line, `"cached_tokens":`); i >= 0 {
			rest := line[i+len(`"cached_tokens":`):]
			n := strings.IndexAny(rest, "},")
			s.cached, _ = strconv.Atoi(rest[:max(n, 0)])
		}
	}
	return s, sc.Err()
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// runRouting drives b.N streaming requests through a gateway on backends
// with the router's options; body gives caller i's n-th request, and each
// caller waits think between its requests (an agent running its tools).
func runRouting(b *testing.B, backends []*simBackend, ro route.Options, think time.Duration, body func(caller, n int) string) []sample {
	var urls []string
	for _, s := range backends {
		srv := httptest.NewServer(s)
		b.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	g := gatewayOnTiers(b, "openai", nil, nil, ro, urls...)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		mu      sync.Mutex
		samples []sample
		callers atomic.Int32
		failed  atomic.Value
	)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		caller := int(callers.Add(1))
		for n := 0; pb.Next(); n++ {
			s, err := stream(c, g.srv.URL, body(caller, n))
			if err != nil {
				failed.Store(err)
				return
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			if think > 0 {
				// A few milliseconds either way, so callers do not march in step.
				time.Sleep(think + time.Duration(caller*n%7)*time.Millisecond)
			}
		}
	})
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return samples
}

// BenchmarkRoutingSlowEndpoint: four endpoints, one with 5× the others'
// time to first token (100 ms against 20 ms). Reported: the client's TTFT
// p50 and p90 less the fast endpoints' 20 ms (what routing added), for the
// weighted random choice and for least outstanding requests.
func BenchmarkRoutingSlowEndpoint(b *testing.B) {
	const fast, slow = 20 * time.Millisecond, 100 * time.Millisecond
	for _, c := range []struct {
		name string
		ro   route.Options
	}{{"weighted-random", route.Options{WeightedRandom: true}}, {"least-outstanding", route.Options{}}} {
		b.Run(c.name, func(b *testing.B) {
			backends := []*simBackend{{ttft: slow}, {ttft: fast}, {ttft: fast}, {ttft: fast}}
			samples := runRouting(b, backends, c.ro, 0, func(caller, n int) string {
				return fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"caller %d turn %d"}]}`, caller, n)
			})
			ttfts := make([]time.Duration, len(samples))
			for i, s := range samples {
				ttfts[i] = s.ttft - fast
			}
			b.ReportMetric(float64(backends[0].served.Load())/float64(max(len(samples), 1)), "slow-share")
			b.ReportMetric(float64(percentile(ttfts, 0.5).Microseconds())/1000, "added-ttft-p50-ms")
			b.ReportMetric(float64(percentile(ttfts, 0.9).Microseconds())/1000, "added-ttft-p90-ms")
		})
	}
}

// BenchmarkRoutingCacheAffinity: an agent-like workload, 16 callers each
// an agent with its own long system prompt (about 1,000 tokens) taking
// turn after turn, on four endpoints whose prefix caches hold 4 (a fair
// share) or 8 prefixes each (a hit: 10 ms to first token instead of 60), 10 ms of tool time
// between turns. Reported: the cache hit ratio, cached tokens per request
// and the TTFT p50: weighted random (the choice before least
// outstanding), least outstanding without affinity, and with it.
func BenchmarkRoutingCacheAffinity(b *testing.B) {
	system := strings.Repeat("You are a careful coding agent; follow the repository's style. ", 64)
	for _, size := range []int{4, 8} {
		for _, c := range []struct {
			name string
			ro   route.Options
		}{{"weighted-random", route.Options{WeightedRandom: true}}, {"affinity-off", route.Options{NoAffinity: true}}, {"affinity-on", route.Options{}}} {
			b.Run(fmt.Sprintf("cache-%d/%s", size, c.name), func(b *testing.B) {
				var backends []*simBackend
				for range 4 {
					backends = append(backends, &simBackend{ttft: 60 * time.Millisecond, hitTTFT: 10 * time.Millisecond, cacheSize: size, prefixTokens: 1000})
				}
				samples := runRouting(b, backends, c.ro, 10*time.Millisecond, func(caller, n int) string {
					return fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"agent-%d %s"},{"role":"user","content":"turn %d"}]}`, caller, system, n)
				})
				hits, cached := 0, 0
				ttfts := make([]time.Duration, len(samples))
				for i, s := range samples {
					if s.cached > 0 {
						hits++
					}
					cached += s.cached
					ttfts[i] = s.ttft
				}
				n := float64(max(len(samples), 1))
				b.ReportMetric(float64(hits)/n, "hit-ratio")
				b.ReportMetric(float64(cached)/n, "cached-tokens/req")
				b.ReportMetric(float64(percentile(ttfts, 0.5).Microseconds())/1000, "ttft-p50-ms")
			})
		}
	}
}
