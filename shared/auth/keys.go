package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
)

// maxDocumentBytes caps a discovery document or JWKS response. Real key sets
// are a few KiB; the cap keeps a hostile or broken issuer from making the
// gateway buffer an unbounded body.
const maxDocumentBytes = 1 << 20

// errUnknownKey is what the key store returns for a kid that is not in the
// JWKS, even after the refresh the unknown-kid budget allowed.
var errUnknownKey = errors.New("unknown signing key")

// unavailableError reports that no keys could be fetched at all. It matches
// ErrKeysUnavailable and keeps the fetch error for the log.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return ErrKeysUnavailable.Error() + ": " + e.cause.Error()
}
func (e *unavailableError) Unwrap() []error { return []error{ErrKeysUnavailable, e.cause} }

// flight is one JWKS fetch in progress; everyone who needs it waits on done.
type flight struct {
	done chan struct{}
	err  error
}

// keySource owns the JWKS: discovery, fetching, the refresh schedule, and the
// unknown-kid budget. jwkset.NewStorageFromHTTP is not used because it fetches
// synchronously when constructed (cold start), refreshes on a fixed ticker
// that ignores Cache-Control, cannot tell "never fetched" from "unknown kid",
// reads the body unbounded, and its unknown-kid limiter is rate.Limiter.Wait,
// which parks every request with a forged kid for up to RateLimitWaitMax
// instead of refusing it at once. jwkset still parses and validates the keys.
type keySource struct {
	cfg      Config
	client   *http.Client
	log      *slog.Logger
	store    *jwkset.MemoryJWKSet
	onChange func() // called after a fetch that changed the key set

	mu          sync.Mutex
	started     bool
	baseCtx     context.Context // fetches run under it, not under a request's context
	jwksURL     string          // cfg.JWKSURL or the discovered jwks_uri
	loaded      bool            // a fetch has succeeded at least once
	digest      [32]byte        // SHA-256 of the last JWKS body, to detect change
	inflight    *flight
	failures    int       // consecutive failed fetches
	failedAt    time.Time // end of the last failed fetch
	lastErr     error
	refreshIn   time.Duration // from the last successful fetch's Cache-Control
	lastUnknown time.Time     // when an unknown kid last caused a fetch
}

func newKeySource(cfg Config, client *http.Client, log *slog.Logger, onChange func()) *keySource {
	return &keySource{
		cfg:      cfg,
		client:   client,
		log:      log,
		store:    jwkset.NewMemoryStorage(),
		onChange: onChange,
		baseCtx:  context.Background(),
		jwksURL:  cfg.JWKSURL,
	}
}

// start launches the first fetch and the refresh loop; later calls do nothing.
func (k *keySource) start(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started {
		return
	}
	k.started = true
	k.baseCtx = ctx
	first := k.inflight
	if first == nil {
		first = k.startFetchLocked()
	}
	go k.loop(ctx, first)
}

// loop refreshes the keys on the schedule the last fetch set: Cache-Control
// max-age clamped to [RefreshMin, RefreshMax] after a success, exponential
// backoff from RetryMin to RefreshMin after a failure.
func (k *keySource) loop(ctx context.Context, f *flight) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.done:
		}
		timer := time.NewTimer(k.nextWait())
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		k.mu.Lock()
		f = k.inflight
		if f == nil {
			f = k.startFetchLocked()
		}
		k.mu.Unlock()
	}
}

func (k *keySource) nextWait() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failures == 0 {
		return k.refreshIn
	}
	return backoff(k.cfg.RetryMin, k.cfg.RefreshMin, k.failures)
}

// backoff doubles base for each failure after the first, capped at ceiling.
func backoff(base, ceiling time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// startFetchLocked starts a fetch in its own goroutine; k.mu must be held and
// no fetch may be in flight. The fetch runs under baseCtx so a request that
// gives up does not cancel a fetch others are waiting for.
func (k *keySource) startFetchLocked() *flight {
	f := &flight{done: make(chan struct{})}
	k.inflight = f
	ctx := k.baseCtx
	go func() {
		maxAge, changed, err := k.fetch(ctx)
		k.mu.Lock()
		k.inflight = nil
		if err != nil {
			k.failures++
			k.failedAt = time.Now()
			k.lastErr = err
		} else {
			k.loaded = true
			k.failures = 0
			k.lastErr = nil
			k.refreshIn = maxAge
		}
		f.err = err
		k.mu.Unlock()
		if err != nil {
			k.log.LogAttrs(ctx, slog.LevelWarn, "jwks fetch failed", slog.String("error", err.Error()))
		} else {
			if changed && k.onChange != nil {
				k.onChange()
			}
			k.log.LogAttrs(ctx, slog.LevelDebug, "jwks fetched", slog.Bool("changed", changed), slog.Duration("next_refresh", maxAge))
		}
		close(f.done)
	}()
	return f
}

// awaitLoaded returns nil once keys have been fetched at least once. Before
// that it joins the fetch in flight, or starts one unless the last attempt
// failed less than RetryMin ago, and waits for it (bounded by ctx and by
// FetchTimeout per HTTP request of the fetch).
func (k *keySource) awaitLoaded(ctx context.Context) error {
	k.mu.Lock()
	if k.loaded {
		k.mu.Unlock()
		return nil
	}
	f := k.inflight
	if f == nil {
		if k.lastErr != nil && time.Since(k.failedAt) < k.cfg.RetryMin {
			err := k.lastErr
			k.mu.Unlock()
			return &unavailableError{err}
		}
		f = k.startFetchLocked()
	}
	k.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return &unavailableError{f.err}
		}
		return nil
	case <-ctx.Done():
		return &unavailableError{fmt.Errorf("waiting for JWKS: %w", ctx.Err())}
	}
}

// refreshForUnknownKID makes sure the key set is fresh after a token named a
// kid it lacks. It joins a fetch already in flight (free), or starts one if
// none was started for an unknown kid within UnknownKIDInterval; otherwise it
// returns at once. It returns nil when a fetch succeeded, errUnknownKey
// when the budget was spent while the issuer answers (the kid is not
// there), and an unavailableError when the fetch failed or the last one
// did: during an issuer outage a token signed with a rotated key cannot be
// checked, which is retryable (503), not invalid (401). While the issuer
// is down the budget is RetryMin, not UnknownKIDInterval, so a rotation
// is picked up within RetryMin of the issuer's recovery.
func (k *keySource) refreshForUnknownKID(ctx context.Context) error {
	k.mu.Lock()
	f := k.inflight
	if f == nil {
		now := time.Now()
		budget := k.cfg.UnknownKIDInterval
		if k.lastErr != nil {
			budget = min(budget, k.cfg.RetryMin)
		}
		if !k.lastUnknown.IsZero() && now.Sub(k.lastUnknown) < budget {
			err := k.lastErr
			k.mu.Unlock()
			if err != nil {
				return &unavailableError{err}
			}
			return errUnknownKey
		}
		k.lastUnknown = now
		f = k.startFetchLocked()
	}
	k.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return &unavailableError{f.err}
		}
		return nil
	case <-ctx.Done():
		return &unavailableError{fmt.Errorf("waiting for JWKS: %w", ctx.Err())}
	}
}

// ready reports whether keys have been fetched at least once.
func (k *keySource) ready() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loaded
}

// fetch resolves the JWKS URL if needed, downloads and parses the key set,
// and replaces the stored keys. It returns the next refresh interval and
// whether the key set changed.
func (k *keySource) fetch(ctx context.Context) (time.Duration, bool, error) {
	u, err := k.resolveJWKSURL(ctx)
	if err != nil {
		return 0, false, err
	}
	body, header, err := k.get(ctx, u)
	if err != nil {
		return 0, false, fmt.Errorf("fetch JWKS: %w", err)
	}
	keys, err := k.parseJWKS(body)
	if err != nil {
		return 0, false, fmt.Errorf("JWKS from %s: %w", u, err)
	}
	sum := sha256.Sum256(body)
	k.mu.Lock()
	changed := sum != k.digest
	k.digest = sum
	k.mu.Unlock()
	if err := k.store.KeyReplaceAll(ctx, keys); err != nil {
		return 0, false, fmt.Errorf("store JWKS: %w", err)
	}
	return refreshInterval(header.Get("Cache-Control"), k.cfg.RefreshMin, k.cfg.RefreshMax), changed, nil
}

// resolveJWKSURL returns the configured JWKS URL or discovers it once from
// the issuer's OpenID configuration. The document's issuer must equal the
// configured one (OpenID Connect Discovery 1.0 §4.3), so a misrouted
// discovery cannot substitute another issuer's keys.
func (k *keySource) resolveJWKSURL(ctx context.Context) (string, error) {
	k.mu.Lock()
	u := k.jwksURL
	k.mu.Unlock()
	if u != "" {
		return u, nil
	}
	discovery := strings.TrimSuffix(k.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	body, _, err := k.get(ctx, discovery)
	if err != nil {
		return "", fmt.Errorf("OIDC discovery: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("OIDC discovery %s: %w", discovery, err)
	}
	if doc.Issuer != k.cfg.Issuer {
		return "", fmt.Errorf("OIDC discovery %s: issuer %q does not match configured %q", discovery, doc.Issuer, k.cfg.Issuer)
	}
	if err := checkURL(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("OIDC discovery %s: jwks_uri: %w", discovery, err)
	}
	k.mu.Lock()
	k.jwksURL = doc.JWKSURI
	k.mu.Unlock()
	return doc.JWKSURI, nil
}

// get performs one GET bounded by FetchTimeout and maxDocumentBytes.
func (k *keySource) get(ctx context.Context, u string) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxDocumentBytes {
		return nil, nil, fmt.Errorf("GET %s: body larger than %d bytes", u, maxDocumentBytes)
	}
	return body, resp.Header, nil
}

// parseJWKS turns a JWKS document into verification keys. Keys that do not
// parse, symmetric keys and encryption keys are skipped with a warning, so
// one odd key from the issuer does not take authentication down; a set with
// no usable key at all is an error and the previous keys stay.
func (k *keySource) parseJWKS(body []byte) ([]jwkset.JWK, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	keys := make([]jwkset.JWK, 0, len(set.Keys))
	for _, m := range set.Keys {
		if m.KTY == jwkset.KtyOct || m.USE == jwkset.UseEnc {
			k.log.Warn("jwks key skipped", "kid", m.KID, "reason", "not a signature verification key")
			continue
		}
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			k.log.Warn("jwks key skipped", "kid", m.KID, "error", err.Error())
			continue
		}
		keys = append(keys, jwk)
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable signing keys")
	}
	return keys, nil
}

// refreshInterval turns a JWKS response's Cache-Control header into the time
// until the next refresh: max-age clamped to [lo, hi]. No max-age, no-cache
// or no-store mean lo, the freshest the config allows (RFC 9111 §5.2.2).
func refreshInterval(cacheControl string, lo, hi time.Duration) time.Duration {
	d := lo
	for directive := range strings.SplitSeq(cacheControl, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(directive), "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "no-cache", "no-store":
			return lo
		case "max-age":
			secs, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(value), `"`), 10, 64)
			switch {
			case errors.Is(err, strconv.ErrRange), err == nil && secs > uint64(hi/time.Second):
				d = hi
			case err == nil:
				d = time.Duration(secs) * time.Second
			}
		}
	}
	return min(max(d, lo), hi)
}

// keyStore is the jwkset.Storage keyfunc reads. A kid that is not cached
// first waits for the initial fetch, then spends the unknown-kid budget.
type keyStore struct {
	*jwkset.MemoryJWKSet
	src *keySource
}

var _ jwkset.Storage = keyStore{}

func (s keyStore) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	if jwk, err := s.MemoryJWKSet.KeyRead(ctx, kid); err == nil {
		return jwk, nil
	}
	if err := s.src.awaitLoaded(ctx); err != nil {
		return jwkset.JWK{}, err
	}
	if jwk, err := s.MemoryJWKSet.KeyRead(ctx, kid); err == nil {
		return jwk, nil
	}
	if err := s.src.refreshForUnknownKID(ctx); err != nil {
		return jwkset.JWK{}, err
	}
	if jwk, err := s.MemoryJWKSet.KeyRead(ctx, kid); err == nil {
		return jwk, nil
	}
	return jwkset.JWK{}, errUnknownKey
}

func (s keyStore) KeyReadAll(ctx context.Context) ([]jwkset.JWK, error) {
	if err := s.src.awaitLoaded(ctx); err != nil {
		return nil, err
	}
	return s.MemoryJWKSet.KeyReadAll(ctx)
}
