package stores

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// RedisSettings is how the gateway reaches the store's Redis: the store
// section's settings besides its backend. The config file's limiter
// section takes the same names as deprecated aliases (its settings of
// old), which the config moves here.
type RedisSettings struct {
	// RedisURLEnv names the env var holding a redis:// or rediss:// URL.
	RedisURLEnv string `yaml:"redis_url_env" json:"redis_url_env"`
	// RedisPasswordEnv optionally names the env var holding the password.
	RedisPasswordEnv string `yaml:"redis_password_env" json:"redis_password_env"`
	// RedisEntra, when set, authenticates to Azure Cache for Redis / Azure
	// Managed Redis with a Microsoft Entra ID token as the password (no key).
	RedisEntra *RedisLogin `yaml:"redis_entra" json:"redis_entra"`
	// KeyPrefix prefixes every key of every part, so that several
	// gateways can share one Redis. Default store.DefaultKeyPrefix.
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
	// DialTimeout is the dial budget of every Redis client (limiter,
	// budgets, response records, cooldowns): a take or reservation that
	// waits for a connection being established (dial, TLS, login, a pool
	// turn while the pool fills) waits up to this on top of its timeout,
	// and is not a store failure; a store that cannot be reached within
	// it is. Default store.DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout" json:"dial_timeout"`
}

// RedisLogin is the keyless Redis login: the identity's object id as the
// username, its Entra ID token as the password.
type RedisLogin struct {
	// Config is the credential, which checks it; its scope is
	// entra.RedisScope when the file names none (Entra).
	entra.Config `yaml:",inline"`
	// Username is the identity's object (principal) id, as the Redis access
	// policy assignment names it.
	Username string `yaml:"username" json:"username"`
}

// Entra is the login's credential configuration, its scope Redis's
// (entra.RedisScope) unless the file names one.
func (l RedisLogin) Entra() entra.Config {
	c := l.Config
	if c.Scope == "" {
		c.Scope = entra.RedisScope
	}
	return c
}

// Check reports every problem with the store section's settings in c
// (defaults applied) under at: the backend, the dial budget, and with
// Redis its URL's variable and one login, by key or by Entra ID. The
// answer timeouts are their parts' sections', checked there; getenv
// resolves the secrets' variables only to check that they are set. The
// gateway's config check runs it under store, and names a setting the
// file wrote under its deprecated limiter key by that key
// (config.Config.WrittenAs).
func (c Config) Check(at problem.At, getenv func(string) string) {
	c = c.WithDefaults()
	store.CheckShared(at, "backend", c.Backend, c.DialTimeout)
	if c.Backend != Redis {
		if c.RedisEntra != nil {
			at.Add("redis_entra", "only used with %s redis", at.Name("backend"))
		}
		if c.RedisCluster {
			at.Add("redis_cluster", "only used with %s redis", at.Name("backend"))
		}
		return
	}
	if c.RedisURLEnv == "" {
		at.Add("redis_url_env", "required when %s is redis", at.Name("backend"))
	}
	problem.NeedEnv(at, "redis_url_env", c.RedisURLEnv, getenv)
	problem.NeedEnv(at, "redis_password_env", c.RedisPasswordEnv, getenv)
	if e := c.RedisEntra; e != nil {
		if e.Username == "" {
			at.Add("redis_entra.username", "required: the identity's object id")
		}
		if c.RedisPasswordEnv != "" {
			at.Add("redis_password_env", "must be empty when %s is set", at.Name("redis_entra"))
		}
		e.Entra().Check(at.In("redis_entra"), getenv)
	}
}

// WithSecrets returns c with the Redis secrets its settings name read by
// getenv: the URL, and the password unless the settings name none.
func (c Config) WithSecrets(getenv func(string) string) Config {
	if c.Backend != Redis {
		return c
	}
	c.URL = getenv(c.RedisURLEnv)
	if c.RedisPasswordEnv != "" {
		c.Password = getenv(c.RedisPasswordEnv)
	}
	return c
}
