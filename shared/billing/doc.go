// Package billing decides what a request costs a tenant and what it may
// use: the gateway's billing policy as plain values and functions, so
// each rule is table-tested without a server (package server speaks
// HTTP, the budget store keeps the accounts).
//
// It owns, in the order the request path calls them:
//
//   - Features and Betas: the server-side features (web search, fetch,
//     code execution…) and Anthropic-Beta values a tenant may use under
//     the one backend account every tenant shares, and the priced uses of
//     those it may (Priced).
//   - CheckTier: the service tiers a tenant may ask for (TierAsk).
//   - Plan: the reservation a request asks of its tenant's budget
//     (budget.Ask): its prompt bound, choices, least output (a thinking
//     budget, an API's smallest cap), its features' priced uses, a
//     continued response's stored context, and its price at the tiers it
//     may be served at; Recount says when the pool's exact count of the
//     prompt may pass where its bound was refused.
//   - NewReservation: what the store granted, kept for the request's end
//     (Reservation, with the output cap to write and the relay's bound on
//     token events).
//   - Reservation.Settle: what a request is charged from what was observed
//     at its end (the backend's usage, a cut stream, a stream stopped
//     mid-answer by a client gone, a shutdown or a backend that died, an
//     attempt that never reached a backend), with the reason when the
//     backend's usage could not be the bill; Background the same for a
//     background response retrieved later.
//   - Refuse and the Refusal type: every refusal above as a typed error
//     carrying its code, param, message and Kind, which server maps to an
//     HTTP status and renders in OpenAI's or Anthropic's shape in one
//     place (server/errors.go).
//
// It does no I/O and reads no clock: the caller passes the time, makes
// the store's calls and writes the headers. It reads the backend's bill
// as Usage, not the relay's own type, so nothing of the stream path is a
// dependency of the policy.
package billing
