package server

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/ratelimit"
)

// TestTooManyConnections: the refusal the listener writes at the cap is
// the too_many_connections error of errors.go, framed as a whole
// HTTP/1.1 answer byte for byte as the listener wrote it when it rendered
// the answer itself, and read back by an HTTP client as that error.
func TestTooManyConnections(t *testing.T) {
	const want = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nX-Should-Retry: true\r\nConnection: close\r\nContent-Length: 183\r\n\r\n" +
		`{"error":{"message":"this gateway replica holds its limit of 4096 open connections (max_connections); retry shortly","type":"server_error","param":null,"code":"too_many_connections"}}`
	got := TooManyConnections(4096)
	if string(got) != want {
		t.Fatalf("refusal:\n%q\nwant\n%q", got, want)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.ContentLength != int64(len(tooManyConnections(4096).JSON())) {
		t.Fatalf("read back: %d, close %v, length %d", resp.StatusCode, resp.Close, resp.ContentLength)
	}
}

// TestRetryAdvice: every refusal the gateway writes tells a client's
// retry loop whether to retry: Retry-After and x-should-retry: true only
// where a retry at that time can succeed (within a minute),
// x-should-retry: false and no Retry-After where the same request is
// refused again however long the client waits (a daily or monthly
// window, a request too large for its budget, a bad or expired token, a
// bad body), neither where the client's own policy decides (a 5xx, a
// backend's 429 with no wait).
func TestRetryAdvice(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	win := func(reset time.Duration) budget.Window {
		return budget.Window{Limit: 1000, Used: 900, Remaining: 100, Reset: now.Add(reset)}
	}
	refused := func(d budget.Decision) *apiError { return refusalError(billing.Refuse("t", d, now, "USD")) }
	minute, day, month := 30*time.Second, 11*time.Hour, 20*24*time.Hour
	for _, c := range []struct {
		name        string
		e           *apiError
		status      int
		retryAfter  string
		shouldRetry string
	}{
		// Budgets and spend limits (package billing's refusals).
		{"tokens per minute", refused(budget.Decision{RefusedBy: budget.LimitTPM, Requested: 500, TPM: win(minute)}), 429, "30", "true"},
		{"token quota, a day", refused(budget.Decision{RefusedBy: budget.LimitQuota, Requested: 500, Quota: win(day)}), 429, "", "false"},
		{"token quota, a month", refused(budget.Decision{RefusedBy: budget.LimitQuota, Requested: 500, Quota: win(month)}), 429, "", "false"},
		{"token quota, resetting within the minute", refused(budget.Decision{RefusedBy: budget.LimitQuota, Requested: 500, Quota: win(minute)}), 429, "30", "true"},
		{"token quota, resetting just past the horizon", refused(budget.Decision{RefusedBy: budget.LimitQuota, Requested: 500, Quota: win(retryHorizon + time.Second)}), 429, "", "false"},
		{"too large for tokens per minute", refused(budget.Decision{RefusedBy: budget.LimitTPM, Requested: 5000, TPM: win(minute)}), 429, "", "false"},
		{"too large for the quota", refused(budget.Decision{RefusedBy: budget.LimitQuota, Requested: 5000, Quota: win(day)}), 429, "", "false"},
		{"spend per minute", refused(budget.Decision{RefusedBy: budget.LimitSpendMinute, MoneyRequested: 500, Spend: [3]budget.Window{win(minute)}}), 429, "30", "true"},
		{"spend per day", refused(budget.Decision{RefusedBy: budget.LimitSpendDay, MoneyRequested: 500, Spend: [3]budget.Window{{}, win(day)}}), 429, "", "false"},
		{"spend per month", refused(budget.Decision{RefusedBy: budget.LimitSpendMonth, MoneyRequested: 500, Spend: [3]budget.Window{{}, {}, win(month)}}), 429, "", "false"},
		{"too large for spend", refused(budget.Decision{RefusedBy: budget.LimitSpendMonth, MoneyRequested: 5000, Spend: [3]budget.Window{{}, {}, win(month)}}), 429, "", "false"},
		{"a feature the tenant lacks", refusalError(&billing.Refusal{Kind: billing.Invalid, Code: "feature_not_enabled"}), 400, "", "false"},
		{"billing cannot decide", refusalError(&billing.Refusal{Kind: billing.Failed, Code: "budget_error"}), 500, "", ""},
		// Tokens and keys.
		{"expired token", authError(errors.New("token is expired")), 401, "", "false"},
		{"expired key", authError(keys.ErrExpired), 401, "", "false"},
		{"invalid token", authError(errors.New("signature is invalid")), 401, "", "false"},
		{"signing keys unavailable", authError(auth.ErrKeysUnavailable), 503, "5", "true"},
		{"insufficient permissions", authError(auth.ErrInsufficientPermissions), 403, "", "false"},
		{"tenant not allowed", tenantNotAllowed("x"), 403, "", "false"},
		// Rate limits and capacity.
		{"requests per window", requestsRefused("t", 5, 7*time.Second, false), 429, "7", "true"},
		{"requests per hour", requestsRefused("t", 5, 40*time.Minute, false), 429, "", "false"},
		{"too many concurrent", tooManyConcurrent("t", 4), 429, "1", "true"},
		{"rate limiter down", limiterError(ratelimit.ErrUnavailable, 3*time.Second), 503, "3", "true"},
		{"budget store down", budgetUnavailable(), 503, "1", "true"},
		{"backend rate limited, hard", statusError("p", 429, 2*time.Second, true), 429, "2", "true"},
		{"backend rate limited, soft", statusError("p", 429, 0, false), 429, "", ""},
		{"backends back off", upstreamUnavailable("p", 4*time.Second), 503, "4", "true"},
		{"shutting down", shuttingDown(), 503, "1", "true"},
		{"not ready", notReady(), 503, "1", "true"},
		{"deadline too near", deadlineTooNear(), 503, "1", "true"},
		{"affinity unavailable", affinityUnavailable(), 503, "1", "true"},
		// Bad requests.
		{"unknown model", modelNotFound("m"), 404, "", "false"},
		{"bad body", bodyError(errors.New("bad")), 400, "", "false"},
		{"body too large", bodyTooLarge(10), 413, "", "false"},
		{"body too slow", bodyTimeout(), 408, "", ""},
		{"unknown URL", unknownURL("GET", "/x"), 404, "", "false"},
		{"websocket", webSocketRefused(), 426, "", "false"},
		// The backends.
		{"backend error", statusError("p", 500, 0, false), 502, "", ""},
		{"backend timeout", attemptTimeout("p", time.Second), 504, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, anthropic := range []bool{false, true} {
				rec := httptest.NewRecorder()
				if anthropic {
					c.e.writeBody(rec, c.e.anthropicJSON("req"))
				} else {
					c.e.write(rec)
				}
				h := rec.Result().Header
				if rec.Code != c.status || h.Get("Retry-After") != c.retryAfter || h.Get("X-Should-Retry") != c.shouldRetry {
					t.Fatalf("%s (anthropic %v): %d, Retry-After %q, X-Should-Retry %q; want %d, %q, %q",
						c.e.Code, anthropic, rec.Code, h.Get("Retry-After"), h.Get("X-Should-Retry"), c.status, c.retryAfter, c.shouldRetry)
				}
			}
		})
	}
}
