package price

import (
	"fmt"

	"github.com/llmgw/gateway/shared/problem"
)

// Tier is a service tier: what the client asks in service_tier and what
// an OpenAI or Azure answer (and Anthropic's usage) says it was served at.
type Tier uint8

// The service tiers the catalogue prices. TierUnknown is a reported tier
// the gateway does not know: billed at the tenant's most expensive tier.
const (
	TierStandard Tier = iota // "default", "standard", or none given
	TierFlex
	TierPriority
	TierScale
	NumTiers
	TierUnknown = NumTiers
)

var tierNames = [NumTiers]string{"standard", "flex", "priority", "scale"}

func (t Tier) String() string {
	if t < NumTiers {
		return tierNames[t]
	}
	return "unknown"
}

// ParseTier reads a tier's name as a request, an answer or the config
// spells it: "default" (OpenAI's answers) is the standard tier. ok is
// false for any other name ("auto" included: the server handles it).
func ParseTier(b []byte) (Tier, bool) {
	switch string(b) {
	case "standard", "default":
		return TierStandard, true
	case "flex":
		return TierFlex, true
	case "priority":
		return TierPriority, true
	case "scale":
		return TierScale, true
	}
	return TierUnknown, false
}

// Tiers is a set of tiers (bit t for Tier t). The zero set, in a
// tenant's permission, is the standard tier alone.
type Tiers uint8

// Has reports whether t is in s.
func (s Tiers) Has(t Tier) bool { return t < NumTiers && s&(1<<t) != 0 }

// With returns s with t added.
func (s Tiers) With(t Tier) Tiers { return s | 1<<t }

// OrStandard is s, or the standard tier alone when s is empty.
func (s Tiers) OrStandard() Tiers {
	if s == 0 {
		return 1 << TierStandard
	}
	return s
}

// Rates is one price set in micro-units per million tokens.
type Rates struct {
	// Input is uncached input; CachedInput a cache read; CacheWrite and
	// CacheWrite1h Anthropic's 5-minute and 1-hour cache writes.
	Input, CachedInput, CacheWrite, CacheWrite1h int64
	// Output is every output token, reasoning (thinking) included: both
	// OpenAI's completion_tokens and Anthropic's output_tokens count it.
	Output int64
}

// maxInput is the dearest input-side rate: what one prompt token may
// cost, whichever way the backend bills it.
func (r Rates) maxInput() int64 { return max(r.Input, r.CachedInput, r.CacheWrite, r.CacheWrite1h) }

// scale returns r with the input-side rates times in and the output rate
// times out (millionths), each rounded up.
func (r Rates) scale(in, out int64) Rates {
	return Rates{Input: mulDivUp(r.Input, in), CachedInput: mulDivUp(r.CachedInput, in),
		CacheWrite: mulDivUp(r.CacheWrite, in), CacheWrite1h: mulDivUp(r.CacheWrite1h, in),
		Output: mulDivUp(r.Output, out)}
}

// Model is one model's prices, resolved: every tier it prices, at the
// standard context and past the long-context threshold.
type Model struct {
	rates  [NumTiers][2]Rates // [tier][long]
	priced Tiers
	// longAbove is the input-token threshold above which the long-context
	// rates apply (0: the model has none).
	longAbove int64
}

// Priced is the set of tiers the model has prices for.
func (m *Model) Priced() Tiers { return m.priced }

// Usage is what one answer bills, by kind of token.
type Usage struct {
	// Input is uncached input; CacheRead, CacheWrite (5 minutes) and
	// CacheWrite1h the cached kinds. Their sum is the request's input,
	// which decides the long-context rates.
	Input, CacheRead, CacheWrite, CacheWrite1h int64
	Output                                     int64
}

// long reports whether input tokens take the long-context rates.
func (m *Model) long(input int64) int {
	if m.longAbove > 0 && input > m.longAbove {
		return 1
	}
	return 0
}

// Cost is what u costs at tier t (a tier the model does not price costs
// as its dearest priced tier), rounded up to a micro-unit.
func (m *Model) Cost(t Tier, u Usage) Micros {
	if !m.priced.Has(t) {
		t = m.dearest(m.priced, u.Input+u.CacheRead+u.CacheWrite+u.CacheWrite1h, u.Output)
	}
	r := m.rates[t][m.long(satAdd(u.Input, u.CacheRead, u.CacheWrite, u.CacheWrite1h))]
	var s acc
	s.add(u.Input, r.Input)
	s.add(u.CacheRead, r.CachedInput)
	s.add(u.CacheWrite, r.CacheWrite)
	s.add(u.CacheWrite1h, r.CacheWrite1h)
	s.add(u.Output, r.Output)
	return s.micros()
}

// Worst is the most a request may cost at any tier in tiers: input
// prompt tokens (its bound) at the dearest input-side rate and output
// tokens at the output rate, at the long-context rates when the bound
// crosses the threshold. A tier of tiers the model does not price is
// left out (the config check makes a tenant's tiers priced).
func (m *Model) Worst(tiers Tiers, input, output int64) Micros {
	var worst Micros
	for t := range NumTiers {
		if !tiers.Has(t) || !m.priced.Has(t) {
			continue
		}
		worst = max(worst, m.worstAt(t, input, output))
	}
	return worst
}

func (m *Model) worstAt(t Tier, input, output int64) Micros {
	r := m.rates[t][m.long(input)]
	var s acc
	s.add(input, r.maxInput())
	s.add(output, r.Output)
	return s.micros()
}

// Dearest is the tier of tiers (priced by the model) whose worst case
// for input and output tokens is the highest: what "auto" is reserved
// at, and what a tier the tenant may not use is billed at.
func (m *Model) Dearest(tiers Tiers, input, output int64) Tier {
	return m.dearest(tiers&m.priced, input, output)
}

func (m *Model) dearest(tiers Tiers, input, output int64) Tier {
	best, worst := TierStandard, Micros(-1)
	for t := range NumTiers {
		if !tiers.Has(t) {
			continue
		}
		if c := m.worstAt(t, input, output); c > worst {
			best, worst = t, c
		}
	}
	return best
}

func satAdd(v ...int64) int64 {
	var s int64
	for _, x := range v {
		if x > 0 {
			if s > MaxMicros-x {
				return MaxMicros
			}
			s += x
		}
	}
	return s
}

// Catalogue is the price list: one currency, a version operators bump
// when they change it (the access log carries it), each model's prices
// and each server feature's price per use. Its zero value prices nothing.
type Catalogue struct {
	Currency string
	Version  string
	models   map[string]*Model
	features map[string]Micros
}

// Model returns the prices of a public model name.
func (c *Catalogue) Model(name string) (*Model, bool) {
	if c == nil {
		return nil, false
	}
	m, ok := c.models[name]
	return m, ok
}

// Feature is the price of one use of a server feature (0 when unpriced:
// the feature costs no money, only its token-equivalent).
func (c *Catalogue) Feature(name string) Micros {
	if c == nil {
		return 0
	}
	return c.features[name]
}

// Empty reports whether the catalogue prices no model.
func (c *Catalogue) Empty() bool { return c == nil || len(c.models) == 0 }

// Spec is the catalogue as the config file writes it (its prices
// section, by its yaml names): amounts as decimal strings in the
// currency's units (prices per million tokens, "2.50", read exactly, at
// most six decimal places; the ledger counts micro-units), multipliers
// as decimal strings ("0.5", "2"). New checks it. Default none: the
// zero Spec prices nothing.
type Spec struct {
	// Currency is the ISO 4217 code of every amount (USD, EUR, …).
	// Required with models.
	Currency string `yaml:"currency" json:"currency"`
	// Version names this edition of the prices (a date: "2026-12-01");
	// the access log carries it beside each cost. Required with models.
	Version  string        `yaml:"version" json:"version"`
	Models   []ModelSpec   `yaml:"models" json:"models"`
	Features []FeatureSpec `yaml:"features" json:"features"`
}

// RateSpec is one price set per million tokens. CachedInput (a cache
// read) defaults to Input, CacheWrite (Anthropic's 5-minute write) to
// Input, CacheWrite1h to CacheWrite: a kind left out is never cheaper
// than the input it is.
type RateSpec struct {
	Input        string `yaml:"input" json:"input"`
	CachedInput  string `yaml:"cached_input" json:"cached_input"`
	CacheWrite   string `yaml:"cache_write" json:"cache_write"`
	CacheWrite1h string `yaml:"cache_write_1h" json:"cache_write_1h"`
	// Output prices every output token, reasoning included.
	Output string `yaml:"output" json:"output"`
}

// ModelSpec prices one public model (the name clients send, or an
// alias's target: an alias costs what its target does).
type ModelSpec struct {
	Model    string `yaml:"model" json:"model"`
	RateSpec `yaml:",inline"`
	// Source says where and when the prices were read (the provider's
	// public page and the date), for whoever updates them; New ignores
	// it.
	Source string `yaml:"source" json:"source"`
	// Tiers prices the model's other service tiers: each its own rates or
	// a multiplier of the standard ones.
	Tiers []TierSpec `yaml:"tiers" json:"tiers"`
	// LongContext, when set, raises the rates above an input threshold.
	LongContext *LongSpec `yaml:"long_context" json:"long_context"`
}

// TierSpec prices one service tier (flex, priority, scale): Multiplier
// times the standard rates, or rates of its own (Input and Output
// required).
type TierSpec struct {
	Name       string `yaml:"name" json:"name"`
	Multiplier string `yaml:"multiplier" json:"multiplier"`
	RateSpec   `yaml:",inline"`
}

// LongSpec is a long-context tier: a request whose input tokens (cached
// included) exceed AboveInputTokens pays InputMultiplier times every
// input-side rate and OutputMultiplier times the output rate, at every
// tier (as Anthropic and Gemini price their long-context models: 2× input
// and 1.5× output).
type LongSpec struct {
	AboveInputTokens int64  `yaml:"above_input_tokens" json:"above_input_tokens"`
	InputMultiplier  string `yaml:"input_multiplier" json:"input_multiplier"`
	OutputMultiplier string `yaml:"output_multiplier" json:"output_multiplier"`
}

// FeatureSpec prices one use of a server feature (web_search, …): the
// money it costs (its tenants[].features[].cost_per_use is the
// token-equivalent, apart).
type FeatureSpec struct {
	Name   string `yaml:"name" json:"name"`
	PerUse string `yaml:"per_use" json:"per_use"`
}

// New parses and checks spec, reporting every problem under at (the
// config's prices section) by the config's field names; features lists
// the feature names a price may name. The catalogue is nil when spec
// prices nothing.
func New(spec Spec, features []string, at problem.At) *Catalogue {
	var bad bool
	add := func(a problem.At, field, format string, args ...any) {
		bad = true
		a.Add(field, format, args...)
	}
	c := &Catalogue{Currency: spec.Currency, Version: spec.Version,
		models: make(map[string]*Model, len(spec.Models)), features: make(map[string]Micros, len(spec.Features))}
	if len(spec.Models) == 0 && len(spec.Features) == 0 {
		if spec.Currency != "" || spec.Version != "" {
			add(at, "models", "required with currency and version: the catalogue prices nothing")
		}
		return nil
	}
	if !isCurrency(spec.Currency) {
		add(at, "currency", "must be an ISO 4217 code (three capital letters, as USD), not %q", spec.Currency)
	}
	if spec.Version == "" {
		add(at, "version", "required: it names this edition of the prices in the access log")
	}
	amount := func(a problem.At, field, s string, def int64) int64 {
		if s == "" {
			return def
		}
		n, err := ParseMicros(s)
		if err != nil {
			add(a, field, "%v", err)
		}
		return n
	}
	rates := func(a problem.At, r RateSpec) Rates {
		if r.Input == "" {
			add(a, "input", "required: the price per million input tokens")
		}
		if r.Output == "" {
			add(a, "output", "required: the price per million output tokens")
		}
		var out Rates
		out.Input = amount(a, "input", r.Input, 0)
		out.Output = amount(a, "output", r.Output, 0)
		out.CachedInput = amount(a, "cached_input", r.CachedInput, out.Input)
		out.CacheWrite = amount(a, "cache_write", r.CacheWrite, out.Input)
		out.CacheWrite1h = amount(a, "cache_write_1h", r.CacheWrite1h, out.CacheWrite)
		return out
	}
	multiplier := func(a problem.At, field, s string) int64 {
		if s == "" {
			add(a, field, "required")
			return perMillion
		}
		n := amount(a, field, s, perMillion)
		if n == 0 {
			add(a, field, "must be above 0")
		}
		return n
	}
	for i, ms := range spec.Models {
		ma := at.Item("models", i)
		switch {
		case ms.Model == "":
			add(ma, "model", "required")
		case c.models[ms.Model] != nil:
			add(ma, "model", "%q is priced twice", ms.Model)
		}
		m := &Model{priced: 1 << TierStandard}
		m.rates[TierStandard][0] = rates(ma, ms.RateSpec)
		for j, ts := range ms.Tiers {
			ta := ma.Item("tiers", j)
			t, ok := ParseTier([]byte(ts.Name))
			switch {
			case !ok || ts.Name == "default":
				add(ta, "name", "must be one of flex, priority, scale, not %q", ts.Name)
				continue
			case t == TierStandard:
				add(ta, "name", "standard is the model's own prices, not a tier of it")
				continue
			case m.priced.Has(t):
				add(ta, "name", "tier %s is priced twice", ts.Name)
				continue
			}
			own := ts.RateSpec != RateSpec{}
			switch {
			case own && ts.Multiplier != "":
				add(ta, "multiplier", "give a multiplier or prices of the tier's own, not both")
			case own:
				m.rates[t][0] = rates(ta, ts.RateSpec)
			default:
				f := multiplier(ta, "multiplier", ts.Multiplier)
				m.rates[t][0] = m.rates[TierStandard][0].scale(f, f)
			}
			m.priced = m.priced.With(t)
		}
		for t := range NumTiers {
			m.rates[t][1] = m.rates[t][0]
		}
		if lc := ms.LongContext; lc != nil {
			la := ma.In("long_context")
			if lc.AboveInputTokens <= 0 {
				add(la, "above_input_tokens", "must be at least 1")
			}
			m.longAbove = max(lc.AboveInputTokens, 0)
			in, out := multiplier(la, "input_multiplier", lc.InputMultiplier), multiplier(la, "output_multiplier", lc.OutputMultiplier)
			for t := range NumTiers {
				m.rates[t][1] = m.rates[t][0].scale(in, out)
			}
		}
		c.models[ms.Model] = m
	}
	for i, fs := range spec.Features {
		fa := at.Item("features", i)
		known := false
		for _, n := range features {
			known = known || n == fs.Name
		}
		switch {
		case !known:
			add(fa, "name", "must be a server feature (%v), not %q", features, fs.Name)
		default:
			if _, dup := c.features[fs.Name]; dup {
				add(fa, "name", "%q is priced twice", fs.Name)
			}
		}
		if fs.PerUse == "" {
			add(fa, "per_use", "required")
		}
		c.features[fs.Name] = amount(fa, "per_use", fs.PerUse, 0)
	}
	if bad {
		return nil
	}
	return c
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// CheckTiers reports under at (a tenant's service_tiers) every tier the
// tenant may use that model does not price: its requests could not be
// billed.
func (c *Catalogue) CheckTiers(at problem.At, model string, tiers Tiers) {
	m, ok := c.Model(model)
	if !ok {
		return
	}
	for t := range NumTiers {
		if tiers.Has(t) && !m.priced.Has(t) {
			at.Add("", "tier %s is not priced for model %q (prices.models)", t, model)
		}
	}
}

// String names a set of tiers for a message.
func (s Tiers) String() string {
	out := ""
	for t := range NumTiers {
		if s.Has(t) {
			if out != "" {
				out += ", "
			}
			out += t.String()
		}
	}
	return fmt.Sprint("[", out, "]")
}

// Alias prices alias as target when the catalogue prices target and not
// alias: a model alias costs what the model it names costs.
func (c *Catalogue) Alias(alias, target string) {
	if c == nil {
		return
	}
	if m, ok := c.models[target]; ok {
		if _, priced := c.models[alias]; !priced {
			c.models[alias] = m
		}
	}
}
