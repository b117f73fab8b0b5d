package server

import (
	"encoding/json"
	"net/http"

	"github.com/llmgw/gateway/shared/tenant"
)

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels answers GET /v1/models with the caller's tenant's models, in
// OpenAI's list shape.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	t, ok := s.principalTenant(w, r, rec)
	if !ok {
		return
	}
	models := t.Models
	list := struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{Object: "list", Data: make([]modelObject, 0, len(models))}
	for _, m := range models {
		list.Data = append(list.Data, modelObject{ID: m, Object: "model", OwnedBy: s.Router.Pool(m).Name})
	}
	s.writeJSON(w, rec, list)
}

// getModel answers GET /v1/models/{model}.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request, id string) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	t, ok := s.principalTenant(w, r, rec)
	if !ok {
		return
	}
	models := t.Models
	rec.model = id
	for _, m := range models {
		if m == id {
			s.writeJSON(w, rec, modelObject{ID: m, Object: "model", OwnedBy: s.Router.Pool(m).Name})
			return
		}
	}
	s.fail(w, rec, modelNotFound(id))
}

// principalTenant authenticates the caller and finds its tenant: the
// prelude of every authenticated route (the proxy's, the models', the
// stored responses'). On failure it has answered.
func (s *Server) principalTenant(w http.ResponseWriter, r *http.Request, rec *record) (*tenant.Tenant, bool) {
	p, err := s.Auth.Verify(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		s.fail(w, rec, authError(err))
		return nil, false
	}
	rec.tenant, rec.subject = p.Tenant, p.Subject
	t := s.Tenants.Lookup(p.Tenant)
	if t == nil {
		s.fail(w, rec, tenantNotAllowed(p.Tenant))
		return nil, false
	}
	rec.tenantName = t.Name
	return t, true
}

func (s *Server) writeJSON(w http.ResponseWriter, rec *record, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.fail(w, rec, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	rec.status, rec.wroteHeader = http.StatusOK, true
	n, _ := w.Write(b)
	rec.bytes = int64(n)
}
