// Package devissuer is a local OpenID token issuer for development, tests and
// benchmarks. It is not for production: keys live only in memory and it will
// sign deliberately broken tokens on request.
//
// An Issuer holds an RSA-2048 key (RS256) and a P-256 key (ES256), each with
// a kid, and its Handler serves:
//
//	GET /.well-known/openid-configuration  {"issuer": ..., "jwks_uri": ".../jwks.json"}
//	GET /jwks.json                          public keys, Cache-Control: max-age=Options.MaxAge
//	GET /mint?tenant=t1&sub=alice&aud=llm-gateway&ttl=1h&alg=ES256
//	                                        a signed token as text/plain; loopback clients only
//
// aud may repeat or be comma-separated; ttl defaults to 1h and alg to RS256.
// The /mint endpoint exists because the keys are generated per process: only
// the running server can sign tokens its own JWKS verifies.
package devissuer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// DefaultMaxAge is the Cache-Control max-age of the JWKS when Options.MaxAge is zero.
const DefaultMaxAge = 300 * time.Second

// Options configures an Issuer. The zero value works: set the issuer URL
// later with SetIssuer once the listener's address is known.
type Options struct {
	// Issuer is the "iss" of minted tokens and the base of jwks_uri.
	Issuer string
	// MaxAge is sent as Cache-Control max-age on the JWKS. Default 300s.
	MaxAge time.Duration
}

// Claims describes a token to mint. The zero value plus Tenant and Audience
// is a valid RS256 token for one hour; the other fields make bad tokens.
type Claims struct {
	Tenant   string
	Subject  string
	Audience []string
	// TTL sets exp = now + TTL. Default 1h.
	TTL time.Duration
	// Alg is RS256 (default) or ES256. For attack tests it may also be any
	// other RS*/PS* (signed with the RSA key), "none" (unsigned), or "HS256"
	// (HMAC keyed with PublicKeyPEM, the algorithm-confusion attack).
	Alg string
	// Extra claims, set last, so they may override anything.
	Extra map[string]any

	NotBefore time.Time // sets nbf when non-zero
	IssuedAt  time.Time // overrides iat (default now)
	ExpiresAt time.Time // overrides exp (default now + TTL)
	NoExp     bool      // omit exp
	Kid       string    // overrides the header kid
	Issuer    string    // overrides iss
	// TenantClaim names the tenant claim. Default "tid".
	TenantClaim string
}

type rsaKey struct {
	kid string
	key *rsa.PrivateKey
}

// Issuer signs tokens and publishes the matching JWKS. Safe for concurrent use.
type Issuer struct {
	maxAge time.Duration
	ec     *ecdsa.PrivateKey
	ecKid  string
	pubPEM []byte // PEM of the first RSA public key

	mu     sync.RWMutex
	issuer string
	rsa    []rsaKey // last one signs; all are published
	jwks   []byte   // cached public JWKS JSON

	jwksRequests atomic.Int64
}

// New generates the keys. It does no I/O.
func New(opts Options) (*Issuer, error) {
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devissuer: generate P-256 key: %w", err)
	}
	i := &Issuer{maxAge: opts.MaxAge, ec: ec, ecKid: "es256-" + randomHex(4), issuer: opts.Issuer}
	if err := i.Rotate(); err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&i.rsa[0].key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("devissuer: marshal public key: %w", err)
	}
	i.pubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	return i, nil
}

// SetIssuer sets the issuer URL, for when it is known only after listening.
func (i *Issuer) SetIssuer(url string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.issuer = url
}

// IssuerURL returns the issuer URL.
func (i *Issuer) IssuerURL() string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.issuer
}

// Rotate adds a new RSA key with a new kid; tokens minted afterwards with
// RS256 are signed with it. Older keys stay in the JWKS.
func (i *Issuer) Rotate() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("devissuer: generate RSA key: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rsa = append(i.rsa, rsaKey{kid: "rs256-" + randomHex(4), key: key})
	return i.rebuildJWKSLocked()
}

func (i *Issuer) rebuildJWKSLocked() error {
	store := jwkset.NewMemoryStorage()
	add := func(pub crypto.PublicKey, alg jwkset.ALG, kid string) error {
		jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{ALG: alg, KID: kid, USE: jwkset.UseSig},
		})
		if err != nil {
			return fmt.Errorf("devissuer: JWK %s: %w", kid, err)
		}
		return store.KeyWrite(context.Background(), jwk)
	}
	for _, k := range i.rsa {
		if err := add(&k.key.PublicKey, jwkset.AlgRS256, k.kid); err != nil {
			return err
		}
	}
	if err := add(&i.ec.PublicKey, jwkset.AlgES256, i.ecKid); err != nil {
		return err
	}
	raw, err := store.JSONPublic(context.Background())
	if err != nil {
		return fmt.Errorf("devissuer: JWKS: %w", err)
	}
	i.jwks = raw
	return nil
}

// JWKSRequests counts requests served on /jwks.json.
func (i *Issuer) JWKSRequests() int64 { return i.jwksRequests.Load() }

// PublicKeyPEM is the first RSA public key as PKIX PEM: what an attacker can
// download and try as an HMAC secret.
func (i *Issuer) PublicKeyPEM() []byte { return append([]byte(nil), i.pubPEM...) }

// Mint signs a token described by c.
func (i *Issuer) Mint(c Claims) (string, error) {
	i.mu.RLock()
	iss := i.issuer
	cur := i.rsa[len(i.rsa)-1]
	i.mu.RUnlock()

	now := time.Now()
	if c.TTL == 0 {
		c.TTL = time.Hour
	}
	if c.Alg == "" {
		c.Alg = "RS256"
	}
	if c.Issuer != "" {
		iss = c.Issuer
	}
	if c.TenantClaim == "" {
		c.TenantClaim = "tid"
	}
	claims := jwt.MapClaims{"iss": iss, "iat": now.Unix()}
	if c.Subject != "" {
		claims["sub"] = c.Subject
	}
	if c.Tenant != "" {
		claims[c.TenantClaim] = c.Tenant
	}
	switch len(c.Audience) {
	case 0:
	case 1:
		claims["aud"] = c.Audience[0]
	default:
		claims["aud"] = c.Audience
	}
	if !c.NoExp {
		exp := now.Add(c.TTL)
		if !c.ExpiresAt.IsZero() {
			exp = c.ExpiresAt
		}
		claims["exp"] = exp.Unix()
	}
	if !c.NotBefore.IsZero() {
		claims["nbf"] = c.NotBefore.Unix()
	}
	if !c.IssuedAt.IsZero() {
		claims["iat"] = c.IssuedAt.Unix()
	}
	maps.Copy(claims, c.Extra)

	method := jwt.GetSigningMethod(c.Alg)
	if method == nil {
		return "", fmt.Errorf("devissuer: unknown alg %q", c.Alg)
	}
	var key any
	kid := ""
	switch {
	case c.Alg == "ES256":
		key, kid = i.ec, i.ecKid
	case c.Alg == "none":
		key = jwt.UnsafeAllowNoneSignatureType
	case c.Alg == "HS256":
		key, kid = i.pubPEM, cur.kid
	case strings.HasPrefix(c.Alg, "RS"), strings.HasPrefix(c.Alg, "PS"):
		key, kid = cur.key, cur.kid
	default:
		return "", fmt.Errorf("devissuer: alg %q not supported", c.Alg)
	}
	if c.Kid != "" {
		kid = c.Kid
	}
	t := jwt.NewWithClaims(method, claims)
	if kid != "" {
		t.Header["kid"] = kid
	}
	return t.SignedString(key)
}

// Handler serves discovery, the JWKS and /mint.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.serveDiscovery)
	mux.HandleFunc("GET /jwks.json", i.serveJWKS)
	mux.HandleFunc("GET /mint", i.serveMint)
	return mux
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	iss := i.IssuerURL()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                iss,
		"jwks_uri":                              strings.TrimSuffix(iss, "/") + "/jwks.json",
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
	})
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	i.jwksRequests.Add(1)
	i.mu.RLock()
	body := i.jwks
	i.mu.RUnlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age="+strconv.FormatInt(int64(i.maxAge/time.Second), 10))
	_, _ = w.Write(body)
}

func (i *Issuer) serveMint(w http.ResponseWriter, r *http.Request) {
	if !fromLoopback(r) {
		http.Error(w, "mint is for loopback clients only", http.StatusForbidden)
		return
	}
	q := r.URL.Query()
	c := Claims{Tenant: q.Get("tenant"), Subject: q.Get("sub"), Alg: q.Get("alg")}
	for _, a := range q["aud"] {
		for part := range strings.SplitSeq(a, ",") {
			if part = strings.TrimSpace(part); part != "" {
				c.Audience = append(c.Audience, part)
			}
		}
	}
	if s := q.Get("ttl"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			http.Error(w, "ttl must be a positive Go duration such as 15m", http.StatusBadRequest)
			return
		}
		c.TTL = d
	}
	if c.Tenant == "" || len(c.Audience) == 0 {
		http.Error(w, "tenant and aud are required", http.StatusBadRequest)
		return
	}
	if c.Alg != "" && c.Alg != "RS256" && c.Alg != "ES256" {
		http.Error(w, "alg must be RS256 or ES256", http.StatusBadRequest)
		return
	}
	tok, err := i.Mint(c)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = fmt.Fprintln(w, tok)
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
