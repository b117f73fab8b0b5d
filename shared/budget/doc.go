// Package budget owns per-tenant token budgets: tokens per minute and a
// token quota per UTC day or month, both counting prompt plus completion
// tokens, and an optional cap on each request's output. In strict mode (the
// default) a budget is never overshot, across replicas and scale to zero,
// as long as backends honour the output cap written into the request.
//
// # The request path
//
//	b := prompt.Scanner{}.Bound(body, op.Prompt()) // byte scan, no allocation
//	ask := budget.Ask{PromptBound: b.Tokens, Unbounded: b.Unbounded}
//	ask.ClientCap, ask.Choices = ... // from the request's decoded caps and n
//	d, err := ledger.Reserve(ctx, tenant, requestID, ask) // one atomic store op
//	// err: ErrUnavailable → 503; !d.Allowed → 429 with d.RefusedBy.Code()
//	// d.RewriteCap → write d.OutputCap into the body's output cap fields
//	... forward, relay, count usage ...
//	ledger.Settle(ctx, tenant, requestID, usage.PromptTokens+usage.CompletionTokens)
//	// or ledger.Keep(ctx, tenant, requestID) when no usage was reported
//
// # Strict reservations
//
// Before forwarding, Reserve asks the store for one atomic grant g with
// Min = promptBound + n*MinOutputTokens and Want = promptBound + n*output,
// where n is the number of choices and output the client's cap (or
// DefaultOutputTokens when it sent none), never above the tenant's
// MaxOutputTokens. The store grants g = min(Want, left), where left is what
// remains in the tightest configured limit, or refuses when left < Min.
// The caller writes OutputCap = (g-promptBound)/n into the request, so the
// tokens the backend can count are at most g. The reservation is thus an
// upper bound of the request's usage, and the sum of reservations never
// exceeds a limit: the budget is not overshot. When the request ends,
// Settle charges the actual usage: it refunds g-actual, exactly once per
// request id. A backend that ignores the cap is charged its actual usage
// anyway (the overrun), and that is the one way a strict budget can be
// exceeded. Prompts that reference content the body does not hold (files,
// stored responses, hosted tools: Ask.Unbounded) are another: their hidden
// part is only charged when they settle.
//
// # The prompt bound
//
// Package prompt's Scanner.Bound bounds the prompt tokens from the body alone: every token of
// the byte-level BPE and byte-fallback tokenizers in use covers at least
// one byte, so a text of L UTF-8 bytes is at most L tokens; the bound is
// the unescaped UTF-8 bytes of the prompt's strings plus allowances for
// what chat templates add (4 per object, 1 per string, 32 per request) and
// a fixed charge per image. See prompt.Scanner.Bound for the proof and its
// premises.
// On realistic requests it is 3 to 7 times the true count (English text is
// about 4 bytes per token; short requests are dominated by the
// allowances): that is the price of strict mode. The slack is reserved
// only while a request runs; Settle returns it, and later requests reuse
// it, so a drained budget is used to within about one request's bound
// (the package tests drain 40 concurrent streams to over 99%).
//
// # Estimate mode
//
// With Mode "estimate" nothing is reserved: Reserve refuses only a tenant
// already at or over a limit, and Settle charges the usage after the fact.
// The overshoot is at most the usage of the requests in flight when the
// limit was reached (each of them was admitted while something was left).
//
// # Windows
//
// Tokens per minute is a fixed window per UTC calendar minute: at most
// TokensPerMinute tokens are charged to any one minute. A request's tokens
// all count in the minute it was reserved in, however long it streams. A
// fixed window admits up to twice the limit across a minute boundary (the
// end of one minute and the start of the next); what it guarantees exactly
// is the per-minute sum, and it needs one counter per tenant instead of a
// bucket per request. The quota's window is the UTC day (resets at 00:00
// UTC) or the UTC calendar month (resets at 00:00 UTC on the first).
// Windows never move backwards: a store clock stepped back stays in the
// latest window.
//
// How settles meet window boundaries: a refund goes back to the window the
// reservation was taken from while that window is current; once it has
// ended the refund is dropped (nobody can reserve in an ended window, so it
// would change nothing). An overrun, or a late settle after the lease ran
// out, is charged to the window of the reservation while it is current and
// otherwise to the current window, so no counted token is lost.
//
// # Leases
//
// A reservation lives for Lease (set it to the longest a request may live,
// default 15 minutes). A reservation never settled (a replica killed
// mid-stream, a store down when the request ended) expires then: it stays
// charged, never refunded, because the request may have used all of it
// (refunding at the lease end once let streams in flight when
// Redis died go unpaid), and it becomes an expiry record for one more
// lease. A settle that arrives after the expiry (the server replays the
// ones that failed) finds the record and settles the actual usage as a
// live one, once; nothing is refunded or counted twice. In estimate mode
// a reservation holds nothing, so a settle that never lands charges
// nothing. After that second
// lease the record is gone and a settle is a no-op (Settlement.Found
// false). Expiry is lazy: every Reserve and Settle of a tenant first
// sweeps its expired records (at most 1,000 per Redis call), so no
// background process is needed and an idle tenant costs nothing.
//
// A settle that finds no record leaves a tombstone of the id for one lease
// (Charge.Lease): a reservation of that id reaching the store later (one
// the gateway gave up on and released) reserves nothing
// (Decision.Released). A settle that finds no record in a counter made
// after its reservation (Charge.ReservedAt, the store's time of it), less
// than two leases after it, is one whose record the store lost with its
// data (Settlement.Lost): the ledger charges its usage to the counter.
//
// Settles a remote store did not confirm are replayed when it answers
// again; at shutdown Ledger.Drain replays the rest within the grace and
// logs each one it cannot as a line to reconcile.
//
// # Stores and atomicity
//
// A Store is the memory store (one process: every replica has its own
// budget) or the Redis store in package redisbudget (every replica shares
// one). Both run the same algorithm; the conformance tests of package
// budgettest hold them to it on a fake clock. Reserve and Settle are each
// one atomic operation: a per-tenant mutex in memory, one Lua script (one
// EVALSHA round trip) in Redis, so 50 concurrent settles of one id refund
// once and concurrent reservations never exceed a limit. Redis scripts take
// time from Redis TIME, not the replica's clock.
//
// Redis keys, per tenant, share the hash tag {prefix+tenant}, so Redis
// Cluster keeps a tenant in one slot: {prefix+tenant}:w (a hash of the
// current minute and quota windows and their counters), :r (a hash of
// request id → reservation or expiry record) and :d (a sorted set of
// deadlines, the sweep queue). Each has a TTL: the windows until the later
// window ends, the records until every lease and window they refer to has
// ended.
//
// # Store failures
//
// Each Reserve on a remote store is bounded by Timeout (default DefaultTimeout).
// When the store fails or times out, FailurePolicy decides: "open" (the
// default) forwards the request uncounted with its output still capped
// (Decision.Degraded), "closed" refuses it with ErrUnavailable. A tenant
// with a TokenQuota always fails closed: a quota is spend. Settle runs
// detached from the request's cancellation (a client that hung up must
// still be settled) with its own SettleTimeout; a settle that fails leaves
// the reservation to its lease.
package budget
