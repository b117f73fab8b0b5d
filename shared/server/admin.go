package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/keys"
)

// KeyAdmin manages the store's gateway keys (keys.Manager): what the
// admin route does. Each change is its own audit line, naming the key by
// its public id.
type KeyAdmin interface {
	Create(ctx context.Context, rec keys.Record, ttl time.Duration, by string) (string, keys.Record, error)
	List(ctx context.Context) ([]keys.Record, error)
	Revoke(ctx context.Context, id, by string) error
	Rotate(ctx context.Context, id string, ttl, overlap time.Duration, by string) (string, keys.Record, error)
}

// adminKeys is the admin route's path: GET lists, POST creates;
// adminKeys/{id} DELETE revokes, adminKeys/{id}/rotate POST rotates.
const adminKeys = "/admin/keys"

// maxAdminBody bounds an admin request's body: a key's principal and
// models.
const maxAdminBody = 64 << 10

// adminRoutes adds the admin route to t when Deps.KeyAdmin and
// Deps.AdminRole are set; otherwise its paths are unknown (404).
func (s *Server) adminRoutes(t map[string]methods) {
	if s.KeyAdmin == nil || s.AdminRole == "" {
		return
	}
	t[adminKeys] = methods{http.MethodGet: s.admin(s.listKeys), http.MethodPost: s.admin(s.createKey)}
}

// adminKey is the handlers of adminKeys/{rest}, or false when the route
// is off.
func (s *Server) adminKey(rest string) (methods, bool) {
	if s.routes[adminKeys] == nil {
		return nil, false
	}
	id, verb, _ := strings.Cut(rest, "/")
	switch verb {
	case "":
		return methods{http.MethodDelete: s.admin(func(w http.ResponseWriter, r *http.Request, ex *exchange, by string) error {
			return s.revokeKey(w, r, ex, by, id)
		})}, true
	case "rotate":
		return methods{http.MethodPost: s.admin(func(w http.ResponseWriter, r *http.Request, ex *exchange, by string) error {
			return s.rotateKey(w, r, ex, by, id)
		})}, true
	}
	return nil, false
}

// adminHandler is an admin route's step, given the operator's subject.
type adminHandler func(w http.ResponseWriter, r *http.Request, ex *exchange, by string) error

// admin authenticates h's caller: an operator's JWT (Authorization only)
// carrying Deps.AdminRole. A gateway key is refused 403 whatever it
// names: a key never manages keys.
func (s *Server) admin(h adminHandler) handler {
	return func(w http.ResponseWriter, r *http.Request, ex *exchange) error {
		p, err := s.Auth.Verify(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			return authError(err)
		}
		ex.subject = p.Subject
		if p.Key != "" || !p.Roles.Has(s.AdminRole) {
			return adminForbidden()
		}
		return h(w, r, ex, p.Subject)
	}
}

// keyView is a key as the admin route shows it: never its digest; its
// secret only in the answer that makes it.
type keyView struct {
	Key     string    `json:"key,omitempty"`
	Display string    `json:"display"`
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Project string    `json:"project,omitempty"`
	User    string    `json:"user,omitempty"`
	Models  []string  `json:"models,omitempty"`
	Expires time.Time `json:"expires"`
	Created time.Time `json:"created,omitzero"`
}

func viewOf(key string, r keys.Record) keyView {
	return keyView{Key: key, Display: r.Display(), ID: r.ID, Tenant: r.Tenant, Project: r.Project, User: r.User, Models: r.Models, Expires: r.Expires, Created: r.Created}
}

// listKeys answers GET /admin/keys: the store's live keys by public id.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, ex *exchange, _ string) error {
	list, err := s.KeyAdmin.List(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Object string    `json:"object"`
		Data   []keyView `json:"data"`
	}{Object: "list", Data: make([]keyView, 0, len(list))}
	for _, k := range list {
		out.Data = append(out.Data, viewOf("", k))
	}
	return writeJSON(w, ex, out)
}

// createRequest is POST /admin/keys's body; TTL is a Go duration
// ("720h"), default keys.DefaultTTL.
type createRequest struct {
	Tenant  string   `json:"tenant"`
	Project string   `json:"project"`
	User    string   `json:"user"`
	Models  []string `json:"models"`
	TTL     string   `json:"ttl"`
}

// createKey answers POST /admin/keys: a key for a tenant of the table,
// narrowed to models of the tenant's, answered once.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, ex *exchange, by string) error {
	var req createRequest
	if err := readAdmin(w, r, &req); err != nil {
		return err
	}
	ttl, err := adminDuration("ttl", req.TTL, keys.DefaultTTL)
	if err != nil {
		return err
	}
	t := s.Tenants.Lookup(auth.CanonicalTenant(req.Tenant))
	if t == nil {
		return adminInvalid("tenant", fmt.Sprintf("tenant %q is not configured on this gateway", req.Tenant))
	}
	for _, m := range req.Models {
		if !t.Allows(m) {
			return adminInvalid("models", fmt.Sprintf("%q is not one of the tenant's models: a key narrows its tenant's models, never widens them", m))
		}
	}
	key, rec, err := s.KeyAdmin.Create(r.Context(), keys.Record{Tenant: t.ID, Project: req.Project, User: req.User, Models: req.Models}, ttl, by)
	if err != nil {
		return keyAdminError(err, "")
	}
	return writeJSON(w, ex, viewOf(key, rec))
}

// revokeKey answers DELETE /admin/keys/{id}.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, ex *exchange, by, id string) error {
	if !keys.ValidID(id) {
		return keyNotFound(id)
	}
	if err := s.KeyAdmin.Revoke(r.Context(), id, by); err != nil {
		return keyAdminError(err, id)
	}
	return writeJSON(w, ex, struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}{id, true})
}

// rotateRequest is POST /admin/keys/{id}/rotate's body (may be empty):
// the successor's life and how long the old key keeps working, Go
// durations, default keys.DefaultTTL and keys.DefaultOverlap.
type rotateRequest struct {
	TTL     string `json:"ttl"`
	Overlap string `json:"overlap"`
}

// rotateKey answers POST /admin/keys/{id}/rotate with the successor,
// answered once.
func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request, ex *exchange, by, id string) error {
	var req rotateRequest
	if err := readAdmin(w, r, &req); err != nil {
		return err
	}
	if !keys.ValidID(id) {
		return keyNotFound(id)
	}
	ttl, err := adminDuration("ttl", req.TTL, keys.DefaultTTL)
	if err != nil {
		return err
	}
	overlap, err := adminDuration("overlap", req.Overlap, keys.DefaultOverlap)
	if err != nil {
		return err
	}
	key, rec, err := s.KeyAdmin.Rotate(r.Context(), id, ttl, overlap, by)
	if err != nil {
		return keyAdminError(err, id)
	}
	return writeJSON(w, ex, viewOf(key, rec))
}

// readAdmin decodes an admin request's JSON body into v, bounded, with
// no unknown field; an empty body leaves v as it is.
func readAdmin(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return adminBadJSON(err)
	}
	return nil
}

// adminDuration parses a Go duration field; empty is def.
func adminDuration(param, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, adminInvalid(param, fmt.Sprintf("%s must be a duration such as 720h, not %q", param, v))
	}
	return d, nil
}

// keyAdminError maps a keys.Manager error: an unknown id 404, a request
// it cannot honour 400; a store failure is left to asAPIError (500).
func keyAdminError(err error, id string) error {
	switch {
	case errors.Is(err, keys.ErrNotFound):
		return keyNotFound(id)
	case errors.Is(err, keys.ErrInvalid):
		return adminInvalid("", err.Error())
	}
	return err
}
