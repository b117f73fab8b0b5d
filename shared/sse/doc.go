// Package sse relays an upstream Server-Sent-Events stream to a client on
// the gateway's hot path.
//
// The relay cuts the byte stream into events exactly as the WHATWG
// "event stream interpretation" does (lines end with CRLF, LF or CR; an
// event ends at an empty line), writes every complete event to the client
// byte for byte and flushes once per upstream read, so a token reaches the
// client as soon as its event is complete. While doing so it counts the
// OpenAI usage object and notices data: [DONE], with a byte scan instead of
// a JSON decode, and without allocating per event.
//
// See https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
package sse
