// Package auth verifies the gateway's bearer tokens: JWTs signed by one
// issuer whose public keys (JWKS) are fetched in the background, cached, and
// refreshed on the issuer's Cache-Control schedule.
//
// New does no network I/O, so a cold start reaches "ready" without waiting
// for the issuer. Start fetches the keys in the background; a request that
// arrives first waits for that same fetch rather than starting its own. A
// token naming a kid the cache lacks triggers at most one extra JWKS fetch
// per Config.UnknownKIDInterval, so key rotation works without a restart and
// forged kids cannot flood the issuer.
//
// Every verification failure wraps ErrInvalidToken (HTTP 401) and its message
// names the problem without echoing the token. ErrKeysUnavailable (HTTP 503)
// means the keys could not be fetched at all. ErrInsufficientPermissions
// (HTTP 403) is a valid token without a role or scope Config requires.
//
// One Verifier may accept the tokens of many directories of one issuer
// (Config.Issuer with TenantPlaceholder): the signature is checked against
// the issuer's common keys, then the token's own "iss" must be the
// template filled with its own tenant claim, so a token cannot claim one
// directory while naming another's issuer.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/llmgw/gateway/shared/problem"
)

var (
	// ErrInvalidToken is wrapped by every verification failure: the caller
	// answers 401. The error's message is a short, fixed description of the
	// problem, safe to return to the client and to log.
	ErrInvalidToken = errors.New("invalid token")
	// ErrKeysUnavailable means the issuer's keys could not be fetched and
	// none are cached, so no token can be judged: the caller answers 503.
	ErrKeysUnavailable = errors.New("auth: signing keys unavailable")
	// ErrInsufficientPermissions is a valid token that carries none of
	// Config.RequiredRoles and Config.RequiredScopes: the caller answers
	// 403. Its message is fixed and safe to return.
	ErrInsufficientPermissions = errors.New("token carries none of the roles or scopes this gateway requires")
)

// invalidError is a verification failure: a fixed reason for the message and
// the library error behind it for errors.Is (e.g. jwt.ErrTokenExpired).
type invalidError struct {
	reason string
	cause  error
}

func (e *invalidError) Error() string { return e.reason }
func (e *invalidError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalidToken}
	}
	return []error{ErrInvalidToken, e.cause}
}

func invalid(reason string, cause error) error { return &invalidError{reason: reason, cause: cause} }

// Fixed failures that need no cause; allocated once.
var (
	errNoHeader   = invalid("missing authorization header", nil)
	errNotBearer  = invalid("authorization scheme is not Bearer", nil)
	errEmptyToken = invalid("bearer token is empty", nil)
	errTooLarge   = invalid("token is too large", nil)
	errCritical   = invalid(`token has critical header parameters ("crit") the gateway does not understand`, nil)
	errNoIssuer   = invalid(`token is missing required claim "iss"`, jwt.ErrTokenRequiredClaimMissing)
	errIssuerType = invalid(`token claim "iss" has an invalid type`, jwt.ErrInvalidType)
	errIssuer     = invalid("issuer not accepted", jwt.ErrTokenInvalidIssuer)
)

// Principal is who a verified token speaks for: its tenant, subject, and
// the project and user claims (Config.ProjectClaim, UserClaim; empty
// when the token has none). Key and Models are a gateway key's (package
// keys; empty and nil for a JWT): its public id, and the models it
// narrows the tenant's to. Roles are a JWT's Config.RoleClaim values.
type Principal struct {
	Tenant, Subject, Project, User string
	Key                            string
	Models                         *ModelSet
	Roles                          *RoleSet
}

// RoleSet is the roles a token carries; a nil set holds none. A pointer,
// so that a Principal stays comparable.
type RoleSet struct{ names []string }

// NewRoleSet is the set of names; none: nil, no role.
func NewRoleSet(names ...string) *RoleSet {
	if len(names) == 0 {
		return nil
	}
	return &RoleSet{names: names}
}

// Has reports whether the set holds role (never, for nil or "").
func (r *RoleSet) Has(role string) bool {
	return r != nil && role != "" && slices.Contains(r.names, role)
}

// Names are the set's roles, in the token's order.
func (r *RoleSet) Names() []string {
	if r == nil {
		return nil
	}
	return r.names
}

// ModelSet is a set of model names; a nil set holds every model (it
// narrows nothing).
type ModelSet struct{ names map[string]struct{} }

// NewModelSet is the set of names; none: nil, every model.
func NewModelSet(names []string) *ModelSet {
	if len(names) == 0 {
		return nil
	}
	m := &ModelSet{names: make(map[string]struct{}, len(names))}
	for _, n := range names {
		m.names[n] = struct{}{}
	}
	return m
}

// Allows reports whether model is in the set (always, for nil).
func (m *ModelSet) Allows(model string) bool {
	if m == nil {
		return true
	}
	_, ok := m.names[model]
	return ok
}

// Verifier checks bearer tokens against one issuer. It is safe for
// concurrent use.
type Verifier struct {
	cfg     Config
	log     *slog.Logger
	keys    *keySource
	keyfunc keyfunc.Keyfunc
	parser  *jwt.Parser
	allowed map[string]bool
	cache   *tokenCache // nil when Config.CacheSize < 0

	// With an Issuer template, "iss" must be issPrefix + tenant + issSuffix.
	template             bool
	issPrefix, issSuffix string
	// roles and scopes are Config.RequiredRoles and RequiredScopes; both
	// empty: no permission check.
	roles, scopes map[string]bool

	tenantMissing error
	tenantNotStr  error
	tenantNotSeg  error
}

// New validates cfg and builds a Verifier. It does no network I/O; call Start
// to fetch keys in the background (Verify also fetches lazily if Start was
// never called). A nil client means a plain http.Client; a nil log discards.
func New(cfg Config, client *http.Client, log *slog.Logger) (*Verifier, error) {
	var p []string
	cfg.Check(problem.Into(&p, ""))
	if err := problem.Err("auth", p); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if client == nil {
		client = &http.Client{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(cfg.Algorithms),
		jwt.WithAudience(cfg.Audiences...),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	}
	v := &Verifier{
		cfg:           cfg,
		log:           log,
		allowed:       make(map[string]bool, len(cfg.Algorithms)),
		template:      IsIssuerTemplate(cfg.Issuer),
		tenantMissing: invalid(`tenant claim "`+cfg.TenantClaim+`" missing`, nil),
		tenantNotStr:  invalid(`tenant claim "`+cfg.TenantClaim+`" is not a string`, nil),
		tenantNotSeg:  invalid(`tenant claim "`+cfg.TenantClaim+`" is not a directory id that can name an issuer`, nil),
	}
	if v.template {
		// The issuer is checked against the tenant claim in principal.
		v.issPrefix, v.issSuffix, _ = strings.Cut(cfg.Issuer, TenantPlaceholder)
	} else {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	for _, a := range cfg.Algorithms {
		v.allowed[a] = true
	}
	if len(cfg.RequiredRoles)+len(cfg.RequiredScopes) > 0 {
		v.roles, v.scopes = set(cfg.RequiredRoles), set(cfg.RequiredScopes)
	}
	var onChange func()
	if cfg.CacheSize > 0 {
		v.cache = newTokenCache(cfg.CacheSize)
		onChange = v.cache.clear
	}
	v.keys = newKeySource(cfg, client, log, onChange)
	var err error
	v.keyfunc, err = keyfunc.New(keyfunc.Options{
		Storage: keyStore{MemoryJWKSet: v.keys.store, src: v.keys},
		// Keys published for encryption never verify a signature; keys that
		// state no use are accepted (RFC 7517 §4.2 makes "use" optional).
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""},
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Start fetches the keys (discovery first when Config.JWKSURL is empty) in
// the background and keeps them fresh until ctx ends. It returns at once;
// calling it again does nothing.
func (v *Verifier) Start(ctx context.Context) { v.keys.start(ctx) }

// Ready reports whether the issuer's keys have been fetched at least
// once: before that every token is refused 503, so a readiness probe
// (/readyz) keeps traffic away until it is true.
func (v *Verifier) Ready() bool { return v.keys.ready() }

// tokenSum is the SHA-256 of tok, the verified-token cache's key. A token
// of ordinary size is hashed from a copy on the stack: converting it to a
// []byte cost every request an allocation of the token's size.
func tokenSum(tok string) [32]byte {
	var buf [2048]byte
	if len(tok) <= len(buf) {
		return sha256.Sum256(append(buf[:0], tok...))
	}
	return sha256.Sum256([]byte(tok))
}

// Verify checks the raw Authorization header value ("Bearer <jwt>") and
// returns the token's principal. Failures wrap ErrInvalidToken, or are
// ErrKeysUnavailable when no keys could be fetched. A request that arrives
// before the first key fetch finished waits for it, bounded by ctx.
func (v *Verifier) Verify(ctx context.Context, authorizationHeader string) (Principal, error) {
	tok, err := v.bearer(authorizationHeader)
	if err != nil {
		return Principal{}, err
	}
	var sum [32]byte
	if v.cache != nil {
		sum = tokenSum(tok)
		if p, ok := v.cache.get(sum, time.Now()); ok {
			return p, nil
		}
	}
	claims := jwt.MapClaims{}
	token, err := v.parser.ParseWithClaims(tok, claims, v.keyfunc.KeyfuncCtx(ctx))
	if err != nil {
		return Principal{}, v.classify(token, err)
	}
	// RFC 7515 §4.1.11: a token whose "crit" names extensions the recipient
	// does not understand must be refused. The gateway understands none, and
	// an empty or malformed "crit" is itself invalid, so its mere presence
	// refuses the token.
	if _, ok := token.Header["crit"]; ok {
		return Principal{}, errCritical
	}
	p, err := v.principal(claims)
	if err != nil {
		return Principal{}, err
	}
	if v.roles != nil && !v.permitted(claims) {
		return Principal{}, ErrInsufficientPermissions
	}
	if v.cache != nil {
		if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
			v.cache.put(sum, p, exp.Time, time.Now())
		}
	}
	return p, nil
}

// bearer extracts the token from "Bearer <token>" (RFC 6750 §2.1; the scheme
// is case-insensitive per RFC 9110 §11.1) and enforces MaxTokenBytes before
// anything is decoded.
func (v *Verifier) bearer(h string) (string, error) {
	const scheme = "Bearer "
	if h == "" {
		return "", errNoHeader
	}
	// Slack for the scheme and surrounding spaces; the exact check follows.
	if len(h) > v.cfg.MaxTokenBytes+64 {
		return "", errTooLarge
	}
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", errNotBearer
	}
	tok := strings.Trim(h[len(scheme):], " \t")
	if tok == "" {
		return "", errEmptyToken
	}
	if len(tok) > v.cfg.MaxTokenBytes {
		return "", errTooLarge
	}
	return tok, nil
}

// principal reads the tenant (a non-empty string claim) and the subject.
func (v *Verifier) principal(claims jwt.MapClaims) (Principal, error) {
	raw, ok := claims[v.cfg.TenantClaim]
	if !ok || raw == nil {
		return Principal{}, v.tenantMissing
	}
	tenant, ok := raw.(string)
	if !ok {
		return Principal{}, v.tenantNotStr
	}
	if tenant == "" {
		return Principal{}, v.tenantMissing
	}
	if v.template {
		if err := v.checkIssuer(claims, tenant); err != nil {
			return Principal{}, err
		}
	}
	sub, err := claims.GetSubject()
	if err != nil {
		return Principal{}, invalid(`subject claim "sub" is not a string`, err)
	}
	p := Principal{Tenant: CanonicalTenant(tenant), Subject: sub}
	if p.Project, err = v.stringClaim(claims, v.cfg.ProjectClaim); err != nil {
		return Principal{}, err
	}
	if p.User, err = v.stringClaim(claims, v.cfg.UserClaim); err != nil {
		return Principal{}, err
	}
	if v.cfg.RoleClaim != "" {
		p.Roles = NewRoleSet(stringsClaim(claims[v.cfg.RoleClaim])...)
	}
	return p, nil
}

// stringsClaim is a claim's strings: a list's string values, or one
// string; nothing for any other type.
func stringsClaim(claim any) []string {
	switch c := claim.(type) {
	case string:
		return []string{c}
	case []any:
		out := make([]string, 0, len(c))
		for _, e := range c {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// errLevelClaim is a project or user claim that is not a string.
var errLevelClaim = invalid("the project or user claim is not a string", jwt.ErrInvalidType)

// stringClaim reads claim name ("" when the token has none or name is
// empty); a claim of another type is an invalid token.
func (v *Verifier) stringClaim(claims jwt.MapClaims, name string) (string, error) {
	raw, ok := claims[name]
	if name == "" || !ok || raw == nil {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", errLevelClaim
	}
	return s, nil
}

// CanonicalTenant is the spelling under which a tenant is looked up,
// counted and logged: a GUID (an Entra directory ID, 8-4-4-4-12 hex digits)
// in lower case, since its case carries no meaning and tools print either;
// any other tenant id unchanged, byte for byte. The config
// check (shared/assemble) applies it to the tenant table, the verifier to
// the token's claim, so the two always meet.
func CanonicalTenant(id string) string {
	if !isGUID(id) {
		return id
	}
	return strings.ToLower(id)
}

// isGUID reports whether s is 8-4-4-4-12 hexadecimal digits.
func isGUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// checkIssuer is the issuer check of a template: the tenant must be one
// path segment that cannot step out of its place (RFC 3986 unreserved
// characters, no dot segment), and "iss" must be the template filled with
// it, byte for byte. A token whose tid names one directory and whose iss
// names another is refused, whatever key signed it.
func (v *Verifier) checkIssuer(claims jwt.MapClaims, tenant string) error {
	if !isSegment(tenant) {
		return v.tenantNotSeg
	}
	raw, ok := claims["iss"]
	if !ok || raw == nil {
		return errNoIssuer
	}
	iss, ok := raw.(string)
	if !ok {
		return errIssuerType
	}
	if len(iss) != len(v.issPrefix)+len(tenant)+len(v.issSuffix) ||
		!strings.HasPrefix(iss, v.issPrefix) || !strings.HasSuffix(iss, v.issSuffix) ||
		iss[len(v.issPrefix):len(iss)-len(v.issSuffix)] != tenant {
		return errIssuer
	}
	return nil
}

// isSegment reports whether s is a non-empty run of RFC 3986 unreserved
// characters (letters, digits, "-", ".", "_", "~") other than a dot
// segment: nothing that ends, escapes or climbs out of a path segment.
// Entra directory ids (GUIDs) always pass.
func isSegment(s string) bool {
	if s == "" || s == "." || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// permitted reports whether the token carries one of the required roles
// ("roles": a list of strings, or one string) or scopes ("scp": a
// space-separated string, or a list).
func (v *Verifier) permitted(claims jwt.MapClaims) bool {
	return anyIn(claims["roles"], v.roles, false) || anyIn(claims["scp"], v.scopes, true)
}

// anyIn reports whether claim holds a value in want. A string claim is one
// value, or space-separated values when split is set.
func anyIn(claim any, want map[string]bool, split bool) bool {
	if len(want) == 0 {
		return false
	}
	switch c := claim.(type) {
	case string:
		if !split {
			return want[c]
		}
		for f := range strings.FieldsSeq(c) {
			if want[f] {
				return true
			}
		}
	case []any:
		for _, e := range c {
			if s, ok := e.(string); ok && want[s] {
				return true
			}
		}
	}
	return false
}

func set(values []string) map[string]bool {
	m := make(map[string]bool, len(values))
	for _, v := range values {
		m[v] = true
	}
	return m
}

// classify maps a jwt/keyfunc error to a fixed, safe reason. Library messages
// are not passed on: some quote the attacker's kid or JSON bytes.
func (v *Verifier) classify(token *jwt.Token, err error) error {
	var unavailable *unavailableError
	if errors.As(err, &unavailable) {
		return unavailable
	}
	if errors.Is(err, jwt.ErrTokenMalformed) {
		return invalid("token is malformed", err)
	}
	if token != nil {
		if alg, _ := token.Header["alg"].(string); !v.allowed[alg] {
			return invalid("signing algorithm not allowed", err)
		}
	}
	reasons := []struct {
		target error
		reason string
	}{
		{errUnknownKey, "unknown signing key"},
		{keyfunc.ErrKeyfunc, "signing key does not match token"},
		{jwt.ErrTokenSignatureInvalid, "token signature is invalid"},
		{jwt.ErrTokenUnverifiable, "token is unverifiable"},
		{jwt.ErrTokenRequiredClaimMissing, ""},
		{jwt.ErrTokenExpired, "token is expired"},
		{jwt.ErrTokenNotValidYet, "token is not valid yet"},
		{jwt.ErrTokenUsedBeforeIssued, "token is issued in the future"},
		{jwt.ErrTokenInvalidIssuer, "issuer not accepted"},
		{jwt.ErrTokenInvalidAudience, "audience not accepted"},
		{jwt.ErrInvalidType, ""},
	}
	for _, r := range reasons {
		if !errors.Is(err, r.target) {
			continue
		}
		reason := r.reason
		switch r.target {
		case jwt.ErrTokenRequiredClaimMissing:
			reason = missingClaimReason(token)
		case jwt.ErrInvalidType:
			reason = `token claim "` + mistypedClaim(token) + `" has an invalid type`
		}
		return invalid(reason, err)
	}
	return invalid("token is invalid", err)
}

// claimsOf returns the token's claims, or nil.
func claimsOf(token *jwt.Token) jwt.MapClaims {
	if token == nil {
		return nil
	}
	c, _ := token.Claims.(jwt.MapClaims)
	return c
}

// missingClaimReason names the required claim a token lacks, in the
// validator's order: the library's error says only "required claim missing".
// exp is required by WithExpirationRequired; aud and iss because the
// Verifier expects values for them (empty counts as absent).
func missingClaimReason(token *jwt.Token) string {
	c := claimsOf(token)
	if _, ok := c["exp"]; !ok {
		return `token is missing required claim "exp"`
	}
	if aud, err := c.GetAudience(); err == nil && (len(aud) == 0 || len(aud) == 1 && aud[0] == "") {
		switch c["aud"].(type) {
		case nil, string, []any:
			return `token is missing required claim "aud"`
		}
		// The library reads an aud that is neither a string nor a list
		// (a number, an object) as absent.
		return `token claim "aud" has an invalid type`
	}
	return `token is missing required claim "iss"`
}

// mistypedClaim names the first registered claim whose JSON type is wrong
// (a time that is not a number, an aud list with a non-string).
func mistypedClaim(token *jwt.Token) string {
	c := claimsOf(token)
	if _, err := c.GetExpirationTime(); err != nil {
		return "exp"
	}
	if _, err := c.GetNotBefore(); err != nil {
		return "nbf"
	}
	if _, err := c.GetIssuedAt(); err != nil {
		return "iat"
	}
	if _, err := c.GetAudience(); err != nil {
		return "aud"
	}
	return "iss"
}
