package config

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// Problems is every validation failure in a config, each "field.path:
// message".
type Problems []string

func (p Problems) Error() string {
	return "invalid config:\n  " + strings.Join(p, "\n  ")
}

func (p *Problems) add(field, format string, a ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, a...))
}

// Decoded returns p less its problems at or below a field whose value
// did not decode (Decode reported it, and the value is left zero):
// "required" on top of "cannot unmarshal" would only be noise. A document
// that is not a mapping leaves nothing to check.
func (c *Config) Decoded(p Problems) Problems {
	if c.undecoded[topLevel] {
		return nil
	}
	out := make(Problems, 0, len(p))
	for _, s := range p {
		field, _, _ := strings.Cut(s, ": ")
		if !under(c.undecoded, field) {
			out = append(out, s)
		}
	}
	return out
}

// under reports whether field or a field above it is in fields.
func under(fields map[string]bool, field string) bool {
	for {
		if fields[field] {
			return true
		}
		i := strings.LastIndexAny(field, ".[")
		if i <= 0 {
			return false
		}
		field = field[:i]
	}
}

// checker collects problems; getenv resolves the env vars secrets live in.
type checker struct {
	getenv func(string) string
	p      Problems
}

func (ck *checker) add(field, format string, a ...any) { ck.p.add(field, format, a...) }

func (ck *checker) needEnv(field, name string) {
	problem.NeedEnv(problem.Into((*[]string)(&ck.p), ""), field, name, ck.getenv)
}

// uniqueName reports a name that is empty or already in seen, and adds it.
func (ck *checker) uniqueName(seen map[string]bool, field, name, what string) {
	if name == "" {
		ck.add(field, "required")
	} else if seen[name] {
		ck.add(field, "duplicate %s %q", what, name)
	}
	seen[name] = true
}

// Validate returns every problem with c by the file's own rules: no
// negative numbers, the listen address, the rules between its sections
// (unique names, tenants' models served) and the environment variables
// it names, which getenv must resolve. The rules of the settings each
// part takes are that part's (shared/assemble runs them): the store
// section's, its Redis variables among them, are the shared stores'.
func (c *Config) Validate(getenv func(string) string) Problems {
	ck := &checker{getenv: getenv}
	validateNonNegative(ck, reflect.ValueOf(c).Elem(), "")
	validateServer(ck, c)
	models := validatePools(ck, c.Pools)
	validateAliases(ck, c.Aliases, models)
	validateTenants(ck, c.Tenants, models)
	return c.WrittenAs(ck.p)
}

// validateNonNegative reports every negative duration and signed count,
// wherever it is: none has a meaning below zero, and each constructor
// downstream would otherwise refuse it, take its default, or misbehave
// (a negative connect timeout fails every dial). A field tagged
// check:"part" (a setting, or a section a part declares) is skipped: the
// part that takes it checks it (its Check, which shared/assemble runs),
// and one rule has one home.
func validateNonNegative(ck *checker, v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			validateNonNegative(ck, v.Elem(), path)
		}
	case reflect.Struct:
		eachField(v.Type(), path, func(i int, f reflect.StructField, p string) {
			if f.Tag.Get("check") != "part" {
				validateNonNegative(ck, v.Field(i), p)
			}
		})
	case reflect.Slice:
		for i := range v.Len() {
			validateNonNegative(ck, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Int() < 0 {
			if v.Type() == reflect.TypeFor[Duration]() {
				ck.add(path, "must not be negative, got %s", Duration(v.Int()).D())
			} else {
				ck.add(path, "must not be negative, got %d", v.Int())
			}
		}
	}
}

// validateServer checks the listen address as written: an empty one is
// the host's default (functions/gateway), never checked here.
func validateServer(ck *checker, c *Config) {
	host, port, err := net.SplitHostPort(c.Listen)
	switch {
	case c.Listen == "":
	case err != nil:
		ck.add("listen", "must be host:port (e.g. \"127.0.0.1:8080\" or \":8080\"), not %q", c.Listen)
	case !isPort(port):
		ck.add("listen", "port must be a number from 0 to 65535, not %q", port)
	case !isHost(host):
		ck.add("listen", "host %q is not an IP address or host name", host)
	}
}

// validatePools checks the pools and returns which pool serves each model.
func validatePools(ck *checker, pools []Pool) map[string]string {
	models := map[string]string{} // public model → pool
	names := map[string]bool{}
	trust := map[string]caOwner{} // endpoint host → its ca_file
	if len(pools) == 0 {
		ck.add("pools", "at least one pool is required")
	}
	for i, pl := range pools {
		f := fmt.Sprintf("pools[%d]", i)
		ck.uniqueName(names, f+".name", pl.Name, "pool name")
		if len(pl.Models) == 0 {
			ck.add(f+".models", "at least one model is required")
		}
		for _, m := range sortedKeys(pl.Models) {
			if other, dup := models[m]; dup {
				ck.add(f+".models."+m, "model is already served by pool %q", other)
			}
			models[m] = pl.Name
		}
		if len(pl.Endpoints) == 0 {
			ck.add(f+".endpoints", "at least one endpoint is required")
		} else if len(pl.Endpoints) > 64 {
			ck.add(f+".endpoints", "at most 64 endpoints per pool")
		}
		for j, e := range pl.Endpoints {
			ef := fmt.Sprintf("%s.endpoints[%d]", f, j)
			validateEndpoint(ck, ef, &e)
			validateOneTrustPerHost(ck, trust, ef, e)
		}
	}
	return models
}

// validateAliases checks that each alias is a new name for a model a
// pool serves, and adds the aliases to models (a tenant may list one).
func validateAliases(ck *checker, aliases, models map[string]string) {
	for _, a := range sortedKeys(aliases) {
		f, target := "aliases."+a, aliases[a]
		switch pool, served := models[a]; {
		case a == "":
			ck.add("aliases", "an alias name must not be empty")
		case served:
			ck.add(f, "pool %q serves %q itself; an alias must be a new name", pool, a)
		case target == "":
			ck.add(f, "required: the model the alias stands for")
		case aliases[target] != "":
			ck.add(f, "%q is an alias itself; name the model it stands for, %q", target, aliases[target])
		default:
			if _, ok := models[target]; !ok {
				ck.add(f, "model %q is not served by any pool", target)
			}
		}
	}
	for _, a := range sortedKeys(aliases) {
		if pool, ok := models[aliases[a]]; ok {
			if _, served := models[a]; !served {
				models[a] = pool
			}
		}
	}
}

// validateEndpoint checks one endpoint; what depends on the pool's kind
// is upstream's (TargetSpec.Check), organization and project among it.
func validateEndpoint(ck *checker, f string, e *Endpoint) {
	validateEndpointURL(ck, f+".url", e.URL)
	if e.weightGiven && e.Weight == 0 {
		ck.add(f+".weight", "must be at least 1 (omit it for the default, 1)")
	} else if e.Weight > MaxWeight {
		ck.add(f+".weight", "must be at most %d", MaxWeight)
	}
	if e.Priority > MaxPriority {
		ck.add(f+".priority", "must be at most %d (0 is tried first)", MaxPriority)
	}
	ck.needEnv(f+".api_key_env", e.APIKeyEnv)
	switch e.Auth {
	case "", "key":
		if e.Entra != (entra.Config{}) {
			ck.add(f+".entra", "only used with auth: entra")
		}
	case "entra":
		if e.APIKeyEnv != "" {
			ck.add(f+".api_key_env", "must be empty when auth is entra")
		}
	default:
		ck.add(f+".auth", "must be key or entra, not %q", e.Auth)
	}
	if e.CAFile != "" {
		validateCAFile(ck, f+".ca_file", e.CAFile)
	}
}

// caOwner is the first endpoint seen on a host, and the ca_file it names.
type caOwner struct{ field, caFile string }

// validateOneTrustPerHost: the backend client picks a TLS trust by the
// request's host, so every endpoint on one host (host:port) must name the
// same ca_file, or none.
func validateOneTrustPerHost(ck *checker, trust map[string]caOwner, field string, e Endpoint) {
	u, err := url.Parse(e.URL)
	if err != nil || u.Host == "" {
		return // reported by validateEndpointURL
	}
	first, seen := trust[u.Host]
	if !seen {
		trust[u.Host] = caOwner{field, e.CAFile}
		return
	}
	if first.caFile != e.CAFile {
		ck.add(field+".ca_file", "%q differs from %s.ca_file %q on the same host %s: one host has one trust", e.CAFile, first.field, first.caFile, u.Host)
	}
}

// validateEndpointURL: a backend base URL is http(s) with a host. Its query
// and fragment would be lost or mangled when the request path is joined, and
// credentials in it would be logged with the endpoint's name.
func validateEndpointURL(ck *checker, field, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ck.add(field, "must be an http(s) URL, not %q", raw)
		return
	}
	if u.User != nil {
		ck.add(field, "must not carry credentials (user:password@); use api_key_env")
	}
	if strings.Contains(raw, "?") {
		ck.add(field, "must not have a query (?…)")
	}
	if strings.Contains(raw, "#") {
		ck.add(field, "must not have a fragment (#…)")
	}
}

// validateCAFile: the bundle must exist and hold at least one certificate,
// or the endpoint's TLS would fail on every request.
func validateCAFile(ck *checker, field, path string) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		ck.add(field, "%s is not a regular file", path)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		ck.add(field, "cannot read: %v", err)
		return
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		ck.add(field, "%s holds no PEM certificate", path)
	}
}

// validateTenants checks the tenant table against the pools' models. A
// tenant's id (present, unique) and its requests per interval are the
// limiter's rules (ratelimit's Check and CheckRefill).
func validateTenants(ck *checker, tenants []Tenant, models map[string]string) {
	if len(tenants) == 0 {
		ck.add("tenants", "at least one tenant is required")
	}
	names := map[string]bool{}
	for i, t := range tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if t.Name != "" {
			if !isHeaderValue(t.Name) {
				ck.add(f+".name", "must be printable, without line breaks or surrounding spaces")
			}
			ck.uniqueName(names, f+".name", t.Name, "tenant name")
		}
		if len(t.Models) == 0 {
			ck.add(f+".models", "at least one model is required")
		}
		for j, m := range t.Models {
			if _, ok := models[m]; !ok {
				ck.add(fmt.Sprintf("%s.models[%d]", f, j), "model %q is not served by any pool", m)
			}
		}
	}
}

func isPort(s string) bool {
	_, err := strconv.ParseUint(s, 10, 16)
	return err == nil
}

// isHost accepts what a listen address may name: nothing (every
// interface), an IP address (with an IPv6 zone) or a DNS name.
func isHost(s string) bool {
	if s == "" {
		return true
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// isHeaderValue reports whether s can be sent as an HTTP header value as
// written (RFC 9110 §5.5: visible characters, inner spaces and tabs), as
// a tenant's name must be.
func isHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
