package auth

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// Config says which tokens a Verifier accepts and how it keeps its signing keys
// fresh. It is the config file's auth section as written (its yaml names);
// the fields tagged "-" are not the file's. Only Issuer and Audiences are
// required; every other zero value means the default named in the field's
// comment, which New applies; a negative duration or MaxTokenBytes is an
// error.
//
// Check states its rules, once: New refuses what it reports, and the
// gateway's config check reports the same under the auth section, so that
// -check and start-up agree.
type Config struct {
	// Issuer is the expected "iss" claim, an absolute http(s) URL. Required.
	//
	// An Issuer holding TenantPlaceholder once, in its path, accepts every
	// directory of a multi-tenant issuer, as Entra ID's "organizations"
	// discovery document describes it
	// (https://login.microsoftonline.com/{tenantid}/v2.0): a token's "iss"
	// must then equal Issuer with the placeholder replaced by the token's
	// tenant claim, exactly, and the tenant claim must be a single path
	// segment (see the Verifier). Which directories are served is the
	// tenant table's decision, not the Verifier's. JWKSURL is required then.
	Issuer string `yaml:"issuer" json:"issuer"`
	// JWKSURL is where the signing keys are fetched. When empty it is
	// discovered from {Issuer}/.well-known/openid-configuration (jwks_uri),
	// per OpenID Connect Discovery 1.0 §4; discovery cannot start from an
	// Issuer template, so a template needs JWKSURL (for Entra ID,
	// https://login.microsoftonline.com/common/discovery/v2.0/keys).
	JWKSURL string `yaml:"jwks_url" json:"jwks_url"`
	// Audiences lists the accepted "aud" values; a token must carry at least
	// one of them. Required.
	Audiences []string `yaml:"audiences" json:"audiences"`
	// TenantClaim names the string claim that carries the tenant. Default
	// DefaultTenantClaim.
	TenantClaim string `yaml:"tenant_claim" json:"tenant_claim"`
	// ProjectClaim names the string claim that carries the caller's
	// project (Principal.Project), its level below the tenant for spend
	// and token limits; empty: none is read. UserClaim names the one that
	// carries its user (Principal.User), its level below the project:
	// "sub" or "oid". Default DefaultUserClaim. Either, when the token
	// has it, must be a string, else the token is invalid: a level below
	// the tenant comes from the signed token, never from the request.
	ProjectClaim string `yaml:"project_claim" json:"project_claim"`
	UserClaim    string `yaml:"user_claim" json:"user_claim"`
	// RequiredRoles and RequiredScopes, when either is set, make a valid
	// token carry at least one of them: a value of its "roles" claim (an
	// app role, Entra's client-credentials and assigned-user tokens) in
	// RequiredRoles, or a value of its space-separated "scp" claim (a
	// delegated scope) in RequiredScopes. A token with none fails with
	// ErrInsufficientPermissions (HTTP 403), not ErrInvalidToken. Default
	// none: the issuer's assignment is the access control.
	RequiredRoles  []string `yaml:"required_roles" json:"required_roles"`
	RequiredScopes []string `yaml:"required_scopes" json:"required_scopes"`
	// RoleClaim names the claim read into Principal.Roles (a list of
	// strings, or one string): the operator's roles, which the admin
	// route checks. It is api_keys.role_claim, set by shared/assemble
	// when api_keys.admin_role is; empty: no roles are read.
	RoleClaim string `yaml:"-" json:"-"`
	// Algorithms is the allow-list of signing algorithms. Default
	// DefaultAlgorithms. "none" and the HMAC family are refused outright: with a public
	// JWKS an HMAC "key" is public, so accepting HS* would let anyone mint
	// tokens (the RFC 8725 §2.1 algorithm-confusion attack).
	Algorithms []string `yaml:"algorithms" json:"algorithms"`
	// Leeway tolerates clock skew on exp, nbf and iat. Default DefaultLeeway.
	Leeway time.Duration `yaml:"leeway" json:"leeway"`
	// MaxTokenBytes refuses longer tokens before any decoding, so a client
	// cannot make the gateway base64- and JSON-decode megabytes. Default
	// DefaultMaxTokenBytes.
	MaxTokenBytes int `yaml:"max_token_bytes" json:"max_token_bytes"`
	// RefreshMin is the floor on the JWKS refresh interval. Default
	// DefaultRefreshMin.
	RefreshMin time.Duration `yaml:"jwks_refresh_min" json:"jwks_refresh_min"`
	// RefreshMax is the ceiling on the JWKS refresh interval. Default
	// DefaultRefreshMax.
	// Between the two, the JWKS response's Cache-Control max-age decides.
	RefreshMax time.Duration `yaml:"jwks_refresh_max" json:"jwks_refresh_max"`
	// UnknownKIDInterval allows at most one JWKS refresh per interval caused by
	// a token whose kid is not cached, so forged kids cannot turn the gateway
	// into a load generator against the issuer. Default
	// DefaultUnknownKIDInterval.
	UnknownKIDInterval time.Duration `yaml:"unknown_kid_interval" json:"unknown_kid_interval"`
	// FetchTimeout bounds each HTTP fetch (discovery, JWKS). Default
	// DefaultFetchTimeout.
	FetchTimeout time.Duration `yaml:"-" json:"-"`
	// RetryMin is the least time between two fetch attempts after a failed
	// one; background retries back off from it up to RefreshMin. Default
	// DefaultRetryMin.
	RetryMin time.Duration `yaml:"-" json:"-"`
	// CacheSize bounds the cache of verified tokens (keyed by SHA-256 of the
	// token, kept until the token's exp). Default DefaultCacheSize;
	// negative disables it.
	CacheSize int `yaml:"-" json:"-"`
}

// Defaults for the zero values of Config.
const (
	DefaultTenantClaim        = "tid"
	DefaultUserClaim          = "sub"
	DefaultLeeway             = 30 * time.Second
	DefaultMaxTokenBytes      = 8192
	DefaultRefreshMin         = 5 * time.Minute
	DefaultRefreshMax         = 24 * time.Hour
	DefaultUnknownKIDInterval = time.Minute
	DefaultFetchTimeout       = 5 * time.Second
	DefaultRetryMin           = time.Second
	DefaultCacheSize          = 1024
)

// DefaultAlgorithms is the algorithm allow-list when Config.Algorithms is
// empty: what Entra ID (RS256) and most other issuers sign with.
func DefaultAlgorithms() []string { return []string{"RS256", "ES256"} }

// asymmetricAlgs are the algorithms a Verifier can be configured to accept:
// the public-key JWS algorithms of RFC 7518 §3 plus EdDSA (RFC 8037).
var asymmetricAlgs = map[string]bool{
	"RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true,
	"ES256": true, "ES384": true, "ES512": true,
	"EdDSA": true,
}

// withDefaults returns a copy of c with zero values replaced by defaults;
// its lists are copies, so the caller's cannot change a Verifier's.
func (c Config) withDefaults() Config {
	c.RequiredRoles = append([]string(nil), c.RequiredRoles...)
	c.RequiredScopes = append([]string(nil), c.RequiredScopes...)
	c.Audiences = append([]string(nil), c.Audiences...)
	if c.TenantClaim == "" {
		c.TenantClaim = DefaultTenantClaim
	}
	if c.UserClaim == "" {
		c.UserClaim = DefaultUserClaim
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = DefaultAlgorithms()
	} else {
		c.Algorithms = append([]string(nil), c.Algorithms...)
	}
	for _, d := range c.durations() {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.MaxTokenBytes == 0 {
		c.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	return c
}

// durations lists c's durations by their config field names, with their
// defaults.
func (c *Config) durations() []struct {
	name string
	d    *time.Duration
	def  time.Duration
} {
	return []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"leeway", &c.Leeway, DefaultLeeway},
		{"jwks_refresh_min", &c.RefreshMin, DefaultRefreshMin},
		{"jwks_refresh_max", &c.RefreshMax, DefaultRefreshMax},
		{"unknown_kid_interval", &c.UnknownKIDInterval, DefaultUnknownKIDInterval},
		{"fetch_timeout", &c.FetchTimeout, DefaultFetchTimeout},
		{"retry_min", &c.RetryMin, DefaultRetryMin},
	}
}

// Check reports every problem with c, defaults applied, under at by the
// gateway config's field names (issuer, jwks_url, ...), so a bad config is
// fixed in one go. New refuses what it reports; the gateway's config check
// calls it with the auth section's path. It is long because Config is
// wide: one short check per field, in field order.
func (c Config) Check(at problem.At) {
	c = c.withDefaults()
	if c.Issuer == "" {
		at.Add("issuer", "required")
	} else if err := CheckIssuer(c.Issuer); err != nil {
		at.Add("issuer", "%v", err)
	}
	if c.JWKSURL != "" {
		if err := checkURL(c.JWKSURL); err != nil {
			at.Add("jwks_url", "%v", err)
		}
	} else if IsIssuerTemplate(c.Issuer) {
		at.Add("jwks_url", "required when %s contains %s: discovery cannot start from a template (Entra ID: https://login.microsoftonline.com/common/discovery/v2.0/keys)", at.Name("issuer"), TenantPlaceholder)
	}
	for i, r := range c.RequiredRoles {
		if r == "" {
			at.Item("required_roles", i).Add("", "must not be empty")
		}
	}
	for i, s := range c.RequiredScopes {
		if err := CheckScope(s); err != nil {
			at.Item("required_scopes", i).Add("", "%v", err)
		}
	}
	if c.UserClaim != "sub" && c.UserClaim != "oid" {
		at.Add("user_claim", `must be "sub" (the subject) or "oid" (the object id), not %q`, c.UserClaim)
	}
	if c.ProjectClaim != "" && (c.ProjectClaim == c.TenantClaim || c.ProjectClaim == c.UserClaim) {
		at.Add("project_claim", "must name a claim of its own, not the tenant's or the user's (%q)", c.ProjectClaim)
	}
	if len(c.Audiences) == 0 {
		at.Add("audiences", "at least one audience is required")
	}
	for i, a := range c.Audiences {
		if a == "" {
			at.Item("audiences", i).Add("", "must not be empty")
		}
	}
	for i, a := range c.Algorithms {
		switch {
		case strings.EqualFold(a, "none"):
			at.Item("algorithms", i).Add("", "%q is never accepted", a)
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			at.Item("algorithms", i).Add("", "%q is never accepted (HMAC with a public JWKS lets anyone sign)", a)
		case !asymmetricAlgs[a]:
			at.Item("algorithms", i).Add("", "%q is not a supported asymmetric JWS algorithm", a)
		}
	}
	for _, d := range c.durations() {
		problem.NotNegative(at, d.name, *d.d)
	}
	if c.RefreshMin > c.RefreshMax {
		at.Add("jwks_refresh_min", "must not exceed %s (%s > %s)", at.Name("jwks_refresh_max"), c.RefreshMin, c.RefreshMax)
	}
	problem.NotNegative(at, "max_token_bytes", c.MaxTokenBytes)
}

// TenantPlaceholder in Config.Issuer stands for the token's tenant claim.
// It is the spelling of Entra ID's multi-tenant discovery documents.
const TenantPlaceholder = "{tenantid}"

// IsIssuerTemplate reports whether issuer names TenantPlaceholder.
func IsIssuerTemplate(issuer string) bool { return strings.Contains(issuer, TenantPlaceholder) }

// CheckIssuer reports why issuer cannot be a Config.Issuer: it must be an
// absolute http(s) URL and, when it is a template, hold TenantPlaceholder
// exactly once, in its path, so that the tenant can never change the host
// the keys are trusted for.
func CheckIssuer(issuer string) error {
	if !IsIssuerTemplate(issuer) {
		return checkURL(issuer)
	}
	if n := strings.Count(issuer, TenantPlaceholder); n != 1 {
		return fmt.Errorf("%q names %s %d times; a template names it once", issuer, TenantPlaceholder, n)
	}
	const marker = "tenantidmarker"
	u, err := url.Parse(strings.Replace(issuer, TenantPlaceholder, marker, 1))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", issuer)
	}
	if !strings.Contains(u.Path, marker) || strings.Contains(u.Host+u.User.String()+u.RawQuery+u.Fragment, marker) {
		return fmt.Errorf("%q: %s must be in the URL's path, not its host, query or fragment", issuer, TenantPlaceholder)
	}
	return nil
}

// CheckScope reports why s cannot be a required scope: "scp" is a
// space-separated list, so a scope with a space (or an empty one) could
// never match one of its values.
func CheckScope(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("%q contains white space; scp values are separated by spaces", s)
	}
	return nil
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
