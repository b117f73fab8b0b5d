package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind is what went wrong in a conversation with the backends. The
// caller maps each kind to its status, code and message (server's
// errors.go, the one place the gateway's answers are worded).
type Kind int

// The kinds before the client got a byte (Send, Fetch, a JSON relay's
// head), then after a stream's first byte (the stream's one error event).
const (
	// Unavailable: every endpoint of the pool is cooling down (Wait: the
	// soonest back).
	Unavailable Kind = iota + 1
	// Credential: the gateway could not obtain its backend credential (Err).
	Credential
	// Transport: the backend could not be reached (Err).
	Transport
	// Timeout: the backend did not answer within Wait.
	Timeout
	// Status: the backend answered 429 or 5xx (Status); Wait is the pause
	// it asked for, Hard that it asked for one.
	Status
	// Canceled: the request's context ended (Err its cause; Deadline:
	// its deadline passed).
	Canceled
	// AuthFailed: the backend refused the gateway's credentials (Status).
	AuthFailed
	// BadResponse: a success the gateway cannot relay (What says why).
	BadResponse
	// Redirect: the backend answered a 3xx (Status).
	Redirect
	// FirstToken: a stream's endpoint sent no first event within Wait.
	FirstToken
	// FirstIdle: a stream's endpoint sent nothing for Wait.
	FirstIdle
	// FirstFailed: a stream's endpoint failed before its first event (Err).
	FirstFailed
	// AnswerCut: a JSON answer was cut before the client got a byte (Err).
	AnswerCut
	// BodyIdle: a JSON answer's backend sent nothing for Wait, before
	// the client got a byte.
	BodyIdle
	// BodyCut: a JSON answer's body failed before the client got a byte
	// (Err).
	BodyCut

	// Shutdown: the replica is shutting down.
	Shutdown
	// StreamDeadline: the request's deadline ended the stream.
	StreamDeadline
	// OverCap: the backend went past the output cap (Call.MaxTokenEvents).
	OverCap
	// StreamIdle: the backend sent nothing for Wait mid-stream.
	StreamIdle
	// StreamFailed: reading the backend's stream failed (Err).
	StreamFailed
	// StreamEnded: the backend ended the stream before it was done.
	StreamEnded
)

// Error is a failure of the conversation, typed for the caller to map.
type Error struct {
	Kind   Kind
	Pool   string // "" after the first byte
	Status int    // the backend's status (Status, AuthFailed, Redirect)
	Wait   time.Duration
	Hard   bool
	What   string // BadResponse
	Err    error
	// Deadline: a Canceled request's deadline passed.
	Deadline bool
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("dispatch: failure %d of pool %q", e.Kind, e.Pool)
	switch {
	case e.What != "":
		msg += ": " + e.What
	case e.Err != nil:
		msg += ": " + e.Err.Error()
	case e.Status != 0:
		msg += fmt.Sprintf(": status %d", e.Status)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ErrAborted: a JSON answer failed after the client got its first bytes;
// the caller aborts the response, so a cut body cannot look complete.
var ErrAborted = errors.New("dispatch: answer cut after the client got its first bytes")

// Causes a backend call is cancelled with, which the failures tell apart.
var (
	// errAttemptTimeout ends an attempt whose answer did not begin in
	// time: a stream's headers (HeaderTimeout) or a whole JSON answer
	// (ResponseTimeout).
	errAttemptTimeout = errors.New("backend attempt timeout")
	errStreamIdle     = errors.New("backend stream idle")
	errFirstToken     = errors.New("backend first-token timeout")
)

func canceled(ctx context.Context) *Error {
	return &Error{Kind: Canceled, Err: context.Cause(ctx), Deadline: errors.Is(ctx.Err(), context.DeadlineExceeded)}
}
