// Package docs holds the tests that keep the documentation true: every
// relative link in README.md and docs/*.md resolves (file and heading), and
// every key of the config schema has its row in the configuration
// reference's table, with the default the part that applies it
// declares. The pages themselves are plain Markdown beside this file.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/lambdaurl"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/server/listener"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// pages lists the README and every page under docs/ (subfolders included),
// as paths relative to the repository root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.ToSlash(filepath.Join("docs", p)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fence   = regexp.MustCompile("(?ms)^```.*?^```[^\n]*$")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	scheme  = regexp.MustCompile(`^[a-z]+:`)
)

// anchors are the heading ids GitHub gives a page: lower case, punctuation
// dropped, spaces as hyphens, a repeated id suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestLinksResolve: every relative link of every page names a file or
// folder of the repository and, with a #fragment into a Markdown page, one
// of that page's headings. Links inside code blocks are code, not links.
func TestLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		t.Run(page, func(t *testing.T) {
			text := read(t, page)
			for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue // http:, https:, mailto:
				}
				file, frag, _ := strings.Cut(target, "#")
				resolved := page
				if file != "" {
					resolved = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
					if _, err := os.Stat(filepath.Join("..", resolved)); err != nil {
						t.Errorf("%s: link %q: no such file %s", page, target, resolved)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(resolved, ".md") && !anchors(read(t, resolved))[frag] {
					t.Errorf("%s: link %q: %s has no heading #%s", page, target, resolved, frag)
				}
			}
		})
	}
}

// TestNoConflictMarkers: a merge once left both sides of a table in the
// README; the documentation is checked as the code is.
func TestNoConflictMarkers(t *testing.T) {
	for _, page := range pages(t) {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, marker := range []string{"<<<<<<< ", "=======", ">>>>>>> "} {
				if line == marker || (marker != "=======" && strings.HasPrefix(line, marker)) {
					t.Errorf("%s:%d: merge conflict marker %q", page, i+1, line)
				}
			}
		}
	}
}

// schemaKeys lists every key of config.Config by its path as the reference
// writes it: auth.issuer, tenants[].models, pools[].endpoints[].url. A
// mapping of free keys (a map) is one key; so is a duration.
func schemaKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if strings.Contains(flags, "inline") {
			schemaKeys(f.Type, prefix, out)
			continue
		}
		path := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]():
			schemaKeys(ft, path+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			schemaKeys(ft.Elem(), path+"[].", out)
		default:
			*out = append(*out, path)
		}
	}
}

// row is one line of the configuration reference's table: the setting
// paths of its first column and, for each, its default cell.
type row struct {
	line     int
	paths    []string
	defaults []string
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	settingKey = regexp.MustCompile(`^[a-z0-9_]+(\[\])?(\.[a-z0-9_]+(\[\])?)*$`)
	cellSplit  = regexp.MustCompile(`, | / `)
)

// referenceRows reads the table rows of docs/configuration.md. A row's
// default cell gives one default for all its paths, or one for each, in
// order, separated by ", " or " / " ("`5m` / `24h`").
func referenceRows(t *testing.T) []row {
	t.Helper()
	var rows []row
	for i, line := range strings.Split(read(t, "docs/configuration.md"), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		r := row{line: i + 1}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.paths = append(r.paths, m[1])
		}
		parts := cellSplit.Split(cells[1], -1)
		for j := range r.paths {
			switch {
			case len(parts) == len(r.paths):
				r.defaults = append(r.defaults, parts[j])
			default:
				r.defaults = append(r.defaults, cells[1])
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// TestConfigReferenceTable: the reference's table has a row for each key
// the schema accepts, and each path a row names is a key of the schema
// (or a section of keys: store.redis_entra), so a field added, renamed or
// removed in config.Config without its row fails the tests.
func TestConfigReferenceTable(t *testing.T) {
	var keys []string
	schemaKeys(reflect.TypeFor[config.Config](), "", &keys)
	if len(keys) < 50 {
		t.Fatalf("the schema walk found only %d keys: %v", len(keys), keys)
	}
	rows := referenceRows(t)
	named := map[string]bool{}
	for _, r := range rows {
		for _, p := range r.paths {
			named[p] = true
		}
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
		if !named[k] {
			t.Errorf("docs/configuration.md's table has no row for `%s`", k)
		}
	}
	for _, r := range rows {
		for _, p := range r.paths {
			if !settingKey.MatchString(p) {
				t.Errorf("docs/configuration.md:%d: %q is not a setting path", r.line, p)
			} else if !known[p] && !isSection(keys, p) {
				t.Errorf("docs/configuration.md:%d: `%s` is not a key of the schema", r.line, p)
			}
		}
	}
}

// isSection reports whether p names a section holding keys.
func isSection(keys []string, p string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, p+".") {
			return true
		}
	}
	return false
}

// proseDefaults are the rows whose default is not a value a part declares
// where this package can read it, each with the reason.
var proseDefaults = map[string]string{
	"listen":                              "the environment's port, else the binary's own default (functions/gateway)",
	"max_pending_connections":             "a share of max_connections (listener.Options.MaxPending)",
	"budget.failure_policy":               "another setting's value (limiter.failure_policy)",
	"tenants[].max_concurrent_requests":   "another setting's value (max_concurrent_requests)",
	"tenants[].count_requests":            "a multiple of tenants[].requests (ratelimit.DefaultCountsPerRequest)",
	"prices.models[].cached_input":        "another rate of the model (input)",
	"prices.models[].cache_write":         "another rate of the model (input)",
	"prices.models[].cache_write_1h":      "another rate of the model (cache_write)",
	"pools[].keepalive_interval":          "upstream's setting of the same name",
	"pools[].first_token_timeout":         "upstream's setting of the same name",
	"store.redis_entra.client_id":         "the environment's $AZURE_CLIENT_ID",
	"pools[].endpoints[].entra.client_id": "the environment's $AZURE_CLIENT_ID",
}

// partDefaults is each setting's default as the part that applies it
// declares it: a row's default cell must name it, first in backticks.
// A zero (0, false) is written where the part's zero means off or none.
var partDefaults = map[string]any{
	"max_body_bytes":      server.DefaultMaxBodyBytes,
	"body_read_timeout":   server.DefaultBodyReadTimeout,
	"max_header_bytes":    server.DefaultMaxHeaderBytes,
	"max_connections":     listener.DefaultMaxConns,
	"lingering_time":      listener.DefaultLingerTime,
	"lingering_timeout":   listener.DefaultLingerTimeout,
	"lingering_max_bytes": listener.DefaultLingerBytes,
	"send_timeout":        listener.DefaultSendTimeout,
	"raw_syscalls":        !listener.Options{}.WithDefaults().PlainConns,
	"read_header_timeout": server.DefaultReadHeaderTimeout,
	"idle_timeout":        server.DefaultIdleTimeout,
	"shutdown_grace":      server.DefaultShutdownGrace,
	"log_level":           server.DefaultLogLevel,

	"max_concurrent_requests": tenant.DefaultMaxConcurrent,

	"auth.tenant_claim":                auth.DefaultTenantClaim,
	"auth.user_claim":                  auth.DefaultUserClaim,
	"auth.algorithms":                  auth.DefaultAlgorithms(),
	"auth.leeway":                      auth.DefaultLeeway,
	"auth.max_token_bytes":             auth.DefaultMaxTokenBytes,
	"auth.jwks_refresh_min":            auth.DefaultRefreshMin,
	"auth.jwks_refresh_max":            auth.DefaultRefreshMax,
	"auth.unknown_kid_interval":        auth.DefaultUnknownKIDInterval,
	"api_keys.max_ttl":                 keys.DefaultMaxTTL,
	"api_keys.cache_ttl":               keys.DefaultCacheTTL,
	"api_keys.cache_size":              keys.DefaultCacheSize,
	"api_keys.role_claim":              keys.DefaultRoleClaim,
	"store.backend":                    stores.Memory,
	"store.redis_entra.scope":          entra.RedisScope,
	"store.redis_entra.timeout":        entra.DefaultTimeout,
	"store.key_prefix":                 store.DefaultKeyPrefix,
	"store.redis_cluster":              stores.Config{}.RedisCluster,
	"store.dial_timeout":               store.DefaultDialTimeout,
	"limiter.timeout":                  ratelimit.DefaultTimeout,
	"limiter.failure_policy":           ratelimit.PolicyOpen,
	"upstream.max_attempts":            dispatch.DefaultMaxAttempts,
	"upstream.connect_timeout":         upstream.DefaultConnectTimeout,
	"upstream.max_idle_conns_per_host": upstream.DefaultMaxIdleConnsPerHost,
	"upstream.header_timeout":          dispatch.DefaultHeaderTimeout,
	"upstream.response_timeout":        dispatch.DefaultResponseTimeout,
	"upstream.stream_idle_timeout":     dispatch.DefaultStreamIdleTimeout,
	"upstream.default_cooldown":        dispatch.DefaultCooldown,
	"upstream.max_cooldown":            route.DefaultMaxCooldown,
	"upstream.keepalive_interval":      server.DefaultKeepaliveInterval,
	"upstream.first_token_timeout":     time.Duration(0),
	"lambda.deadline_margin":           lambdaurl.DefaultDeadlineMargin,
	"lambda.min_remaining":             server.DefaultMinRemaining,
	"telemetry.trust_traceparent":      false,
	"telemetry.flush_timeout":          telemetry.DefaultFlushTimeout,

	"tenants[].interval":                 ratelimit.DefaultInterval,
	"tenants[].tokens_per_minute":        0,
	"tenants[].token_quota":              0,
	"tenants[].max_output_tokens":        0,
	"tenants[].features[].account_owner": false,
	"tenants[].features[].cost_per_use":  0,
	"tenants[].features[].default_uses":  tenant.DefaultUses,
	"tenants[].service_tiers":            []string{price.TierStandard.String()},
	"budget.mode":                        budget.ModeStrict,
	"budget.lease":                       budget.DefaultLease,
	"budget.default_output_tokens":       budget.DefaultOutputTokens,
	"budget.count_above":                 budget.DefaultCountAbove,
	"pools[].unknown_fields":             upstream.DefaultUnknownFields,
	"pools[].tenant_share":               route.DefaultTenantShare,
	"tenants[].unknown_fields":           upstream.DefaultUnknownFields,
	"budget.timeout":                     budget.DefaultTimeout,
	"budget.image_tokens":                prompt.DefaultImageTokens,
	"budget.media_tokens":                prompt.DefaultMediaTokens,

	// config's own: an endpoint's weight when it writes none.
	"pools[].endpoints[].weight":       1,
	"pools[].endpoints[].priority":     0,
	"pools[].endpoints[].capacity_tpm": 0,
	"pools[].endpoints[].api_version":  upstream.DefaultAzureAPIVersion,
	// upstream's zero values: what an empty azure_api and auth mean.
	"pools[].endpoints[].azure_api":     "deployments",
	"pools[].endpoints[].auth":          "key",
	"pools[].endpoints[].entra.scope":   entra.DefaultScope,
	"pools[].endpoints[].entra.timeout": entra.DefaultTimeout,
}

// TestConfigReferenceDefaults: each row's default is the one the part
// that applies it declares (partDefaults), or prose with its reason
// (proseDefaults); a row that writes a value in backticks for a setting
// in neither fails, so a default changed in a part or in the reference
// alone fails the tests.
func TestConfigReferenceDefaults(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range referenceRows(t) {
		for i, p := range r.paths {
			cell := r.defaults[i]
			want, declared := partDefaults[p]
			_, prose := proseDefaults[p]
			seen[p] = declared || prose
			m := backticked.FindStringSubmatch(cell)
			switch {
			case prose:
			case declared && m == nil:
				t.Errorf("docs/configuration.md:%d: `%s`: the default cell %q names no value; the part's is `%s`", r.line, p, cell, format(want))
			case declared && m[1] != format(want):
				t.Errorf("docs/configuration.md:%d: `%s`: the reference says `%s`, the part declares `%s`", r.line, p, m[1], format(want))
			case !declared && m != nil:
				t.Errorf("docs/configuration.md:%d: `%s`: the reference names a default, `%s`, that partDefaults does not know", r.line, p, m[1])
			}
		}
	}
	for _, table := range []map[string]bool{keysOf(partDefaults), keysOf(proseDefaults)} {
		for p := range table {
			if !seen[p] {
				t.Errorf("%s: no row of docs/configuration.md names it", p)
			}
		}
	}
}

func keysOf[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// format writes a default as the reference does: durations without
// their zero units ("5m", not "5m0s"), lists in brackets.
func format(v any) string {
	switch v := v.(type) {
	case time.Duration:
		if v == 0 {
			return "0"
		}
		s := v.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case []string:
		return "[" + strings.Join(v, ", ") + "]"
	}
	return fmt.Sprint(v)
}
