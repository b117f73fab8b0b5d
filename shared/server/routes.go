package server

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/upstream"
)

// methods is one path's handlers by method.
type methods map[string]http.HandlerFunc

// routeTable maps the exact paths the gateway serves to their handlers;
// the stored-response paths (/v1/responses/{id}…) and Azure's /openai/
// paths are matched by prefix before it (dispatch, ServeHTTP).
func (s *Server) routeTable() map[string]methods {
	return map[string]methods{
		"/healthz":             {http.MethodGet: s.healthz, http.MethodHead: s.healthz},
		"/v1/chat/completions": {http.MethodPost: s.proxy(upstream.ChatCompletions)},
		"/v1/completions":      {http.MethodPost: s.proxy(upstream.Completions)},
		"/v1/embeddings":       {http.MethodPost: s.proxy(upstream.Embeddings)},
		"/v1/responses":        {http.MethodPost: s.proxy(upstream.Responses)},
		// Anthropic's Messages API (messages.go).
		"/v1/messages":              {http.MethodPost: s.messages(upstream.Messages)},
		"/v1/messages/count_tokens": {http.MethodPost: s.messages(upstream.CountTokens)},
		"/v1/models":                {http.MethodGet: s.listModels},
	}
}

// ServeHTTP dispatches by exact path, so unknown paths (404) and wrong
// methods (405) get OpenAI's error JSON rather than ServeMux's plain text.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every response carries the gateway's own request id; a caller-supplied
	// one is never trusted into the log.
	w.Header()["X-Request-Id"] = []string{newRequestID()}
	s.boundBody(w, r)
	if s.MaxHeaderBytes > 0 && headerBytes(r) > s.MaxHeaderBytes {
		s.headersTooLarge(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/openai/") {
		s.serveAzure(w, r)
		return
	}
	s.dispatch(w, r, r.URL.Path)
}

// dispatch serves path (the request's own, or the OpenAI path an Azure
// v1 route stands for).
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, path string) {
	if rest, ok := strings.CutPrefix(path, "/v1/responses/"); ok {
		s.serveStored(w, r, rest)
		return
	}
	if path == "/v1/responses" && isWebSocket(r) {
		s.refuseWebSocket(w, r)
		return
	}
	rt, ok := s.routes[path]
	if !ok && len(path) > len("/v1/models/") && path[:len("/v1/models/")] == "/v1/models/" {
		id := path[len("/v1/models/"):]
		rt, ok = methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) { s.getModel(w, r, id) }}, true
	}
	if !ok {
		s.notFound(w, r)
		return
	}
	h, ok := rt[r.Method]
	if !ok {
		allowed := make([]string, 0, len(rt))
		for m := range rt {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		s.methodNotAllowed(w, r, strings.Join(allowed, ", "))
		return
	}
	if r.Method != http.MethodPost {
		closeUnread(w, r) // only the proxied POSTs read a body
	}
	h(w, r)
}

// headerBytes is about what the request line and headers took on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// headersTooLarge answers 431 with its access-log line. net/http's own
// bound (twice max_header_bytes, see run.go) answers larger blocks before
// any handler, unlogged; this check keeps the configured limit exact and
// logged.
func (s *Server) headersTooLarge(w http.ResponseWriter, r *http.Request) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	w.Header()["Connection"] = []string{"close"}
	s.fail(w, rec, headersTooLarge(s.MaxHeaderBytes))
}

// notFound answers a path the gateway does not serve, with its access-log
// line: a misconfigured client is what an operator needs to find.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	closeUnread(w, r)
	s.fail(w, rec, unknownURL(r.Method, r.URL.Path))
}

// methodNotAllowed answers a wrong method, listing the allowed ones.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	w.Header().Set("Allow", allow)
	closeUnread(w, r)
	s.fail(w, rec, methodNotAllowed(r.Method, r.URL.Path, allow))
}

// boundBody bounds the reading of a request's body from the moment its
// headers are in, before authentication, so that a caller without a token
// cannot hold a connection by announcing a body and going silent (every
// connection is bounded from its first byte). http.Server bounds the
// rest: ReadHeaderTimeout, IdleTimeout, MaxHeaderBytes.
//
// The read deadline is BodyReadTimeout from now. It also bounds what
// net/http does after the handler returns with a body unread: it reads up
// to 256 KiB more to reuse the connection, and without a deadline a silent
// client kept that read, and so the answer, waiting forever. A handler that
// reads the whole body clears the deadline (proxy.go), since a later read
// error would cancel the request's context and cut a long stream.
//
// A request without a body gets no deadline: nothing is read until it is
// done, and net/http's own background read must not time out under a slow
// handler. On Lambda there is no connection: SetReadDeadline reports
// http.ErrNotSupported, and nothing else here applies.
//
// A chunked request is answered with Connection: close: net/http accepts
// Transfer-Encoding together with Content-Length (it drops the latter, and
// the handler cannot tell), and RFC 9112 §6.1 then requires the server to
// close the connection after responding, against request smuggling.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	if http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.BodyReadTimeout)) != nil {
		return
	}
	if r.ContentLength < 0 {
		w.Header()["Connection"] = []string{"close"}
	}
	r.Body = &watchedBody{ReadCloser: r.Body, conn: connOf(r)}
}

// watchedBody notes whether a request body was read to its end, so that an
// early answer can close a connection whose body is still unread instead of
// letting net/http wait for it.
type watchedBody struct {
	io.ReadCloser
	done bool
	conn *conn // nil: not through a Listener (tests, Lambda)
}

// closeEarly ends the connection after an answer given while the body is
// still unread: Connection: close, and a lingering close (listener.go), so
// that a client still sending reads the answer instead of a reset.
func (b *watchedBody) closeEarly(h http.Header) {
	h["Connection"] = []string{"close"}
	if b.conn != nil {
		b.conn.linger.Store(true)
	}
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

// closeUnread marks the response Connection: close when the request's body
// (on a connection boundBody bounded) has not been read to its end: the
// client may still be sending it, or may never, and the bytes that follow
// cannot be trusted to start the next request.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if b, ok := r.Body.(*watchedBody); ok && !b.done {
		b.closeEarly(w.Header())
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}
