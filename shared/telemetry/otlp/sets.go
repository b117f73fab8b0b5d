package otlp

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
)

// memo keeps what was built for a key, so that each distinct key is
// built once: the attribute sets a request records its metrics with (an
// attribute.Set is sorted and deduplicated when it is made), each with its
// metrics' series (attrSet), and span names. Every key is made of values
// from config or from short fixed lists, the metrics' own cardinality;
// should a key take values a caller chooses (a method), at most max are
// kept and the rest are built each time, as before there was a memo, their
// series then looked up by attribute set (table): the CPU the memo saves is measured in docs/benchmarks.md.
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

// sets are the memos of every attribute set the exporter records with,
// one per shape of key.
type sets struct {
	requests  memo[requestKey, *attrSet]
	decisions memo[decisionKey, *attrSet]
	tenants   memo[tenantKey, *attrSet]
	pools     memo[string, *attrSet]
	genai     memo[genaiKey, *genaiSets]
	failovers memo[failoverKey, *attrSet]
	costs     memo[costKey, *attrSet]
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

func (s *sets) tenant(k tenantKey) *attrSet {
	return s.tenants.get(k, func(k tenantKey) *attrSet { return newAttrSet(k.attrs()...) })
}

// requestKey is llmgw.requests' attributes.
type requestKey struct {
	route, method, errorType string
	status                   int
	tenant                   tenantKey
}

func (s *sets) request(k requestKey) *attrSet {
	return s.requests.get(k, func(k requestKey) *attrSet {
		return newAttrSet(append([]attribute.KeyValue{
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

func (s *sets) decision(k decisionKey) *attrSet {
	return s.decisions.get(k, func(k decisionKey) *attrSet {
		return newAttrSet(append([]attribute.KeyValue{attribute.String("llmgw.decision", k.decision)}, k.tenant.attrs()...)...)
	})
}

func (s *sets) pool(p string) *attrSet {
	return s.pools.get(p, func(p string) *attrSet {
		return newAttrSet(attribute.String("llmgw.pool", p))
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
	all, input, output *attrSet
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
			all:    newAttrSet(kv...),
			input:  newAttrSet(append(kv[:n:n], attribute.String("gen_ai.token.type", "input"))...),
			output: newAttrSet(append(kv[:n:n], attribute.String("gen_ai.token.type", "output"))...),
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

func (s *sets) failover(k failoverKey) *attrSet {
	return s.failovers.get(k, func(k failoverKey) *attrSet {
		return newAttrSet(
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

func (s *sets) cost(k costKey) *attrSet {
	return s.costs.get(k, func(k costKey) *attrSet {
		return newAttrSet(append([]attribute.KeyValue{
			attribute.String("gen_ai.request.model", k.model),
			attribute.String("llmgw.service_tier", k.tier),
			attribute.String("llmgw.currency", k.currency)}, k.tenant.attrs()...)...)
	})
}
