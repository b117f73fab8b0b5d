// Package dispatch owns the gateway's conversation with its backends:
// failover over a pool's endpoints before the first event (Send), one
// attempt at one endpoint, the round trip every backend call makes (a
// stored response's too: Fetch), the checks of an answer before the
// client gets a byte of it (a stream that is not SSE, an encoding the
// gateway cannot read, a JSON answer that is not JSON, a redirect), a
// stream's first event awaited before its endpoint is committed, and
// the relay (Relay): SSE event by event with one write and flush each,
// or a JSON answer as sent, cut when the backend goes silent; and the
// gateway's own call for a prompt's exact input-token count (Count).
//
// It is its own package so that the transport is tested without an HTTP
// server, and so that the request path (package server) reads as the
// steps it takes: server speaks HTTP, billing decides what a request may
// cost, dispatch talks to the backends.
//
// What it does not do: it writes nothing of billing, and reads none of
// it. The caller passes what billing decided as plain values on the
// Call (the output cap to write into the request, the bound on a
// stream's token events, the choices reserved for), and settles from
// the Result the conversation leaves (what was relayed, the usage
// observed, whether a backend may have spent tokens, whether the stream
// was cut at its reservation). It words no error: a failure is an
// *Error of a Kind, which the caller maps to a status and renders in its
// API's shape (a stream's one error event included). It writes no access
// log and records no stored response: Hooks tell the caller each
// attempt's telemetry and a created response's id.
//
// The Call and the Result live in the caller's pooled request state, and
// the hooks are an interface over a pointer into it: a request allocates
// nothing here beyond what the backend round trip needs, and a relayed
// event nothing at all.
package dispatch
