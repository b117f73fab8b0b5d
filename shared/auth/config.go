package auth

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config says which tokens a Verifier accepts and how it keeps its signing keys
// fresh. Only Issuer and Audiences are required; every other zero value means
// the default named in the field's comment; a negative duration or
// MaxTokenBytes is an error.
//
// The gateway's config package checks these same rules, with field paths,
// before New runs (so that -check and start-up agree): a rule added here
// belongs in its validateAuth too.
type Config struct {
	// Issuer is the expected "iss" claim, an absolute http(s) URL. Required.
	Issuer string
	// JWKSURL is where the signing keys are fetched. When empty it is
	// discovered from {Issuer}/.well-known/openid-configuration (jwks_uri),
	// per OpenID Connect Discovery 1.0 §4.
	JWKSURL string
	// Audiences lists the accepted "aud" values; a token must carry at least
	// one of them. Required.
	Audiences []string
	// TenantClaim names the string claim that carries the tenant. Default "tid".
	TenantClaim string
	// Algorithms is the allow-list of signing algorithms. Default RS256 and
	// ES256. "none" and the HMAC family are refused outright: with a public
	// JWKS an HMAC "key" is public, so accepting HS* would let anyone mint
	// tokens (the RFC 8725 §2.1 algorithm-confusion attack).
	Algorithms []string
	// Leeway tolerates clock skew on exp, nbf and iat. Default 30s.
	Leeway time.Duration
	// MaxTokenBytes refuses longer tokens before any decoding, so a client
	// cannot make the gateway base64- and JSON-decode megabytes. Default 8192.
	MaxTokenBytes int
	// RefreshMin is the floor on the JWKS refresh interval. Default 5m.
	RefreshMin time.Duration
	// RefreshMax is the ceiling on the JWKS refresh interval. Default 24h.
	// Between the two, the JWKS response's Cache-Control max-age decides.
	RefreshMax time.Duration
	// UnknownKIDInterval allows at most one JWKS refresh per interval caused by
	// a token whose kid is not cached, so forged kids cannot turn the gateway
	// into a load generator against the issuer. Default 1m.
	UnknownKIDInterval time.Duration
	// FetchTimeout bounds each HTTP fetch (discovery, JWKS). Default 5s.
	FetchTimeout time.Duration
	// RetryMin is the least time between two fetch attempts after a failed
	// one; background retries back off from it up to RefreshMin. Default 1s.
	RetryMin time.Duration
	// CacheSize bounds the cache of verified tokens (keyed by SHA-256 of the
	// token, kept until the token's exp). Default 1024; negative disables it.
	CacheSize int
}

// Defaults for the zero values of Config.
const (
	DefaultTenantClaim        = "tid"
	DefaultLeeway             = 30 * time.Second
	DefaultMaxTokenBytes      = 8192
	DefaultRefreshMin         = 5 * time.Minute
	DefaultRefreshMax         = 24 * time.Hour
	DefaultUnknownKIDInterval = time.Minute
	DefaultFetchTimeout       = 5 * time.Second
	DefaultRetryMin           = time.Second
	DefaultCacheSize          = 1024
)

// asymmetricAlgs are the algorithms a Verifier can be configured to accept:
// the public-key JWS algorithms of RFC 7518 §3 plus EdDSA (RFC 8037).
var asymmetricAlgs = map[string]bool{
	"RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true,
	"ES256": true, "ES384": true, "ES512": true,
	"EdDSA": true,
}

// withDefaults returns a copy of c with zero values replaced by defaults and
// every problem found, joined, so a bad config is fixed in one go.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if c.Issuer == "" {
		bad("Issuer is required")
	} else if err := checkURL(c.Issuer); err != nil {
		bad("Issuer: %w", err)
	}
	if c.JWKSURL != "" {
		if err := checkURL(c.JWKSURL); err != nil {
			bad("JWKSURL: %w", err)
		}
	}
	if len(c.Audiences) == 0 {
		bad("Audiences: at least one is required")
	}
	for i, a := range c.Audiences {
		if a == "" {
			bad("Audiences[%d] is empty", i)
		}
	}
	c.Audiences = append([]string(nil), c.Audiences...)
	if c.TenantClaim == "" {
		c.TenantClaim = DefaultTenantClaim
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = []string{"RS256", "ES256"}
	} else {
		c.Algorithms = append([]string(nil), c.Algorithms...)
	}
	for _, a := range c.Algorithms {
		switch {
		case strings.EqualFold(a, "none"):
			bad("Algorithms: %q is never accepted", a)
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			bad("Algorithms: %q is never accepted (HMAC with a public JWKS lets anyone sign)", a)
		case !asymmetricAlgs[a]:
			bad("Algorithms: %q is not a supported asymmetric JWS algorithm", a)
		}
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"Leeway", &c.Leeway, DefaultLeeway},
		{"RefreshMin", &c.RefreshMin, DefaultRefreshMin},
		{"RefreshMax", &c.RefreshMax, DefaultRefreshMax},
		{"UnknownKIDInterval", &c.UnknownKIDInterval, DefaultUnknownKIDInterval},
		{"FetchTimeout", &c.FetchTimeout, DefaultFetchTimeout},
		{"RetryMin", &c.RetryMin, DefaultRetryMin},
	}
	for _, d := range durations {
		switch {
		case *d.d < 0:
			bad("%s must not be negative, got %v", d.name, *d.d)
		case *d.d == 0:
			*d.d = d.def
		}
	}
	if c.RefreshMin > c.RefreshMax {
		bad("RefreshMin (%v) is greater than RefreshMax (%v)", c.RefreshMin, c.RefreshMax)
	}
	switch {
	case c.MaxTokenBytes < 0:
		bad("MaxTokenBytes must not be negative, got %d", c.MaxTokenBytes)
	case c.MaxTokenBytes == 0:
		c.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("auth: invalid config: %w", errors.Join(errs...))
	}
	return c, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", s)
	}
	return nil
}
