package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/ratelimit"
)

// apiError is an error the gateway answers itself, in OpenAI's error shape:
// {"error":{"message","type","param","code"}}. It is the one place statuses
// and codes are decided.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, when positive, is sent as Retry-After (whole seconds, rounded up).
	RetryAfter time.Duration
	// Bearer adds WWW-Authenticate (RFC 6750 §3) for 401s.
	Bearer bool
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// JSON renders the error object; OpenAI sends null for an absent param/code.
func (e *apiError) JSON() []byte {
	o := errorObject{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		o.Param = &e.Param
	}
	if e.Code != "" {
		o.Code = &e.Code
	}
	b, _ := json.Marshal(errorBody{Error: o}) // plain strings always marshal
	return b
}

// write sends e as the whole response.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.Bearer {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

func invalidRequest(status int, code, param, msg string) *apiError {
	return &apiError{Status: status, Type: "invalid_request_error", Code: code, Param: param, Message: msg}
}

func serverError(status int, code, msg string) *apiError {
	return &apiError{Status: status, Type: "server_error", Code: code, Message: msg}
}

// asAPIError returns err as an apiError, or a 500 that hides the detail.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return serverError(http.StatusInternalServerError, "internal_error", "the gateway failed to handle the request")
}

func serverErrorRetry(status int, code, msg string, retry time.Duration) *apiError {
	return &apiError{Status: status, Type: "server_error", Code: code, Message: msg, RetryAfter: retry}
}

func tenantNotAllowed(tenant string) *apiError {
	return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "tenant_not_allowed",
		Message: fmt.Sprintf("tenant %q is not configured on this gateway", tenant)}
}

func modelNotFound(model string) *apiError {
	return invalidRequest(http.StatusNotFound, "model_not_found", "model",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

func authError(err error) *apiError {
	if errors.Is(err, auth.ErrKeysUnavailable) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "auth_unavailable",
			Message: "the token issuer's signing keys are unavailable; retry shortly", RetryAfter: 5 * time.Second}
	}
	if errors.Is(err, auth.ErrInsufficientPermissions) {
		return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "insufficient_permissions",
			Message: err.Error()}
	}
	return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_token",
		Message: "invalid bearer token: " + err.Error(), Bearer: true}
}

// limiterError: retry is when the store will next be tried
// (Decision.Reset with ErrUnavailable); at least a second.
func limiterError(err error, retry time.Duration) *apiError {
	if errors.Is(err, ratelimit.ErrUnavailable) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "rate_limiter_unavailable",
			Message: "the rate-limit store is unavailable and this gateway fails closed; retry shortly", RetryAfter: max(retry, time.Second)}
	}
	return serverError(http.StatusInternalServerError, "rate_limiter_error", "the rate limiter failed")
}

func credentialError(pool string, err error) *apiError {
	// err names the credential that failed, never a token; the caller is
	// told only that the gateway's credential for the pool failed.
	return serverError(http.StatusBadGateway, "upstream_credential_error",
		fmt.Sprintf("pool %q: the gateway could not obtain its backend credential; retry later", pool))
}

func transportError(pool string, err error) *apiError {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("pool %q: the backend did not answer in time", pool))
	}
	return serverError(http.StatusBadGateway, "upstream_unreachable", fmt.Sprintf("pool %q: the backend could not be reached", pool))
}

func statusError(pool string, status int, ra time.Duration, hard bool) *apiError {
	if status == http.StatusTooManyRequests {
		e := &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "upstream_rate_limited",
			Message: fmt.Sprintf("every backend of pool %q tried is rate limited", pool)}
		if hard {
			e.RetryAfter = ra
		}
		return e
	}
	return serverError(http.StatusBadGateway, "upstream_error", fmt.Sprintf("pool %q: the backend answered %d", pool, status))
}

func contextError(ctx context.Context) *apiError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return serverError(http.StatusGatewayTimeout, "deadline_exceeded", "the gateway's deadline passed before the backend answered")
	}
	return &apiError{Status: 499, Type: "invalid_request_error", Code: "client_closed_request", Message: "client closed the request"}
}

// setRateHeaders sets OpenAI's x-ratelimit-*-requests headers.
func setRateHeaders(h http.Header, d ratelimit.Decision, now time.Time) {
	h["X-Ratelimit-Limit-Requests"] = []string{strconv.FormatUint(d.Limit, 10)}
	h["X-Ratelimit-Remaining-Requests"] = []string{strconv.FormatUint(d.Remaining, 10)}
	reset := d.Reset.Sub(now)
	if reset < 0 {
		reset = 0
	}
	h["X-Ratelimit-Reset-Requests"] = []string{reset.Round(time.Millisecond).String()}
}

func upstreamUnavailable(pool string, wait time.Duration) *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "upstream_unavailable",
		fmt.Sprintf("every endpoint of pool %q asked to back off; retry later", pool), wait)
}

func attemptTimeout(pool string, timeout time.Duration) *apiError {
	return serverError(http.StatusGatewayTimeout, "upstream_timeout",
		fmt.Sprintf("pool %q: the backend did not answer within %s", pool, timeout))
}

func upstreamAuthFailed(pool string, status int) *apiError {
	return serverError(http.StatusBadGateway, "upstream_auth_failed",
		fmt.Sprintf("pool %q rejected the gateway's credentials (status %d)", pool, status))
}

func badResponse(pool, what string) *apiError {
	return serverError(http.StatusBadGateway, "upstream_bad_response", fmt.Sprintf("pool %q: the backend %s", pool, what))
}

// firstEventError: a stream's endpoint sent no first event, by why it was
// cut (the first-token or idle timeout) or how it failed.
func firstEventError(pool string, why error, wait time.Duration, err error) *apiError {
	switch {
	case errors.Is(why, errFirstToken):
		return serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("pool %q: the backend sent no first token within %s", pool, wait))
	case errors.Is(why, errStreamIdle):
		return serverError(http.StatusGatewayTimeout, "upstream_stream_idle", fmt.Sprintf("pool %q: the backend sent nothing for %s", pool, wait))
	}
	return serverError(http.StatusBadGateway, "upstream_stream_error", fmt.Sprintf("pool %q: %s", pool, cause(err)))
}

func deadlineTooNear() *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "deadline_too_near",
		"this invocation has too little time left to serve the request; retry", time.Second)
}

func unsupportedAPI(model string) *apiError {
	return invalidRequest(http.StatusBadRequest, "unsupported_api", "model",
		fmt.Sprintf("model %q is served on a surface without the Responses API", model))
}
