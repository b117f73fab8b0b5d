package otlp

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// memo keeps what was built for a key, so that each distinct key is
// built once: the attribute sets a request records its metrics with (an
// attribute.Set is sorted and deduplicated when it is made, and a
// measurement option boxes it), and span names. Every key is made of
// values from config or from short fixed lists, the metrics' own
// cardinality; should a key take values a caller chooses (a method), at
// most max are kept and the rest are built each time, as before there
// was a memo.
type memo[K comparable, V any] struct {
	mu  sync.RWMutex
	m   map[K]V
	max int
}

func (c *memo[K, V]) get(k K, build func(K) V) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = build(k)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[K]V)
	}
	if len(c.m) < c.max {
		c.m[k] = v
	}
	c.mu.Unlock()
	return v
}

// memoLimit bounds each memo: the metrics SDK's default cardinality limit.
// Tenants × models × routes × statuses stay far below it in any config
// this gateway is sized for (the tenant and model attributes only ever
// take values from config).
const memoLimit = 2000

// opts is one attribute set as the options an Add and a Record take,
// each a slice made once: an instrument is an interface, so a variadic
// option list built at the call would be allocated every time.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newOpts(kv ...attribute.KeyValue) opts {
	// NewSet sorts what it is given: a copy, as metric.WithAttributes makes.
	o := metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue(nil), kv...)...))
	return opts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// sets are the memos of every attribute set the exporter records with,
// one per shape of key.
type sets struct {
	requests  memo[requestKey, opts]
	decisions memo[decisionKey, opts]
	tenants   memo[tenantKey, opts]
	pools     memo[string, opts]
	genai     memo[genaiKey, *genaiSets]
	failovers memo[failoverKey, opts]
	costs     memo[costKey, opts]
	names     memo[[2]string, string] // span names: "{a} {b}"
}

func newSets(max int) *sets {
	s := &sets{}
	s.requests.max, s.decisions.max, s.tenants.max, s.pools.max = max, max, max, max
	s.genai.max, s.failovers.max, s.costs.max, s.names.max = max, max, max, max
	return s
}

// name is a span's name, a and b joined by a space.
func (s *sets) name(a, b string) string {
	return s.names.get([2]string{a, b}, func(k [2]string) string { return k[0] + " " + k[1] })
}

type tenantKey struct{ id, name string }

func (k tenantKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("llmgw.tenant.id", k.id), attribute.String("llmgw.tenant.name", k.name)}
}

func (s *sets) tenant(k tenantKey) opts {
	return s.tenants.get(k, func(k tenantKey) opts { return newOpts(k.attrs()...) })
}

// requestKey is llmgw.requests' attributes.
type requestKey struct {
	route, method, errorType string
	status                   int
	tenant                   tenantKey
}

func (s *sets) request(k requestKey) opts {
	return s.requests.get(k, func(k requestKey) opts {
		return newOpts(append([]attribute.KeyValue{
			attribute.String("http.route", k.route),
			attribute.String("http.request.method", k.method),
			attribute.Int("http.response.status_code", k.status),
			attribute.String("error.type", k.errorType),
		}, k.tenant.attrs()...)...)
	})
}

// decisionKey is the limiter's and the budget's decision metrics'
// attributes.
type decisionKey struct {
	decision string
	tenant   tenantKey
}

func (s *sets) decision(k decisionKey) opts {
	return s.decisions.get(k, func(k decisionKey) opts {
		return newOpts(append([]attribute.KeyValue{attribute.String("llmgw.decision", k.decision)}, k.tenant.attrs()...)...)
	})
}

func (s *sets) pool(p string) opts {
	return s.pools.get(p, func(p string) opts {
		return newOpts(attribute.String("llmgw.pool", p))
	})
}

// genaiKey is the GenAI metrics' attributes.
type genaiKey struct {
	operation, provider, model, responseModel, address string
	port                                               int
	tenant                                             tenantKey
	errorType                                          string
}

// genaiSets are one genaiKey's sets: the duration's and first token's,
// and the token usage's by type.
type genaiSets struct {
	all, input, output opts
}

func (s *sets) genAI(k genaiKey) *genaiSets {
	return s.genai.get(k, func(k genaiKey) *genaiSets {
		kv := append(genAIAttrs(make([]attribute.KeyValue, 0, 10), k.operation, k.provider, k.model, k.responseModel, k.address, k.port),
			k.tenant.attrs()...)
		if k.errorType != "" {
			kv = append(kv, attribute.String("error.type", k.errorType))
		}
		n := len(kv)
		return &genaiSets{
			all:    newOpts(kv...),
			input:  newOpts(append(kv[:n:n], attribute.String("gen_ai.token.type", "input"))...),
			output: newOpts(append(kv[:n:n], attribute.String("gen_ai.token.type", "output"))...),
		}
	})
}

// genAIAttrs appends the GenAI attributes a model call's metrics and
// its attempt's span share.
func genAIAttrs(kv []attribute.KeyValue, operation, provider, model, responseModel, address string, port int) []attribute.KeyValue {
	return append(kv,
		attribute.String("gen_ai.operation.name", operation),
		attribute.String("gen_ai.provider.name", provider),
		attribute.String("gen_ai.request.model", model),
		attribute.String("gen_ai.response.model", responseModel),
		attribute.String("server.address", address),
		attribute.Int("server.port", port))
}

// failoverKey is llmgw.failovers' attributes.
type failoverKey struct {
	errorType, address string
	spill              bool
	tenant             string
}

func (s *sets) failover(k failoverKey) opts {
	return s.failovers.get(k, func(k failoverKey) opts {
		return newOpts(
			attribute.String("error.type", k.errorType),
			attribute.String("server.address", k.address),
			attribute.Bool("llmgw.spill", k.spill),
			attribute.String("llmgw.tenant.id", k.tenant))
	})
}

// costKey is llmgw.cost's attributes.
type costKey struct {
	model, tier, currency string
	tenant                tenantKey
}

func (s *sets) cost(k costKey) opts {
	return s.costs.get(k, func(k costKey) opts {
		return newOpts(append([]attribute.KeyValue{
			attribute.String("gen_ai.request.model", k.model),
			attribute.String("llmgw.service_tier", k.tier),
			attribute.String("llmgw.currency", k.currency)}, k.tenant.attrs()...)...)
	})
}
