package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/problem"
)

const aud = "llm-gateway"

// testIssuer is a devissuer on a loopback httptest server, behind a gate
// that can answer 503 ("down") or hold JWKS responses until released.
type testIssuer struct {
	*devissuer.Issuer
	h        http.Handler // the issuer's own
	url      string       // the issuer's base URL
	client   *http.Client // reaches url
	down     atomic.Bool
	requests atomic.Int64 // every request that reached the gate

	mu      sync.Mutex
	hold    chan struct{} // when non-nil, JWKS responses wait for it to close
	arrived chan struct{} // receives once per held JWKS request
}

func newTestIssuer(t testing.TB, opts devissuer.Options) *testIssuer {
	t.Helper()
	ti := gatedIssuer(t, opts)
	srv := httptest.NewServer(ti)
	t.Cleanup(srv.Close)
	ti.url, ti.client = srv.URL, srv.Client()
	ti.SetIssuer(ti.url)
	return ti
}

// newBubbleIssuer is newTestIssuer served in process, for the tests that
// run in a synctest bubble: its client calls the gate directly, so no
// request waits on a socket and the verifier's refreshes and retries run
// on the bubble's clock.
func newBubbleIssuer(t testing.TB, opts devissuer.Options) *testIssuer {
	t.Helper()
	ti := gatedIssuer(t, opts)
	ti.url, ti.client = "http://issuer.test", &http.Client{Transport: inProcess{ti}}
	ti.SetIssuer(ti.url)
	return ti
}

func gatedIssuer(t testing.TB, opts devissuer.Options) *testIssuer {
	t.Helper()
	iss, err := devissuer.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuer{Issuer: iss, h: iss.Handler()}
}

// ServeHTTP is the gate in front of the issuer's handler.
func (ti *testIssuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ti.requests.Add(1)
	if ti.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	ti.mu.Lock()
	hold, arrived := ti.hold, ti.arrived
	ti.mu.Unlock()
	if hold != nil && r.URL.Path == "/jwks.json" {
		arrived <- struct{}{}
		<-hold
	}
	ti.h.ServeHTTP(w, r)
}

// inProcess is a RoundTripper that answers from a handler in the caller's
// goroutine.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func (ti *testIssuer) jwksURL() string { return ti.url + "/jwks.json" }

func (ti *testIssuer) mint(t testing.TB, c devissuer.Claims) string {
	t.Helper()
	if c.Audience == nil {
		c.Audience = []string{aud}
	}
	tok, err := ti.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// newVerifier builds and starts a Verifier against ti; edit adjusts the config.
func newVerifier(t testing.TB, ti *testIssuer, edit func(*auth.Config)) *auth.Verifier {
	t.Helper()
	cfg := auth.Config{Issuer: ti.IssuerURL(), JWKSURL: ti.jwksURL(), Audiences: []string{aud}}
	if edit != nil {
		edit(&cfg)
	}
	v, err := auth.New(cfg, ti.client, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v.Start(ctx)
	return v
}

func bearer(tok string) string { return "Bearer " + tok }

func TestVerifyAcceptsGoodTokens(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	for _, discovery := range []bool{false, true} {
		v := newVerifier(t, ti, func(c *auth.Config) {
			if discovery {
				c.JWKSURL = ""
			}
			c.Audiences = []string{"other", aud}
		})
		for _, alg := range []string{"RS256", "ES256"} {
			t.Run(fmt.Sprintf("%s/discovery=%v", alg, discovery), func(t *testing.T) {
				tok := ti.mint(t, devissuer.Claims{Tenant: "t1", Subject: "alice", Alg: alg, Audience: []string{"x", aud}})
				for _, header := range []string{bearer(tok), "bearer " + tok, "BEARER  " + tok + " "} {
					p, err := v.Verify(context.Background(), header)
					if err != nil {
						t.Fatalf("Verify: %v", err)
					}
					if want := (auth.Principal{Tenant: "t1", Subject: "alice", User: "alice"}); p != want {
						t.Fatalf("principal = %+v, want %+v", p, want)
					}
				}
			})
		}
	}
}

// TestVerifyLevelClaims: the project and user claims (the spend limits'
// levels below a tenant) come from the signed token; a project claim that is
// not a string is an invalid token, not a project of the caller's
// choosing; user_claim oid reads the object id.
func TestVerifyLevelClaims(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := newVerifier(t, ti, func(c *auth.Config) { c.ProjectClaim, c.UserClaim = "project", "oid" })
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  auth.Principal
		err   bool
	}{
		{"both", map[string]any{"project": "search", "oid": "o-1"}, auth.Principal{Tenant: "t1", Subject: "alice", Project: "search", User: "o-1"}, false},
		{"none", nil, auth.Principal{Tenant: "t1", Subject: "alice"}, false},
		{"project a list", map[string]any{"project": []string{"search", "free"}, "oid": "o-1"}, auth.Principal{}, true},
		{"user a number", map[string]any{"project": "search", "oid": 7}, auth.Principal{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), bearer(ti.mint(t, devissuer.Claims{Tenant: "t1", Subject: "alice", Extra: tc.extra})))
			if tc.err {
				if !errors.Is(err, auth.ErrInvalidToken) {
					t.Fatalf("Verify = %+v, %v; want an invalid token", p, err)
				}
				return
			}
			if err != nil || p != tc.want {
				t.Fatalf("Verify = %+v, %v; want %+v", p, err, tc.want)
			}
		})
	}
	var probs []string
	auth.Config{Issuer: "https://i.example", Audiences: []string{"a"}, UserClaim: "email", ProjectClaim: "tid"}.Check(problem.Into(&probs, "auth"))
	if got := strings.Join(probs, "; "); !strings.Contains(got, "auth.user_claim") || !strings.Contains(got, "auth.project_claim") {
		t.Fatalf("config problems %q: want user_claim and project_claim named", got)
	}
}

func TestVerifyCustomTenantClaim(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := newVerifier(t, ti, func(c *auth.Config) { c.TenantClaim = "org" })
	p, err := v.Verify(context.Background(), bearer(ti.mint(t, devissuer.Claims{Tenant: "acme", TenantClaim: "org"})))
	if err != nil || p.Tenant != "acme" {
		t.Fatalf("Verify = %+v, %v; want tenant acme", p, err)
	}
	_, err = v.Verify(context.Background(), bearer(ti.mint(t, devissuer.Claims{Tenant: "acme"})))
	if !errors.Is(err, auth.ErrInvalidToken) || err.Error() != `tenant claim "org" missing` {
		t.Fatalf("token with tid only: %v", err)
	}
}

func TestVerifyRejectsBadTokens(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	// RS384 is allowed so the JWK's own alg (RS256) is what refuses it.
	v := newVerifier(t, ti, func(c *auth.Config) { c.Algorithms = []string{"RS256", "ES256", "RS384"} })
	now := time.Now()
	good := func(c devissuer.Claims) string {
		if c.Tenant == "" && c.TenantClaim == "" {
			c.Tenant = "t1"
		}
		return ti.mint(t, c)
	}
	// Warm up so the cases below meet a loaded key set.
	if _, err := v.Verify(context.Background(), bearer(good(devissuer.Claims{}))); err != nil {
		t.Fatal(err)
	}

	tokA := good(devissuer.Claims{Subject: "alice"})
	tokB := good(devissuer.Claims{Subject: "mallory", Tenant: "victim"})
	a, b := strings.Split(tokA, "."), strings.Split(tokB, ".")
	tampered := a[0] + "." + b[1] + "." + a[2]

	hsAttack := func() string {
		// The classic confusion attack, built by hand: HS256 keyed with
		// the issuer's published RSA public key, carrying the RSA kid.
		rsaKid, _ := jwt.NewParser().Parse(good(devissuer.Claims{}), nil)
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"iss": ti.IssuerURL(), "aud": aud, "tid": "t1", "exp": now.Add(time.Hour).Unix(),
		})
		tok.Header["kid"] = rsaKid.Header["kid"]
		s, err := tok.SignedString(ti.PublicKeyPEM())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()

	cases := []struct {
		name   string
		header string
		want   string
	}{
		{"expired", bearer(good(devissuer.Claims{ExpiresAt: now.Add(-time.Hour)})), "token is expired"},
		{"not yet valid", bearer(good(devissuer.Claims{NotBefore: now.Add(time.Hour)})), "token is not valid yet"},
		{"iat in the future", bearer(good(devissuer.Claims{IssuedAt: now.Add(time.Hour)})), "token is issued in the future"},
		{"wrong iss", bearer(good(devissuer.Claims{Issuer: "https://evil.example"})), "issuer not accepted"},
		{"wrong aud", bearer(good(devissuer.Claims{Audience: []string{"someone-else"}})), "audience not accepted"},
		{"alg none", bearer(good(devissuer.Claims{Alg: "none"})), "signing algorithm not allowed"},
		{"HS256 with public key (devissuer)", bearer(good(devissuer.Claims{Alg: "HS256"})), "signing algorithm not allowed"},
		{"HS256 with public key (by hand)", bearer(hsAttack), "signing algorithm not allowed"},
		{"alg not allowed PS256", bearer(good(devissuer.Claims{Alg: "PS256"})), "signing algorithm not allowed"},
		{"JWK alg differs from token alg", bearer(good(devissuer.Claims{Alg: "RS384"})), "signing key does not match token"},
		{"unknown kid", bearer(good(devissuer.Claims{Kid: "no-such-kid"})), "unknown signing key"},
		{"tampered payload", bearer(tampered), "token signature is invalid"},
		{"missing exp", bearer(good(devissuer.Claims{NoExp: true})), `token is missing required claim "exp"`},
		{"missing tenant", bearer(good(devissuer.Claims{TenantClaim: "tid"})), `tenant claim "tid" missing`},
		{"empty tenant", bearer(good(devissuer.Claims{Extra: map[string]any{"tid": ""}})), `tenant claim "tid" missing`},
		{"tenant not a string", bearer(good(devissuer.Claims{Extra: map[string]any{"tid": 42}})), `tenant claim "tid" is not a string`},
		{"sub not a string", bearer(good(devissuer.Claims{Extra: map[string]any{"sub": 7}})), `subject claim "sub" is not a string`},
		{"exp not a number", bearer(good(devissuer.Claims{Extra: map[string]any{"exp": "tomorrow"}})), `token claim "exp" has an invalid type`},
		{"garbage", "Bearer not-a-jwt", "token is malformed"},
		{"garbage three parts", "Bearer a.b.c", "token is malformed"},
		{"empty header", "", "missing authorization header"},
		{"empty token", "Bearer   ", "bearer token is empty"},
		{"wrong scheme", "Basic dXNlcjpwYXNz", "authorization scheme is not Bearer"},
		{"scheme without space", "Bearer" + tokA, "authorization scheme is not Bearer"},
		{"oversize valid token", bearer(good(devissuer.Claims{Extra: map[string]any{"pad": strings.Repeat("x", 9000)}})), "token is too large"},
		{"oversize garbage", bearer(strings.Repeat("!", 9000)), "token is too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := v.Verify(context.Background(), tc.header)
			if !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
			if errors.Is(err, auth.ErrKeysUnavailable) {
				t.Fatalf("err = %v also matches ErrKeysUnavailable", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("message = %q, want %q", err.Error(), tc.want)
			}
			for part := range strings.SplitSeq(strings.TrimPrefix(tc.header, "Bearer "), ".") {
				if len(part) >= 8 && strings.Contains(err.Error(), part) {
					t.Fatalf("message %q echoes the token", err.Error())
				}
			}
		})
	}
}

// TestVerifyFirstRequestWaitsForStartFetch holds the JWKS response and sends
// requests meanwhile: they must all wait for the one fetch Start began.
func TestVerifyFirstRequestWaitsForStartFetch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ti := newBubbleIssuer(t, devissuer.Options{})
		hold := make(chan struct{})
		ti.mu.Lock()
		ti.hold, ti.arrived = hold, make(chan struct{}, 100)
		ti.mu.Unlock()
		tok := ti.mint(t, devissuer.Claims{Tenant: "t1", Alg: "ES256"})
		before := ti.JWKSRequests()
		v := newVerifier(t, ti, nil)
		<-ti.arrived // Start's fetch is now in flight and held

		const n = 20
		var done sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			done.Go(func() {
				_, err := v.Verify(t.Context(), bearer(tok))
				errs <- err
			})
		}
		synctest.Wait() // every Verify waits, none answered
		if len(errs) != 0 {
			t.Fatalf("%d of %d Verify calls answered while the start's fetch was held", len(errs), n)
		}
		ti.mu.Lock()
		ti.hold = nil
		ti.mu.Unlock()
		close(hold)
		done.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
		}
		if got := ti.JWKSRequests() - before; got != 1 {
			t.Fatalf("JWKS requests = %d, want exactly 1 (singleflight)", got)
		}
	})
}

func TestVerifyWaitIsBoundedByContext(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	ti.mu.Lock()
	ti.hold, ti.arrived = hold, make(chan struct{}, 100)
	ti.mu.Unlock()
	v := newVerifier(t, ti, nil)
	<-ti.arrived
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := v.Verify(ctx, bearer(ti.mint(t, devissuer.Claims{Tenant: "t1", Alg: "ES256"})))
	if !errors.Is(err, auth.ErrKeysUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrKeysUnavailable wrapping context.Canceled", err)
	}
}

func TestNewDoesNoIO(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	cfg := auth.Config{Issuer: ti.IssuerURL(), Audiences: []string{aud}}
	v, err := auth.New(cfg, ti.client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := ti.requests.Load(); n != 0 {
		t.Fatalf("New made %d requests, want 0", n)
	}
	// Without Start, Verify fetches lazily.
	if _, err := v.Verify(context.Background(), bearer(ti.mint(t, devissuer.Claims{Tenant: "t1"}))); err != nil {
		t.Fatal(err)
	}
	if n := ti.requests.Load(); n != 2 {
		t.Fatalf("requests = %d, want 2 (discovery + JWKS)", n)
	}
}

func TestKeyRotationWithoutRestart(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := newVerifier(t, ti, nil)
	old := ti.mint(t, devissuer.Claims{Tenant: "t1"})
	if _, err := v.Verify(context.Background(), bearer(old)); err != nil {
		t.Fatal(err)
	}
	before := ti.JWKSRequests()
	if err := ti.Rotate(); err != nil {
		t.Fatal(err)
	}
	rotated := ti.mint(t, devissuer.Claims{Tenant: "t2"})
	p, err := v.Verify(context.Background(), bearer(rotated))
	if err != nil || p.Tenant != "t2" {
		t.Fatalf("token with the new kid: %+v, %v", p, err)
	}
	if got := ti.JWKSRequests() - before; got != 1 {
		t.Fatalf("JWKS requests for rotation = %d, want 1", got)
	}
	if _, err := v.Verify(context.Background(), bearer(old)); err != nil {
		t.Fatalf("token with the old kid after rotation: %v", err)
	}
}

func TestUnknownKIDFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := newVerifier(t, ti, func(c *auth.Config) { c.UnknownKIDInterval = time.Hour })
	if _, err := v.Verify(context.Background(), bearer(ti.mint(t, devissuer.Claims{Tenant: "t1", Alg: "ES256"}))); err != nil {
		t.Fatal(err)
	}
	before := ti.JWKSRequests()

	const n = 200
	forged := make([]string, n)
	for i := range forged {
		forged[i] = ti.mint(t, devissuer.Claims{Tenant: "t1", Alg: "ES256", Kid: fmt.Sprintf("forged-%d", i)})
	}
	flood := func() {
		var wg sync.WaitGroup
		for _, tok := range forged {
			wg.Go(func() {
				_, err := v.Verify(context.Background(), bearer(tok))
				if !errors.Is(err, auth.ErrInvalidToken) || err.Error() != "unknown signing key" {
					t.Errorf("forged kid: %v", err)
				}
			})
		}
		wg.Wait()
	}
	flood()
	if got := ti.JWKSRequests() - before; got != 1 {
		t.Fatalf("JWKS requests after flood = %d, want 1", got)
	}
	flood()
	if got := ti.JWKSRequests() - before; got != 1 {
		t.Fatalf("JWKS requests after second flood in the same interval = %d, want 1", got)
	}
}

func TestIssuerDownThenRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ti := newBubbleIssuer(t, devissuer.Options{})
		ti.down.Store(true)
		v := newVerifier(t, ti, func(c *auth.Config) {
			c.JWKSURL = "" // discovery must recover too
			c.RetryMin = 10 * time.Millisecond
		})
		tok := ti.mint(t, devissuer.Claims{Tenant: "t1"})

		_, err := v.Verify(t.Context(), bearer(tok))
		if !errors.Is(err, auth.ErrKeysUnavailable) || errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("issuer down: err = %v, want ErrKeysUnavailable only", err)
		}
		// A token that cannot be valid is still a 401, not a 503.
		if _, err := v.Verify(t.Context(), "Bearer garbage"); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("garbage while issuer down: %v", err)
		}

		ti.down.Store(false)
		time.Sleep(10 * time.Millisecond) // RetryMin since the last failure
		if _, err := v.Verify(t.Context(), bearer(tok)); err != nil {
			t.Fatalf("RetryMin after the issuer came up: %v", err)
		}
	})
}

func TestRefreshFollowsClampedCacheControl(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// max-age is an hour; RefreshMax clamps it to 50ms, so refreshes go on.
		ti := newBubbleIssuer(t, devissuer.Options{MaxAge: time.Hour})
		newVerifier(t, ti, func(c *auth.Config) {
			c.RefreshMin = 10 * time.Millisecond
			c.RefreshMax = 50 * time.Millisecond
		})
		time.Sleep(175 * time.Millisecond)
		synctest.Wait()
		if n := ti.JWKSRequests(); n != 4 {
			t.Fatalf("JWKS requests = %d after 175ms, want 4 (the start's fetch, then one every 50ms)", n)
		}
	})
}

func TestRefreshRespectsMaxAge(t *testing.T) {
	t.Parallel()
	// max-age an hour, within [min,max]: after the first fetch no refresh
	// happens while another verifier with a short max-age refreshes often.
	synctest.Test(t, func(t *testing.T) {
		slow := newBubbleIssuer(t, devissuer.Options{MaxAge: time.Hour})
		fast := newBubbleIssuer(t, devissuer.Options{MaxAge: time.Second})
		for _, ti := range []*testIssuer{slow, fast} {
			newVerifier(t, ti, func(c *auth.Config) {
				c.RefreshMin = time.Second
				c.RefreshMax = 2 * time.Hour
			})
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if n := fast.JWKSRequests(); n != 3 {
			t.Fatalf("fast issuer (max-age 1s): JWKS requests = %d after 2.5s, want 3 (one a second)", n)
		}
		if n := slow.JWKSRequests(); n != 1 {
			t.Fatalf("slow issuer (max-age 1h): JWKS requests = %d, want 1", n)
		}
	})
}

func TestStartStopsWithContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ti := newBubbleIssuer(t, devissuer.Options{MaxAge: time.Hour})
		v, err := auth.New(auth.Config{
			Issuer: ti.IssuerURL(), JWKSURL: ti.jwksURL(), Audiences: []string{aud},
			RefreshMin: 10 * time.Millisecond, RefreshMax: 10 * time.Millisecond,
		}, ti.client, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		v.Start(ctx)
		time.Sleep(25 * time.Millisecond) // the start's fetch and two refreshes
		synctest.Wait()
		if n := ti.JWKSRequests(); n < 2 {
			t.Fatalf("JWKS requests = %d after 25ms of 10ms refreshes, want at least 2", n)
		}
		cancel()
		synctest.Wait() // the refresh loop has returned
		n := ti.JWKSRequests()
		time.Sleep(time.Second)
		if got := ti.JWKSRequests(); got != n {
			t.Fatalf("refreshes continued after ctx ended: %d -> %d", n, got)
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	base := func() auth.Config {
		return auth.Config{Issuer: "https://issuer.example", Audiences: []string{aud}}
	}
	cases := []struct {
		name  string
		edit  func(*auth.Config)
		wants []string
	}{
		{"ok", func(*auth.Config) {}, nil},
		{"no issuer", func(c *auth.Config) { c.Issuer = "" }, []string{"issuer: required"}},
		{"relative issuer", func(c *auth.Config) { c.Issuer = "issuer.example" }, []string{"issuer:"}},
		{"no audience", func(c *auth.Config) { c.Audiences = nil }, []string{"audiences"}},
		{"empty audience", func(c *auth.Config) { c.Audiences = []string{""} }, []string{"audiences[0]: must not be empty"}},
		{"alg none", func(c *auth.Config) { c.Algorithms = []string{"RS256", "none"} }, []string{`"none" is never accepted`}},
		{"alg HS256", func(c *auth.Config) { c.Algorithms = []string{"HS256"} }, []string{`"HS256" is never accepted`}},
		{"alg hs512 lowercase", func(c *auth.Config) { c.Algorithms = []string{"hs512"} }, []string{`"hs512" is never accepted`}},
		{"alg unknown", func(c *auth.Config) { c.Algorithms = []string{"XY1"} }, []string{`"XY1" is not a supported`}},
		{"min above max", func(c *auth.Config) { c.RefreshMin, c.RefreshMax = time.Hour, time.Minute }, []string{"jwks_refresh_min"}},
		{"negative leeway", func(c *auth.Config) { c.Leeway = -time.Second }, []string{"leeway: must not be negative"}},
		{"bad JWKS URL", func(c *auth.Config) { c.JWKSURL = "/jwks.json" }, []string{"jwks_url"}},
		{"every problem at once", func(c *auth.Config) {
			c.Issuer, c.Audiences, c.Algorithms = "", nil, []string{"HS256", "none"}
		}, []string{"issuer: required", "audiences", `"HS256"`, `"none"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := base()
			tc.edit(&cfg)
			_, err := auth.New(cfg, nil, nil)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("New accepted a bad config")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestDiscoveryIssuerMismatch(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	ti.SetIssuer("https://impostor.example") // discovery names another issuer
	v := newVerifier(t, ti, func(c *auth.Config) { c.Issuer, c.JWKSURL = ti.url, "" })
	tok := ti.mint(t, devissuer.Claims{Tenant: "t1", Issuer: ti.url})
	_, err := v.Verify(context.Background(), bearer(tok))
	if !errors.Is(err, auth.ErrKeysUnavailable) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("err = %v, want ErrKeysUnavailable naming the issuer mismatch", err)
	}
}

// TestRotationDuringIssuerOutage: a token signed with a rotated key while
// the issuer is down cannot be checked: ErrKeysUnavailable (503,
// retryable), not an invalid token (401); once the issuer is back the new
// key is fetched within RetryMin although UnknownKIDInterval is an hour.
// Without that shorter budget it was 401 "unknown signing key" for up to
// UnknownKIDInterval after the issuer recovered.
func TestRotationDuringIssuerOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ti := newBubbleIssuer(t, devissuer.Options{})
		v := newVerifier(t, ti, func(c *auth.Config) {
			c.UnknownKIDInterval = time.Hour
			c.RetryMin = 50 * time.Millisecond
		})
		if _, err := v.Verify(t.Context(), bearer(ti.mint(t, devissuer.Claims{Tenant: "t1"}))); err != nil {
			t.Fatal(err)
		}
		if !v.Ready() {
			t.Fatal("not ready after a verified token")
		}
		ti.down.Store(true)
		if err := ti.Rotate(); err != nil {
			t.Fatal(err)
		}
		rotated := ti.mint(t, devissuer.Claims{Tenant: "t2"})
		for i := range 3 { // the first spends the unknown-kid budget, the rest find it spent
			_, err := v.Verify(t.Context(), bearer(rotated))
			if !errors.Is(err, auth.ErrKeysUnavailable) || errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("try %d during the outage: %v, want ErrKeysUnavailable only", i, err)
			}
		}
		ti.down.Store(false)
		if _, err := v.Verify(t.Context(), bearer(rotated)); !errors.Is(err, auth.ErrKeysUnavailable) {
			t.Fatalf("at the recovery, within RetryMin of the last failure: %v, want ErrKeysUnavailable", err)
		}
		time.Sleep(50 * time.Millisecond) // RetryMin
		p, err := v.Verify(t.Context(), bearer(rotated))
		if err != nil || p.Tenant != "t2" {
			t.Fatalf("RetryMin after the recovery (unknown_kid_interval 1h): %+v, %v; want t2's token served", p, err)
		}
		// A kid nobody signs with, while the issuer answers, is still a 401.
		forged := ti.mint(t, devissuer.Claims{Tenant: "t1", Kid: "forged"})
		if _, err := v.Verify(t.Context(), bearer(forged)); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("forged kid with the issuer up: %v, want an invalid token", err)
		}
	})
}

// TestReadyOnlyAfterKeys: a verifier is not ready until its first fetch
// succeeded.
func TestReadyOnlyAfterKeys(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ti := newBubbleIssuer(t, devissuer.Options{})
		ti.down.Store(true)
		v := newVerifier(t, ti, func(c *auth.Config) { c.RetryMin = 10 * time.Millisecond })
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if v.Ready() {
			t.Fatal("ready with the issuer down since the start")
		}
		ti.down.Store(false)
		// The start's loop retries with a backoff that doubles from
		// RetryMin: at 10, 30 and 70 ms, so the try at 70 ms finds the
		// issuer up.
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if !v.Ready() {
			t.Fatal("not ready after the retry at 70ms (backoff 10, 20, 40ms from the start), the issuer up since 50ms")
		}
	})
}
