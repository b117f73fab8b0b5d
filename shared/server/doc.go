// Package server owns the gateway's HTTP surface: its routes, the request
// path, OpenAI's and Anthropic's error JSON, and the access log. Each step of
// the path is a call into the package that owns it; the interfaces those
// steps satisfy (Authenticator, Limiter, Budgets, Affinity, Doer) are
// declared here, where they are used. The conversation with the backends
// (failover, the round trip, the answer's checks, the relay) is package
// dispatch's: server hands it a dispatch.Call with what the path decided,
// and reads the dispatch.Result it leaves, which the access log embeds.
//
// The whole path reads top to bottom in proxy.go (serveProxy: authenticate,
// tenant, admit, read, resolve, features, tier, take, reserve, dispatch
// and relay, settle; each step is a call into the package, or the file,
// that owns it, and returns an error rather than answering it). The
// settle is deferred right after the reservation, so it runs once on
// every ending, and answers the client before the store's round trip.
// The files:
//
//   - request.go is the one wrapper every route goes through, the Caddy and
//     httputil shape (ServeHTTP → serve: the request id, the body's time
//     bound, recovery, the access log, and the one rendering of the error a
//     handler returns), and keeps a request's state (exchange), grouped
//     by owner: the log entry (logEntry, with dispatch.Result), billing's
//     (billing.Request, billing.Reservation), dispatch's (dispatch.Call),
//     the stored response's (responses.go), the telemetry's
//     (telemetry.go), and the HTTP side's own.
//   - errors.go is the one place statuses, codes, messages and Retry-After
//     are decided and rendered, in OpenAI's and Anthropic's shapes, as a
//     body or as a stream's error event (every error the gateway answers
//     has its constructor there).
//   - routes.go: the route table, the Azure and Messages front doors and
//     the models routes; body.go reads the client's body.
//   - proxy.go also makes the request's dispatch.Call (call: the pool,
//     the body, billing's output cap and token-event bound as plain
//     values) and relays its answer (relay: a stream's failure becomes its
//     one error event, worded in errors.go, and a JSON answer cut after its
//     first bytes aborts the response). dispatch.Error's kinds map to
//     statuses in errors.go (dispatchError); telemetry.go's hooks are what
//     dispatch tells the server as it goes (attempt spans, a created
//     response's owner).
//   - budget.go makes billing's store calls (reserve, settle), writes the
//     x-ratelimit-*-tokens and -spend headers and logs what billing
//     decided; package billing decides (the features and service tiers a
//     tenant may use, what a request reserves, what it is charged) and
//     returns typed refusals, which errors.go renders (refusalError); the
//     settle reads dispatch's Result (billing.Observed).
//     The pool's exact count of a prompt whose bound is refused is
//     dispatch's call (Count). spend.go answers the spend view.
//     responses.go: the stored-response routes
//     (their one round trip is dispatch's Fetch) and affinity.
//   - The HTTP host's client connections are package listener's
//     (shared/server/listener): the cap and its idle eviction, the pending
//     share, the refusal at the cap and the lingering close. It wraps a
//     net.Listener and holds no handler logic, so it stands apart, with its
//     own tests, and the connections' next rules grow there. server meets
//     it twice: TooManyConnections (errors.go) renders the refusal it
//     writes, so that every error is worded here, and boundBody's early
//     answer asks for the lingering close (listener.Linger) through the
//     request's context.
//   - telemetry.go: the calls into the optional OpenTelemetry exporter.
//
// Where the next operations go. Every operation is a row of package
// request's table, and the steps above read the row. A multipart upload
// (audio transcription and translation) would give its row a body kind,
// JSON or multipart, with the reader for it: read and resolve take the
// model and the few fields the gateway decides on from the form's fields,
// never buffering the file twice; billing's Plan reads the fields it
// prices (the model, the file's duration or size bound); dispatch relays
// the body as read, boundary and all. A WebSocket session (the Responses
// API over a WebSocket, as Codex asks for it) would be a row whose answer
// is a session, not a
// request and its response: the same steps up to the reservation, then
// dispatch relays frames both ways for the session's life, with the
// settle at its end from the usage its events report. Today a WebSocket
// upgrade is refused before the route table's handler is picked (route,
// then responses.go's refuseWebSocket: 426, so a client falls back to
// HTTP).
//
// go run ./scripts/filepairs -tags lambda.norpc ./shared/server counts the
// pairs of these files that reference each other.
package server
