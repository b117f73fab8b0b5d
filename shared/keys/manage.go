package keys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of a new key's life and of a rotation's overlap, when the
// caller (the keys subcommand, the admin route) names none.
const (
	DefaultTTL     = 30 * 24 * time.Hour
	DefaultOverlap = 24 * time.Hour
)

// ErrInvalid is a key asked for that cannot be made (a life beyond
// MaxTTL, no tenant, a negative overlap): the caller's mistake, not the
// store's.
var ErrInvalid = errors.New("keys: invalid request")

// Manager makes, rotates and revokes the keys of a Store: what the
// gateway's keys subcommand and its admin route do. Every change is one
// audit line (slog, Info) that names the key by its public id only.
type Manager struct {
	// Secret is the digests' key (Settings.SecretEnv's value).
	Secret []byte
	Store  Store
	// MaxTTL bounds a key's life. Default DefaultMaxTTL.
	MaxTTL time.Duration
	// Log takes the audit lines; nil: discarded.
	Log *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (m Manager) now() time.Time {
	if m.Now == nil {
		return time.Now()
	}
	return m.Now()
}

func (m Manager) audit(ctx context.Context, what, by string, r Record, args ...any) {
	if m.Log == nil {
		return
	}
	args = append([]any{"audit", "api_key", "key", r.ID, "tenant", r.Tenant, "by", by}, args...)
	m.Log.InfoContext(ctx, what, args...)
}

// Create makes a key for rec's principal that lives ttl (at most MaxTTL)
// and stores it; the key is returned once, never kept.
func (m Manager) Create(ctx context.Context, rec Record, ttl time.Duration, by string) (string, Record, error) {
	key, rec, err := m.New(rec, ttl)
	if err != nil {
		return "", rec, err
	}
	if err := m.Store.Put(ctx, rec); err != nil {
		return "", rec, fmt.Errorf("keys: store %s: %w", rec.ID, err)
	}
	m.audit(ctx, "api key created", by, rec, "expires", rec.Expires)
	return key, rec, nil
}

// New makes a key for rec's principal that lives ttl (at most MaxTTL)
// without storing it: a config entry's.
func (m Manager) New(rec Record, ttl time.Duration) (string, Record, error) {
	maxTTL := m.MaxTTL
	if maxTTL <= 0 {
		maxTTL = DefaultMaxTTL
	}
	if ttl <= 0 || ttl > maxTTL {
		return "", rec, fmt.Errorf("%w: a key's life must be above 0 and at most %s, not %s", ErrInvalid, maxTTL, ttl)
	}
	if rec.Tenant == "" {
		return "", rec, fmt.Errorf("%w: a key needs a tenant", ErrInvalid)
	}
	now := m.now()
	rec.Expires = now.Add(ttl).UTC().Truncate(time.Second)
	return Generate(m.Secret, rec, now)
}

// List returns the store's live keys by public id, their digests left
// out: what an operator may see of a key.
func (m Manager) List(ctx context.Context) ([]Record, error) {
	list, err := m.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	for i := range list {
		list[i].Digest = ""
	}
	return list, nil
}

// Revoke deletes id: every replica refuses it within its cache's bound
// (Options.CacheTTL).
func (m Manager) Revoke(ctx context.Context, id, by string) error {
	r, err := m.Store.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("keys: revoke %s: %w", id, err)
	}
	if err := m.Store.Delete(ctx, id); err != nil {
		return fmt.Errorf("keys: revoke %s: %w", id, err)
	}
	m.audit(ctx, "api key revoked", by, r)
	return nil
}

// Rotate makes id's successor (same principal and models, living ttl)
// and cuts id's life to overlap from now (never lengthening it), so
// clients can move to the new key while the old one still works.
func (m Manager) Rotate(ctx context.Context, id string, ttl, overlap time.Duration, by string) (string, Record, error) {
	old, err := m.Store.Get(ctx, id)
	if err != nil {
		return "", Record{}, fmt.Errorf("keys: rotate %s: %w", id, err)
	}
	if overlap < 0 {
		return "", Record{}, fmt.Errorf("%w: rotate %s: overlap must not be negative", ErrInvalid, id)
	}
	next := Record{Tenant: old.Tenant, Project: old.Project, User: old.User, Models: old.Models}
	key, next, err := m.Create(ctx, next, ttl, by)
	if err != nil {
		return "", next, err
	}
	if end := m.now().Add(overlap).UTC(); end.Before(old.Expires) {
		old.Expires = end
	}
	if overlap == 0 {
		err = m.Store.Delete(ctx, id)
	} else {
		err = m.Store.Put(ctx, old)
	}
	if err != nil {
		return key, next, fmt.Errorf("keys: rotate %s: cut the old key: %w", id, err)
	}
	m.audit(ctx, "api key rotated", by, old, "successor", next.ID, "old_expires", old.Expires)
	return key, next, nil
}
