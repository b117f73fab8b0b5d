package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/upstream"
)

// The Responses API's stored responses. POST /v1/responses is the one
// request path (proxy.go, with op Responses); what is particular to it is
// here: a stored response lives only on the endpoint that created it, and
// one backend key serves every tenant, so the gateway records each
// response id's endpoint and tenant (Affinity), sends follow-ups there
// without failover, and refuses them to every other tenant.

// Affinity remembers where stored responses live (shared/affinity).
type Affinity interface {
	Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error
	Get(ctx context.Context, id string) (affinity.Owner, bool, error)
	Delete(ctx context.Context, id string) error
}

// storedState is a request's part in the stored responses: the endpoint
// the response it continues lives on, and the one it creates, once
// recorded.
type storedState struct {
	pin        string // the endpoint a stored response lives on ("" = any)
	id         string // the created response's id, once recorded or refused
	remembered bool   // its owner was recorded (once)
}

// affinityTimeout bounds one affinity store call on the request path.
const affinityTimeout = time.Second

// pinPrevious resolves a request's previous_response_id: the endpoint it
// must go to, or an error. Only an id recorded for the caller's tenant
// reaches a backend.
func (s *Server) pinPrevious(ctx context.Context, ex *exchange, tenantID string, pool *route.Pool, id string) *apiError {
	if id == "" {
		return nil
	}
	o, ok, err := s.lookup(ctx, id)
	if err != nil {
		// Without the record the gateway cannot tell whose id it is.
		return affinityUnavailable()
	}
	switch {
	case !ok || o.Tenant != tenantID:
		// Fails closed: an id with no record (never recorded,
		// expired, evicted, lost with the store) may be anyone's, so it is
		// nobody's, answered exactly as another tenant's id is.
		return previousNotFound(id)
	case o.Pool != pool.Name:
		return previousElsewhere(id, o.Model, ex.model)
	}
	ex.stored.pin, ex.bill.PreviousTokens = o.Endpoint, o.Tokens
	return nil
}

func (s *Server) lookup(ctx context.Context, id string) (affinity.Owner, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, affinityTimeout)
	defer cancel()
	return s.Affinity.Get(ctx, id)
}

// HeaderUnrecorded is set on a Responses answer whose stored response the
// gateway could not record (dispatch.HeaderUnrecorded).
const HeaderUnrecorded = dispatch.HeaderUnrecorded

// rememberAnswer records the id of a JSON Response (its top-level id,
// with object "response") once the scanner has read it; h, when not nil,
// is the response header still to be sent. It records once per request.
func (s *Server) rememberAnswer(ex *exchange, scan *sse.AnswerScanner, h http.Header) {
	if ex.stored.remembered || ex.stored.id != "" {
		return
	}
	id, object := scan.ID()
	if len(id) == 0 || string(object) != "response" && len(object) > 0 {
		return
	}
	if len(object) == 0 && h != nil {
		return // "object" may follow "id": wait for the whole answer
	}
	if !s.rememberID(ex, string(id)) && h != nil {
		h.Set(HeaderUnrecorded, string(id))
	}
}

// remember records that the response id in a stream's first event
// (response.created) lives where ex was served; it returns the id when
// it could not be recorded.
func (s *Server) remember(ex *exchange, answer []byte, stream bool) (unrecorded string) {
	id := responseID(answer, stream)
	if !s.rememberID(ex, id) {
		return id
	}
	return ""
}

// rememberID records id's owner; it reports false when the store failed.
// Nothing is retried: a record written late would open the id after a
// window in which it was refused, and the caller was told it is unusable.
func (s *Server) rememberID(ex *exchange, id string) bool {
	if id == "" {
		return true
	}
	ex.stored.id = id
	ctx, cancel := context.WithTimeout(context.Background(), affinityTimeout)
	defer cancel()
	o := affinity.Owner{Tenant: ex.tenant, Model: ex.model, Pool: ex.pool, Endpoint: ex.Endpoint}
	if b := ex.budget; b != nil && b.Background && b.Held {
		// Its reservation waits for the response's usage (settleBackground).
		o.Background = ex.id
	}
	if err := s.Affinity.Put(ctx, id, o, s.ResponseTTL); errors.Is(err, affinity.ErrTaken) {
		// The backend answered with an id another tenant owns (a lying or
		// echoing backend): the id stays the owner's, and this answer is
		// relayed marked unrecorded, its id refused to this tenant.
		ex.Detail = "response_id_taken: the backend answered with another tenant's response id"
		s.Log.Warn("backend answered with a response id recorded for another tenant: relayed marked unrecorded, the id stays its owner's", "request_id", ex.id, "response_id", id, "endpoint", ex.Endpoint)
		return false
	} else if err != nil {
		if ex.Detail == "" {
			ex.Detail = "response_unrecorded: " + err.Error()
		}
		s.Log.Warn("stored response not recorded: its id is refused to every tenant, its creator included", "request_id", ex.id, "response_id", id, "err", err)
		return false
	}
	ex.stored.remembered = true
	return true
}

// responseID reads a Response's id: the top-level "id" of a JSON answer,
// or response.id in a stream's first event. One small decode per request.
func responseID(answer []byte, stream bool) string {
	if !stream {
		var r struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		}
		if json.Unmarshal(answer, &r) != nil || r.Object != "response" {
			return ""
		}
		return r.ID
	}
	for rest := answer; len(rest) > 0; { // bytes.Split's lines, without its slice of them
		line, tail, _ := bytes.Cut(rest, []byte("\n"))
		rest = tail
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
		if !ok {
			continue
		}
		var ev struct {
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if json.Unmarshal(bytes.TrimSpace(data), &ev) == nil && ev.Response.ID != "" {
			return ev.Response.ID
		}
	}
	return ""
}

// storedRoutes are the routes on one stored response, by what follows
// /v1/responses/{id}, and their methods.
var storedRoutes = map[string][]string{
	"":             {http.MethodGet, http.MethodDelete},
	"/cancel":      {http.MethodPost},
	"/input_items": {http.MethodGet},
}

// stored is the handler of /v1/responses/{id}[/cancel|/input_items]
// (rest is what follows /v1/responses/).
func (s *Server) stored(w http.ResponseWriter, r *http.Request, rest string) handler {
	id, sub, _ := strings.Cut(rest, "/")
	if sub != "" {
		sub = "/" + sub
	}
	methods, ok := storedRoutes[sub]
	if !ok || id == "" {
		return notFound
	}
	if !slices.Contains(methods, r.Method) {
		return s.methodNotAllowed(strings.Join(methods, ", "))
	}
	closeUnread(w, r) // these routes take no body
	return func(w http.ResponseWriter, r *http.Request, ex *exchange) error {
		return s.serveStored(w, r, ex, id, sub)
	}
}

// serveStored answers a stored response's route: only for the tenant that
// created the response, only at the endpoint that has it.
func (s *Server) serveStored(w http.ResponseWriter, r *http.Request, ex *exchange, id, sub string) error {
	ctx := r.Context()
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}
	// The bucket's token before the store read the caller's id causes.
	if err := s.take(ctx, w, ex, t.ID, false); err != nil {
		return err
	}
	unknown := responseNotFound(id)
	o, found, err := s.lookup(ctx, id)
	switch {
	case err != nil:
		return affinityUnavailable()
	case !found || o.Tenant != t.ID || !t.Allows(o.Model):
		return unknown
	}
	ex.model, ex.pool, ex.Endpoint = o.Model, o.Pool, o.Endpoint
	pool := s.Router.Pool(o.Model)
	target := s.targetFor(pool, o.Endpoint)
	if target == nil {
		return unknown // the endpoint left the config
	}
	// GET …?stream=true resumes a background response as a stream: relayed
	// event by event like a POST stream, bounded by the header and idle
	// timeouts rather than a whole answer's.
	stream := r.Method == http.MethodGet && sub == "" && r.URL.Query().Get("stream") == "true"
	ex.streamKnown, ex.stream, ex.op = true, stream, request.Responses
	call := &ex.call
	*call = dispatch.Call{ID: ex.id, IDHeader: ex.idHeader, Op: ex.op, W: w}
	err = s.backends.Fetch(ctx, call, &ex.Result, o.Endpoint, o.Pool, stream, func(rctx context.Context) (*http.Request, error) {
		return target.NewStoredRequest(rctx, r.Method, "/responses/"+id+sub, r.URL.RawQuery, r.Header)
	})
	defer call.Release()
	if err != nil {
		return err
	}
	if r.Method == http.MethodDelete && ex.UpstreamStatus/100 == 2 {
		dctx, dcancel := context.WithTimeout(context.Background(), affinityTimeout)
		_ = s.Affinity.Delete(dctx, id)
		dcancel()
	}
	if err := s.relay(ctx, w, http.NewResponseController(w), ex); err != nil {
		return err
	}
	if r.Method == http.MethodGet && sub == "" {
		s.settleBackground(ex, id, o)
	}
	return nil
}

// targetFor is pool's target for the endpoint named name, or nil.
func (s *Server) targetFor(pool *route.Pool, name string) *upstream.Target {
	if pool == nil {
		return nil
	}
	for _, e := range pool.Endpoints {
		if e.Name == name {
			return s.Targets[e]
		}
	}
	return nil
}

// refuseWebSocket answers a WebSocket upgrade to /v1/responses at once:
// 426 is what OpenAI's clients (Codex) take as "no WebSocket here, use
// HTTP", without retrying the upgrade.
func refuseWebSocket(w http.ResponseWriter, _ *http.Request, _ *exchange) error {
	w.Header().Set("Upgrade", "HTTP/1.1")
	w.Header().Set("Connection", "close")
	return webSocketRefused()
}

func isWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return false
}

// rememberUsage adds a recorded response's usage to its record once the
// answer is relayed: a follow-up reserves it as its stored context.
func (s *Server) rememberUsage(ex *exchange) {
	if !ex.stored.remembered || !ex.HasUsage {
		return
	}
	billed, ok := ex.Usage.Billed()
	if !ok || billed <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), affinityTimeout)
	defer cancel()
	o := affinity.Owner{Tenant: ex.tenant, Model: ex.model, Pool: ex.pool, Endpoint: ex.Endpoint, Tokens: billed}
	if err := s.Affinity.Put(ctx, ex.stored.id, o, s.ResponseTTL); err != nil {
		s.Log.Warn("response usage not recorded: a follow-up reserves no stored context", "request_id", ex.id, "err", err)
	}
}
