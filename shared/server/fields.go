package server

// Body fields by allow-list: a top-level member that neither the
// operation's table (request.Operation.Fields), the pool's kind nor its
// operator names does not reach a backend. By default it is dropped, and
// named to the client (HeaderDroppedFields) and in the access log
// (dropped_fields), so a new SDK field degrades instead of breaking;
// where the pool or the tenant says unknown_fields: refuse it is a 400
// naming it.

import (
	"net/http"
	"strings"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/tenant"
)

// HeaderDroppedFields names, on an answer, the top-level body members the
// gateway did not forward (comma-separated, each as sent, clipped).
const HeaderDroppedFields = "X-Llmgw-Dropped-Fields"

// fieldsOf is what pool forwards of op's bodies: a member every endpoint
// forwards (they share the pool's kind and fields).
type fieldsOf struct {
	s    *Server
	op   request.Operation
	pool *route.Pool
}

func (f *fieldsOf) known(name []byte) bool {
	if f.op.Forwards(name) {
		return true
	}
	for _, e := range f.pool.Endpoints {
		if !f.s.Targets[e].Forwards(f.op, name) {
			return false
		}
	}
	return len(f.pool.Endpoints) > 0
}

func (f *fieldsOf) refuses(t *tenant.Tenant) bool {
	if t.RefuseUnknown {
		return true
	}
	for _, e := range f.pool.Endpoints {
		if f.s.Targets[e].RefusesUnknown() {
			return true
		}
	}
	return false
}

// admitFields applies the field tables to raw, the body read as body:
// when every member is known it returns them as they are, without
// allocating; otherwise it refuses the first unknown member, or returns
// the body without the unknown ones, read again.
func (s *Server) admitFields(w http.ResponseWriter, ex *exchange, t *tenant.Tenant, op request.Operation, pool *route.Pool, raw []byte, body request.Body) ([]byte, request.Body, error) {
	f := fieldsOf{s: s, op: op, pool: pool}
	u := request.UnknownFields(raw, f.known)
	if u.N == 0 {
		return raw, body, nil
	}
	if f.refuses(t) {
		return raw, body, unknownField(fieldName(u.First), op)
	}
	stripped, dropped := request.DropFields(make([]byte, 0, len(raw)), raw, f.known)
	names := droppedList(dropped)
	ex.dropped = names
	w.Header().Set(HeaderDroppedFields, names)
	s.Log.Debug("body fields dropped", "request_id", ex.id, "tenant", ex.tenant, "fields", names)
	nb, perr := parseBody(stripped, op)
	if perr != nil {
		// A member the operation requires was dropped: it was never
		// there, as far as the backend goes.
		return raw, body, perr
	}
	return stripped, nb, nil
}

// maxDroppedNames bounds how many dropped members are named: a caller
// decides how many it sends.
const maxDroppedNames = 16

// droppedList is the dropped members' keys as sent, comma-separated,
// each made header- and log-safe and clipped.
func droppedList(keys [][]byte) string {
	var sb strings.Builder
	for i, k := range keys {
		if i == maxDroppedNames {
			sb.WriteString(", …")
			break
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(fieldName(k))
	}
	return clipped(sb.String())
}

// maxFieldName bounds one echoed member name: no field is longer.
const maxFieldName = 64

// fieldName is a key as sent (between its quotes), safe to echo in a
// header, a log and an error: printable ASCII but the separators,
// anything else as '?', clipped at maxFieldName.
func fieldName(raw []byte) string {
	n := min(len(raw), maxFieldName)
	b := make([]byte, n, n+len(truncatedMark))
	for i := range n {
		c := raw[i]
		if c < 0x20 || c > 0x7e || c == ',' || c == '"' {
			c = '?'
		}
		b[i] = c
	}
	if len(raw) > maxFieldName {
		b = append(b, truncatedMark...)
	}
	return string(b)
}

// unknownField: a member no table names, on a pool or for a tenant
// that refuses them.
func unknownField(name string, op request.Operation) *apiError {
	return invalidRequest(http.StatusBadRequest, "unsupported_parameter", name,
		"Unrecognized request argument supplied: '"+name+"' is not a parameter "+op.API()+" forwards through this gateway.")
}
