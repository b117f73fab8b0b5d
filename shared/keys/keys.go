// Package keys verifies the gateway's own API keys: another way to name a
// principal (auth.Principal) beside the operator's JWTs, for editors, CLIs
// and agents that take a static key and cannot refresh a token.
//
// A key is Prefix, an 8-character public id, "-" and a 43-character
// secret (32 random bytes, base64url). The gateway keeps only its keyed
// digest, HMAC-SHA-256 under a server-side secret (Digest), compared in
// constant time: a digest read out of the store or the config is not a
// credential. A key is shown once, when it is made (Generate); afterwards
// it is named by its public id and last characters (Display).
//
// A key resolves to a tenant, project and user exactly as a JWT's claims
// do, so every rule of the tenant applies unchanged; a key may only
// narrow it (Record.Models, its expiry). Keys come from the config (the
// isolated tier: a tenant's keys in its own app's secret, held in memory)
// and from a shared Store (made and revoked at run time), read by public
// id through a small in-process cache (Verifier).
package keys

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/auth"
)

// Prefix starts every gateway key: a key and a JWT are told apart by it
// (a JWT starts with its base64url header, "eyJ"), so neither is ever
// tried as the other.
const Prefix = "llmgw-"

const (
	idLen     = 8
	secretLen = 43 // 32 bytes, base64url without padding
	// keyLen is a whole key's length.
	keyLen = len(Prefix) + idLen + 1 + secretLen
)

// idEncoding spells a public id: lower-case base32, no padding, so an id
// reads the same in a URL, a log line and a Redis key.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

var (
	// ErrNotFound is a public id no store holds.
	ErrNotFound = errors.New("keys: no such key")
	// ErrExpired is a key past its expiry: 401, and the client is told
	// not to retry. It wraps auth.ErrInvalidToken.
	ErrExpired = &refusal{"api key is expired"}
	// errRefused is every other refusal of a key's shape or secret, one
	// message for all so that the answer says nothing about which part
	// was wrong.
	errRefused = &refusal{"api key is not valid"}
)

// refusal is a refused key: its message is fixed and safe to return and
// to log; it wraps auth.ErrInvalidToken so the server answers 401.
type refusal struct{ msg string }

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Unwrap() error        { return auth.ErrInvalidToken }
func (e *refusal) Is(target error) bool { return target == e }

// Is reports whether tok has a key's shape: the prefix (a JWT never has
// it). Only the prefix is looked at; Parse checks the rest.
func Is(tok string) bool { return strings.HasPrefix(tok, Prefix) }

// Parse splits key into its public id and reports whether it has a key's
// exact shape (length, prefix, alphabets).
func Parse(key string) (id string, ok bool) {
	if len(key) != keyLen || !Is(key) || key[len(Prefix)+idLen] != '-' {
		return "", false
	}
	id = key[len(Prefix) : len(Prefix)+idLen]
	if !ValidID(id) {
		return "", false
	}
	for i := len(Prefix) + idLen + 1; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "", false
		}
	}
	return id, true
}

// ValidID reports whether id is a public id: 8 characters of idEncoding.
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// Display names a key without its secret: "llmgw-<id>…<last4>".
func Display(id, last4 string) string { return Prefix + id + "…" + last4 }

// Digest is key's keyed digest under secret, hex: what a store or the
// config holds in the key's place.
func Digest(secret []byte, key string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))
}

// Record is one key as it is kept: never its secret. It is an entry of
// the config's api_keys.keys list as written and a store's value.
type Record struct {
	// ID is the public id (the 8 characters after Prefix).
	ID string `yaml:"id" json:"id"`
	// Digest is Digest of the whole key under the gateway's secret.
	Digest string `yaml:"digest" json:"digest"`
	// Last4 is the key's last four characters, to tell keys apart when
	// listed (Display).
	Last4 string `yaml:"last4" json:"last4,omitempty"`
	// Tenant, Project and User are the principal the key names, as a
	// JWT's tenant, project and user claims would.
	Tenant  string `yaml:"tenant" json:"tenant"`
	Project string `yaml:"project" json:"project,omitempty"`
	User    string `yaml:"user" json:"user,omitempty"`
	// Models narrows the tenant's models to these; empty: all of the
	// tenant's. A key never widens the tenant's allow-list.
	Models []string `yaml:"models" json:"models,omitempty"`
	// Expires is when the key stops working. Required.
	Expires time.Time `yaml:"expires" json:"expires"`
	// Created is when the key was made (store keys).
	Created time.Time `yaml:"-" json:"created,omitzero"`
}

// Display is the record's key without its secret.
func (r Record) Display() string { return Display(r.ID, r.Last4) }

// Principal is who the key speaks for: its subject is "key:<id>", so the
// access log and telemetry name the key by its public id only.
func (r Record) Principal() auth.Principal {
	return auth.Principal{Tenant: auth.CanonicalTenant(r.Tenant), Subject: "key:" + r.ID, Project: r.Project, User: r.User, Key: r.ID, Models: auth.NewModelSet(r.Models)}
}

// Generate makes a new key for rec's principal under secret: the key,
// shown once, and its record (ID, Digest, Last4 and Created filled in).
func Generate(secret []byte, rec Record, now time.Time) (key string, _ Record, _ error) {
	var b [5 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", rec, fmt.Errorf("keys: %w", err)
	}
	rec.ID = idEncoding.EncodeToString(b[:5])
	key = Prefix + rec.ID + "-" + base64.RawURLEncoding.EncodeToString(b[5:])
	rec.Digest = Digest(secret, key)
	rec.Last4 = key[len(key)-4:]
	rec.Created = now.UTC()
	return key, rec, nil
}
