package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
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
