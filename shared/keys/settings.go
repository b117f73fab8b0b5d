package keys

import (
	"encoding/hex"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// DefaultMaxTTL is the longest life a key may be given (api_keys.max_ttl).
const DefaultMaxTTL = 90 * 24 * time.Hour

// MinSecretBytes is the shortest digest secret accepted: HMAC-SHA-256's
// output size (RFC 2104 §3).
const MinSecretBytes = 32

// Settings is the config file's api_keys section: gateway keys beside
// JWTs. Keys are on when SecretEnv is set. The defaults are applied by
// WithDefaults.
type Settings struct {
	// SecretEnv names the environment variable holding the digests'
	// secret (at least MinSecretBytes). Empty: no gateway keys.
	SecretEnv string `yaml:"secret_env" json:"secret_env"`
	// MaxTTL bounds a key's life, at creation and in the config. Default
	// DefaultMaxTTL.
	MaxTTL time.Duration `yaml:"max_ttl" json:"max_ttl"`
	// CacheTTL is how long a replica believes the store's answer about a
	// key (found or not): a revocation's bound. Default DefaultCacheTTL.
	CacheTTL time.Duration `yaml:"cache_ttl" json:"cache_ttl"`
	// CacheSize bounds the cached answers. Default DefaultCacheSize.
	CacheSize int `yaml:"cache_size" json:"cache_size"`
	// Keys are the config's keys: the isolated tier, a tenant's keys in
	// its own app's secret.
	Keys []Record `yaml:"keys" json:"keys"`
	// AdminRole is the role an operator's JWT must carry in RoleClaim
	// to manage the store's keys on the admin route (/admin/keys).
	// Empty: no admin route (it answers 404). A gateway key never
	// reaches it.
	AdminRole string `yaml:"admin_role" json:"admin_role"`
	// RoleClaim names the JWT claim holding the operator's roles (a
	// list of strings). Default DefaultRoleClaim.
	RoleClaim string `yaml:"role_claim" json:"role_claim"`
}

// DefaultRoleClaim is Entra's app-role claim (api_keys.role_claim).
const DefaultRoleClaim = "roles"

// WithDefaults returns s with its zero values replaced by their defaults.
func (s Settings) WithDefaults() Settings {
	if s.MaxTTL == 0 {
		s.MaxTTL = DefaultMaxTTL
	}
	if s.CacheTTL == 0 {
		s.CacheTTL = DefaultCacheTTL
	}
	if s.CacheSize == 0 {
		s.CacheSize = DefaultCacheSize
	}
	if s.RoleClaim == "" {
		s.RoleClaim = DefaultRoleClaim
	}
	return s
}

// Check reports every problem with s under at: the secret's variable
// (set, long enough), the bounds, and each config key (id, digest,
// tenant, expiry within max_ttl of now). Whether a key's tenant is in
// the tenant table is the gateway's check (shared/assemble).
func (s Settings) Check(at problem.At, getenv func(string) string, now time.Time) {
	problem.NotNegative(at, "max_ttl", s.MaxTTL)
	problem.NotNegative(at, "cache_ttl", s.CacheTTL)
	problem.NotNegative(at, "cache_size", s.CacheSize)
	s = s.WithDefaults()
	if s.SecretEnv == "" {
		if len(s.Keys) > 0 {
			at.Add("secret_env", "required when keys are listed")
		}
		if s.AdminRole != "" {
			at.Add("secret_env", "required when admin_role is set")
		}
		return
	}
	problem.NeedEnv(at, "secret_env", s.SecretEnv, getenv)
	if v := getenv(s.SecretEnv); v != "" && len(v) < MinSecretBytes {
		at.Add("secret_env", "environment variable %s must hold at least %d bytes", s.SecretEnv, MinSecretBytes)
	}
	seen := map[string]bool{}
	for i, r := range s.Keys {
		k := at.Item("keys", i)
		if !ValidID(r.ID) {
			k.Add("id", "must be a key's 8-character public id, not %q", r.ID)
		} else if seen[r.ID] {
			k.Add("id", "%q is listed twice", r.ID)
		}
		seen[r.ID] = true
		if b, err := hex.DecodeString(r.Digest); err != nil || len(b) != 32 {
			k.Add("digest", "must be the key's HMAC-SHA-256, 64 hex digits (gateway keys create -print)")
		}
		if r.Tenant == "" {
			k.Add("tenant", "required")
		}
		switch {
		case r.Expires.IsZero():
			k.Add("expires", "required")
		case r.Expires.After(now.Add(s.MaxTTL)):
			k.Add("expires", "is more than %s (%s) from now", at.Name("max_ttl"), s.MaxTTL)
		}
	}
}
