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
	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
)

// apiError is an error the gateway answers itself, in OpenAI's error shape:
// {"error":{"message","type","param","code"}}. This file is the one place
// statuses, types, codes, messages and Retry-After are decided: every
// answer the gateway makes itself has its constructor below, so adding an
// error or changing a code is an edit here.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, when positive, is when a retry can succeed: sent as
	// Retry-After (whole seconds, rounded up) up to retryHorizon, beyond
	// it as x-should-retry: false (retryAdvice).
	RetryAfter time.Duration
	// Bearer adds WWW-Authenticate (RFC 6750 §3) for 401s.
	Bearer bool
	// NoRetry sends x-should-retry: false on a status the SDKs would
	// otherwise retry (a 429 that no wait lets through).
	NoRetry bool
}

// retryHorizon is the longest Retry-After the gateway sends. A refusal
// whose window resets later (a daily or monthly quota) cannot succeed by
// waiting a few seconds: it says x-should-retry: false instead, which the
// OpenAI and Anthropic SDKs and Claude Code obey, so the client raises
// the error at once rather than retrying or sleeping until midnight. A
// per-minute window always resets within it. OpenAI's SDKs themselves
// ignore a Retry-After above 60 s.
const retryHorizon = 60 * time.Second

// retryAdvice is what e's headers tell a client's retry loop: a
// Retry-After (and x-should-retry: true) when a retry at that time can
// succeed; x-should-retry: false when the same request would be refused
// again however long the client waited (a wait beyond retryHorizon, a
// refusal marked NoRetry, any 4xx but 408, 409 and 429: a bad or expired
// token, a bad body, a feature the tenant lacks); nothing where the
// client's own policy decides (a 5xx, a backend's 429 without a wait).
func (e *apiError) retryAdvice() (retryAfter, shouldRetry string) {
	switch {
	case e.NoRetry || e.RetryAfter > retryHorizon:
		return "", "false"
	case e.RetryAfter > 0:
		return retryAfterSeconds(e.RetryAfter), "true"
	case e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout &&
		e.Status != http.StatusConflict && e.Status != http.StatusTooManyRequests:
		return "", "false"
	}
	return "", ""
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
func (e *apiError) write(w http.ResponseWriter) { e.writeBody(w, e.JSON()) }

// writeBody sends e's status and headers (retryAdvice's, WWW-Authenticate)
// with body, e in one API's shape.
func (e *apiError) writeBody(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.Bearer {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	retryAfter, shouldRetry := e.retryAdvice()
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	if shouldRetry != "" {
		h.Set("X-Should-Retry", shouldRetry)
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
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

// asAPIError returns err as an apiError (a billing refusal rendered by
// refusalError), or a 500 that hides the detail.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var br *billing.Refusal
	if errors.As(err, &br) {
		return refusalError(br)
	}
	var de *dispatch.Error
	if errors.As(err, &de) {
		return dispatchError(de)
	}
	return serverError(http.StatusInternalServerError, "internal_error", "the gateway failed to handle the request")
}

// refusalError renders a billing refusal (a feature or service tier the
// tenant may not use, a budget or spend limit with no room, a thinking
// budget over the output cap…; package billing words each): its Kind
// decides the status, and the type where the refusal names none.
//
// An OverBudget refusal without RetryAfter (request_too_large_for_budget)
// can never run: it says so with x-should-retry: false.
func refusalError(r *billing.Refusal) *apiError {
	e := &apiError{Type: r.Type, Code: r.Code, Param: r.Param, Message: r.Message, RetryAfter: r.RetryAfter}
	switch r.Kind {
	case billing.Invalid:
		e.Status, e.Type = http.StatusBadRequest, "invalid_request_error"
	case billing.OverBudget:
		e.Status, e.NoRetry = http.StatusTooManyRequests, r.RetryAfter <= 0
	default:
		e.Status, e.Type = http.StatusInternalServerError, "server_error"
	}
	return e
}

// dispatchError renders a failure of the conversation with the backends
// (package dispatch types it; its Kind decides the answer here).
func dispatchError(e *dispatch.Error) *apiError {
	switch e.Kind {
	case dispatch.Unavailable:
		return upstreamUnavailable(e.Pool, e.Wait)
	case dispatch.Credential:
		return credentialError(e.Pool, e.Err)
	case dispatch.Transport:
		return transportError(e.Pool, e.Err)
	case dispatch.Timeout:
		return attemptTimeout(e.Pool, e.Wait)
	case dispatch.Status:
		return statusError(e.Pool, e.Status, e.Wait, e.Hard)
	case dispatch.Canceled:
		return canceledError(e.Err, e.Deadline)
	case dispatch.AuthFailed:
		return upstreamAuthFailed(e.Pool, e.Status)
	case dispatch.BadResponse:
		return badResponse(e.Pool, e.What)
	case dispatch.Redirect:
		return badResponse(e.Pool, fmt.Sprintf("answered %d, a redirect, which the gateway never follows or relays", e.Status))
	case dispatch.FirstToken:
		return serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("pool %q: the backend sent no first token within %s", e.Pool, e.Wait))
	case dispatch.FirstIdle:
		return serverError(http.StatusGatewayTimeout, "upstream_stream_idle", fmt.Sprintf("pool %q: the backend sent nothing for %s", e.Pool, e.Wait))
	case dispatch.FirstFailed:
		return serverError(http.StatusBadGateway, "upstream_stream_error", fmt.Sprintf("pool %q: %s", e.Pool, cause(e.Err)))
	case dispatch.AnswerCut:
		return answerCut(e.Pool, e.Err)
	case dispatch.BodyIdle:
		return bodyIdle(e.Wait)
	case dispatch.BodyCut:
		return bodyCut(e.Err)
	case dispatch.Shutdown:
		return shuttingDown()
	case dispatch.StreamDeadline:
		return streamDeadline()
	case dispatch.OverCap:
		return budgetExceeded()
	case dispatch.StreamIdle:
		return streamIdle(e.Wait)
	case dispatch.StreamFailed:
		return streamFailed(cause(e.Err))
	case dispatch.StreamEnded:
		return streamEndedEarly()
	}
	return serverError(http.StatusInternalServerError, "internal_error", "the gateway failed to handle the request")
}

// answerError renders err, the error a handler returned: as the whole
// response, or, when a stream's headers already went out (a keepalive
// comment), as the stream's one error event.
func answerError(w http.ResponseWriter, ex *exchange, err error) {
	if ex.keepalive.Stop() {
		failStream(w, ex, err)
		return
	}
	fail(w, ex, err)
}

// fail answers with e unless the response has started, in which case the
// connection is aborted: a started response cannot change its status.
func fail(w http.ResponseWriter, ex *exchange, err error) {
	e := asAPIError(err)
	ex.Outcome = e.Code
	ex.Status = e.Status
	if ex.WroteHeader {
		panic(http.ErrAbortHandler)
	}
	if e.Status == 499 { // nobody is listening; write nothing
		return
	}
	ex.WroteHeader = true
	if ex.body != nil && !ex.body.done {
		// An answer before the body was read (a bad token, a body too
		// large or too slow): close rather than wait for the rest, after
		// the answer has reached the client (a lingering close).
		ex.body.closeEarly(w)
	}
	e.writeAs(w, ex)
}

// failStream ends a stream whose headers a keepalive already sent with
// one SSE error event: the status it would have had is in the error
// object, and no [DONE] follows.
func failStream(w http.ResponseWriter, ex *exchange, err error) {
	e := asAPIError(err)
	ex.Outcome, ex.Status, ex.WroteHeader = e.Code, http.StatusOK, true
	if e.Status == 499 {
		return
	}
	ev := appendStreamError(nil, ex, e, 0)
	if n, werr := w.Write(ev); werr == nil {
		ex.Bytes += int64(n)
		_ = http.NewResponseController(w).Flush()
	}
}

// writeAs sends e as the whole response in the shape of ex's API:
// Anthropic's on the Messages API's routes, else OpenAI's. Status,
// Retry-After and WWW-Authenticate are the same in both.
func (e *apiError) writeAs(w http.ResponseWriter, ex *exchange) {
	if !ex.op.Anthropic() {
		e.write(w)
		return
	}
	e.writeBody(w, e.anthropicJSON(ex.id))
}

// appendStreamError appends the event that ends a stream with e, in the
// shape its API's clients parse: a Responses stream ends with the
// Responses API's error event (event: error, with type, code, message,
// param and sequence_number, seq being the events relayed before it, as
// OpenAI numbers them from 0); a Messages stream with Anthropic's error
// event (event: error, data {"type":"error","error":{…}}); every other
// stream with data: {"error":…}.
func appendStreamError(dst []byte, ex *exchange, e *apiError, seq int64) []byte {
	if ex.op.Anthropic() {
		dst = append(dst, "event: error\n"...)
		return sse.AppendErrorEvent(dst, e.anthropicJSON(ex.id))
	}
	if ex.op.Shape() != request.ShapeResponses {
		return sse.AppendErrorEvent(dst, e.JSON())
	}
	body, _ := json.Marshal(struct {
		Type     string  `json:"type"`
		Code     string  `json:"code"`
		Message  string  `json:"message"`
		Param    *string `json:"param"`
		Sequence int64   `json:"sequence_number"`
	}{"error", e.Code, e.Message, nil, seq})
	dst = append(dst, "event: error\n"...)
	return sse.AppendErrorEvent(dst, body)
}

// anthropicType is the Messages API's error type for an HTTP status, as
// Anthropic's clients read it (their error classes follow the status).
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicError is the Messages API's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// anthropicJSON renders e in the Messages API's shape:
// {"type":"error","error":{"type":…,"message":…},"request_id":…}. The
// gateway's own code (e.Code) is in the access log's outcome.
func (e *apiError) anthropicJSON(requestID string) []byte {
	var a anthropicError
	a.Type, a.Error.Type, a.Error.Message, a.RequestID = "error", anthropicType(e.Status), e.Message, requestID
	b, _ := json.Marshal(a) // plain strings always marshal
	return b
}

// cause is the innermost message of a relay error, for the client.
func cause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
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
	return canceledError(context.Cause(ctx), errors.Is(ctx.Err(), context.DeadlineExceeded))
}

// canceledError: the request's context ended, with cause; deadline says
// its deadline passed.
func canceledError(cause error, deadline bool) *apiError {
	if errors.Is(cause, ErrShutdown) {
		return shuttingDown()
	}
	if deadline {
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

func deadlineTooNear() *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "deadline_too_near",
		"this invocation has too little time left to serve the request; retry", time.Second)
}

// unsupportedAPI: the model's pool has a kind that does not serve op (the
// gateway translates no API into another).
func unsupportedAPI(model string, op request.Operation) *apiError {
	return invalidRequest(http.StatusBadRequest, "unsupported_api", "model",
		fmt.Sprintf("model %q is served on a surface without %s", model, op.API()))
}

// bodyError maps request.ParseBody's errors to their 400s, naming the
// parameter at fault.
func bodyError(err error) *apiError {
	var ke *request.KeyError
	var ie *request.IntError
	var se *request.StringError
	switch {
	case errors.As(err, &se):
		return invalidRequest(http.StatusBadRequest, "invalid_type", se.Param, se.Error())
	case errors.As(err, &ke):
		code := "unknown_parameter"
		if ke.Duplicate {
			code = "duplicate_parameter"
		}
		return invalidRequest(http.StatusBadRequest, code, ke.Param, ke.Error())
	case errors.Is(err, request.ErrMissingModel):
		return invalidRequest(http.StatusBadRequest, "missing_required_parameter", "model", "you must provide a model parameter")
	case errors.Is(err, request.ErrModelType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "model", err.Error())
	case errors.Is(err, request.ErrStreamType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "stream", err.Error())
	case errors.Is(err, request.ErrPreviousType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "previous_response_id", err.Error())
	case errors.As(err, &ie):
		code := "invalid_type"
		if ie.BelowMin {
			code = "integer_below_min_value"
		}
		return invalidRequest(http.StatusBadRequest, code, ie.Param, ie.Error())
	case errors.Is(err, request.ErrTierType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "service_tier", err.Error())
	case errors.Is(err, request.ErrFormatType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "stream_format", err.Error())
	case errors.Is(err, request.ErrThinkingType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "thinking", err.Error())
	case errors.Is(err, request.ErrOptionsType):
		return invalidRequest(http.StatusBadRequest, "invalid_type", "stream_options", err.Error())
	}
	return invalidRequest(http.StatusBadRequest, "invalid_json", "", err.Error())
}

func emptyBody() *apiError {
	return invalidRequest(http.StatusBadRequest, "invalid_json", "", "request body is empty; send a JSON object")
}

func missingParameter(field string) *apiError {
	return invalidRequest(http.StatusBadRequest, "missing_required_parameter", field, "missing required parameter: '"+field+"'")
}

// unsupportedCap refuses an output-cap field op does not have: a backend
// may ignore it, so a budget could not trust it.
func unsupportedCap(field string, op request.Operation) *apiError {
	use := ""
	if op.HasCaps() {
		use = "; use '" + op.CapField().String() + "'"
	}
	return invalidRequest(http.StatusBadRequest, "unsupported_parameter", field,
		"Unsupported parameter: '"+field+"' is not an output cap of this endpoint"+use+".")
}

// unsupportedStream: count_tokens answers one JSON object.
func unsupportedStream(op request.Operation) *apiError {
	return invalidRequest(http.StatusBadRequest, "unsupported_parameter", "stream",
		"Unsupported parameter: 'stream' is not a parameter of "+op.API()+".")
}

// storedStateRefused: a body names stored state whose owner the gateway
// does not record (request.StoredState), which the one backend key
// would serve to any tenant that names it.
func storedStateRefused(param, msg string) *apiError {
	return invalidRequest(http.StatusBadRequest, "stored_state_not_supported", param, msg)
}

func bodyTooLarge(max int64) *apiError {
	return invalidRequest(http.StatusRequestEntityTooLarge, "request_too_large", "",
		fmt.Sprintf("request body exceeds the gateway's limit of %d bytes", max))
}

func bodyTimeout() *apiError {
	return invalidRequest(http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time")
}

func bodyReadFailed(err error) *apiError {
	return invalidRequest(http.StatusBadRequest, "invalid_body", "", "reading the request body failed: "+err.Error())
}

// Errors after a stream's first byte, sent as its one SSE error event.

func streamDeadline() *apiError {
	return serverError(http.StatusGatewayTimeout, "deadline_exceeded", "the gateway's deadline is near; the stream was ended before it completed")
}

func budgetExceeded() *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Type: "tokens", Code: "budget_exceeded",
		Message: "the backend went past the output cap of this request's token budget; the stream was ended"}
}

func streamIdle(d time.Duration) *apiError {
	return serverError(http.StatusGatewayTimeout, "upstream_stream_idle", fmt.Sprintf("the backend sent nothing for %s; the stream was ended", d))
}

func streamFailed(why string) *apiError {
	return serverError(http.StatusBadGateway, "upstream_stream_error", "the backend stream failed mid-response: "+why)
}

func streamEndedEarly() *apiError {
	return serverError(http.StatusBadGateway, "upstream_stream_error", "the backend ended the stream before it was done")
}

// A JSON answer that fails before the client got a byte.

func bodyIdle(d time.Duration) *apiError {
	return serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("the backend sent nothing for %s; the response was abandoned", d))
}

// answerCut: a JSON answer cut off before the client got a byte of it.
func answerCut(pool string, err error) *apiError {
	return serverError(http.StatusBadGateway, "upstream_bad_response", fmt.Sprintf("pool %q: the backend response was cut off: %s", pool, cause(err)))
}

func bodyCut(err error) *apiError {
	return serverError(http.StatusBadGateway, "upstream_error", "the backend response was cut off: "+err.Error())
}

func adminForbidden() *apiError {
	return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "insufficient_permissions",
		Message: "the admin route takes an operator's token carrying the admin role; a gateway key never manages keys"}
}

func adminInvalid(param, msg string) *apiError {
	return invalidRequest(http.StatusBadRequest, "invalid_value", param, msg)
}

func adminBadJSON(err error) *apiError {
	return invalidRequest(http.StatusBadRequest, "invalid_json", "", "the body must be one JSON object of the documented fields: "+err.Error())
}

func keyNotFound(id string) *apiError {
	return invalidRequest(http.StatusNotFound, "not_found", "", fmt.Sprintf("API key '%s' not found.", id))
}

func unknownURL(method, path string) *apiError {
	return invalidRequest(http.StatusNotFound, "unknown_url", "", "Unknown request URL: "+clipped(method)+" "+clipped(path)+". Please check the URL for typos.")
}

func methodNotAllowed(method, path, allow string) *apiError {
	return invalidRequest(http.StatusMethodNotAllowed, "method_not_allowed", "", "Method "+clipped(method)+" is not allowed on "+clipped(path)+"; use "+allow+".")
}

func budgetUnavailable() *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "budget_unavailable",
		"the token budget store is unavailable and this tenant's budget fails closed; retry shortly", time.Second)
}

func budgetFailed(msg string) *apiError {
	return serverError(http.StatusInternalServerError, "budget_error", msg)
}

func requestsRefused(tenantID string, limit uint64, retry time.Duration, counts bool) *apiError {
	what := "requests"
	if counts {
		what = "prompt counts (count_tokens, input_tokens)"
	}
	return &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded",
		Message:    fmt.Sprintf("Rate limit reached for tenant %q: %d %s per window. Retry after the time in Retry-After.", tenantID, limit, what),
		RetryAfter: retry}
}

// The Responses API's stored responses (responses.go).

func affinityUnavailable() *apiError {
	// Without the record the gateway cannot tell whose id it is.
	return serverErrorRetry(http.StatusServiceUnavailable, "affinity_unavailable",
		"the gateway cannot look up the stored response right now; retry shortly", time.Second)
}

func previousNotFound(id string) *apiError {
	return invalidRequest(http.StatusNotFound, "previous_response_not_found", "previous_response_id",
		fmt.Sprintf("Previous response with id '%s' not found.", id))
}

func previousElsewhere(id, createdWith, model string) *apiError {
	return invalidRequest(http.StatusBadRequest, "invalid_value", "previous_response_id",
		fmt.Sprintf("previous response '%s' was created with model %q, served elsewhere than %q; continue it with a model of the same pool", id, createdWith, model))
}

func responseNotFound(id string) *apiError {
	return invalidRequest(http.StatusNotFound, "not_found", "", fmt.Sprintf("Response with id '%s' not found.", id))
}

// webSocketRefused: 426 Upgrade Required with Upgrade: HTTP/1.1 (RFC 9110
// §15.5.22 requires the header; the protocol to use is plain HTTP).
func webSocketRefused() *apiError {
	return invalidRequest(http.StatusUpgradeRequired, "websocket_not_supported", "",
		"this gateway serves the Responses API over HTTP only: POST /v1/responses (stream: true for events)")
}

// Azure's routes (routes.go).

func apiVersionMissing() *apiError {
	return invalidRequest(http.StatusBadRequest, "missing_required_parameter", "api-version",
		"missing required query parameter 'api-version' (for example api-version=2024-10-21)")
}

func apiVersionInvalid(v string) *apiError {
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return invalidRequest(http.StatusBadRequest, "invalid_api_version", "api-version",
		"api-version '"+v+"' is not a version like 2024-10-21 or 2025-01-01-preview")
}

func headersTooLarge(max int) *apiError {
	return invalidRequest(http.StatusRequestHeaderFieldsTooLarge, "request_header_fields_too_large", "",
		fmt.Sprintf("the request's headers exceed the gateway's limit of %d bytes", max))
}

// What a caller or a neighbour can hold (package listener, proxy.go).

// shuttingDown is what a request still open when the shutdown grace is
// nearly over gets: as the answer before its first byte, or as a
// stream's error event. Another replica can serve the retry.
func shuttingDown() *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "shutdown",
		"the gateway replica is shutting down; the request was ended before it completed; retry", time.Second)
}

func notReady() *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "not_ready",
		"the gateway has not yet fetched the token issuer's signing keys; retry shortly", time.Second)
}

func tooManyConnections(max int) *apiError {
	return serverErrorRetry(http.StatusServiceUnavailable, "too_many_connections",
		fmt.Sprintf("this gateway replica holds its limit of %d open connections (max_connections); retry shortly", max), time.Second)
}

// TooManyConnections renders the whole HTTP/1.1 answer to a connection
// refused at the cap of maxConns (listener.Options.Refusal): the listener
// writes it on the bare connection, before net/http reads a request, so
// it is framed here, Connection: close.
func TooManyConnections(maxConns int) []byte {
	e := tooManyConnections(maxConns)
	body := e.JSON()
	retryAfter, shouldRetry := e.retryAdvice()
	head := "HTTP/1.1 " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + "\r\n" +
		"Content-Type: application/json\r\nRetry-After: " + retryAfter + "\r\nX-Should-Retry: " + shouldRetry + "\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}

func tooManyConcurrent(tenantID string, max int) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "too_many_concurrent_requests", RetryAfter: time.Second,
		Message: fmt.Sprintf("Too many concurrent requests for tenant %q: limit %d in flight on this gateway replica (max_concurrent_requests). Retry after the time in Retry-After.", tenantID, max)}
}
