package stub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader is the request header that injects a fault into one request,
// in the syntax ParseFault reads. A gateway whose pool lists it in
// forward_headers passes it on, so end-to-end tests can steer a single
// attempt without touching the stub.
const FaultHeader = "X-Stub-Fault"

// AfterHeaders, as Fault.DropAfter, Fault.ErrorAfter or Fault.StallAfter,
// triggers the fault right after the response headers, before any event.
// (Zero cannot mean that: the zero Fault is the healthy backend.)
const AfterHeaders = -1

// ErrBadFault is wrapped by every error ParseFault returns.
var ErrBadFault = errors.New("stub: bad fault")

// Fault describes how the stub misbehaves. The zero Fault is a healthy
// backend. When several fields are set they apply in this order: Close,
// Hang, SlowHeaders, Status, then the first of DropAfter, ErrorAfter and
// StallAfter that the stream reaches.
//
// The event counts N of DropAfter, ErrorAfter and StallAfter count the
// SSE events written before the fault: a chat stream's first event is the
// role chunk, the next ones are tokens (with n choices, every choice's
// role chunk, then each token position for every choice); a Responses
// stream's are response.created, response.in_progress, then the message's
// opening events and the deltas (see respStream). A count at or past the stream's end
// never triggers. On a non-streaming answer DropAfter and StallAfter cut
// the JSON body in half instead, and ErrorAfter does nothing.
type Fault struct {
	// Status, when non-zero (400–599), answers with that status and an
	// OpenAI error JSON body instead of a completion.
	Status int
	// RetryAfter, when positive, is sent as Retry-After (whole seconds,
	// rounded up) with Status.
	RetryAfter time.Duration
	// Hang holds the request before any header until the client goes away
	// (or Server.Close): the header-timeout failover case.
	Hang bool
	// Close hijacks the connection and resets it before any response
	// byte: to the client it is a connect-level failure.
	Close bool
	// SlowHeaders delays the response headers; the stream's TTFT and
	// Interval are counted from when the headers go out.
	SlowHeaders time.Duration
	// DropAfter, when positive, streams that many events and then aborts
	// the connection, so the client reads io.ErrUnexpectedEOF.
	DropAfter int
	// ErrorAfter, when positive, streams that many events, then an SSE
	// error event (`data: {"error":{...}}`), and ends without [DONE]; a
	// Responses stream gets OpenAI's `event: error` instead.
	ErrorAfter int
	// StallAfter, when positive, streams that many events and then goes
	// silent, with the connection open, until the client goes away: the
	// idle-timeout case.
	StallAfter int
	// Times, when positive, limits a fault set with Server.SetFault to the
	// next Times requests; the stub is healthy again after them. Zero
	// means every request until the next SetFault. It has no header form.
	Times int
}

// ParseFault reads the FaultHeader syntax: comma-separated items, each a
// bare word or key=value, e.g. "status=429,retry_after=2" or
// "slow_headers=200ms,drop_after=5". Items:
//
//	status=N          Fault.Status (400–599)
//	retry_after=D     Fault.RetryAfter: whole seconds ("2") or a Go duration ("1500ms")
//	hang              Fault.Hang
//	close             Fault.Close
//	slow_headers=D    Fault.SlowHeaders, a Go duration
//	drop_after=N      Fault.DropAfter; 0 means AfterHeaders
//	error_after=N     Fault.ErrorAfter; 0 means AfterHeaders
//	stall_after=N     Fault.StallAfter; 0 means AfterHeaders
//
// An empty string is the zero Fault. Every error wraps ErrBadFault.
func ParseFault(s string) (Fault, error) {
	var f Fault
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, hasVal := strings.Cut(item, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		var err error
		switch key {
		case "hang", "close":
			if hasVal {
				return Fault{}, fmt.Errorf("%w: %q takes no value", ErrBadFault, key)
			}
			if key == "hang" {
				f.Hang = true
			} else {
				f.Close = true
			}
			continue
		case "status":
			f.Status, err = strconv.Atoi(val)
			if err == nil && (f.Status < 400 || f.Status > 599) {
				err = errors.New("want 400-599")
			}
		case "retry_after":
			f.RetryAfter, err = parseSeconds(val)
		case "slow_headers":
			f.SlowHeaders, err = parseDuration(val)
		case "drop_after":
			f.DropAfter, err = parseCount(val)
		case "error_after":
			f.ErrorAfter, err = parseCount(val)
		case "stall_after":
			f.StallAfter, err = parseCount(val)
		default:
			return Fault{}, fmt.Errorf("%w: unknown item %q", ErrBadFault, key)
		}
		if !hasVal {
			return Fault{}, fmt.Errorf("%w: %q needs a value", ErrBadFault, key)
		}
		if err != nil {
			return Fault{}, fmt.Errorf("%w: %s=%q: %w", ErrBadFault, key, val, err)
		}
	}
	return f, nil
}

// String renders f in the syntax ParseFault reads, so a test can write
// req.Header.Set(stub.FaultHeader, f.String()). Times has no header form
// and is left out.
func (f Fault) String() string {
	var items []string
	if f.Close {
		items = append(items, "close")
	}
	if f.Hang {
		items = append(items, "hang")
	}
	if f.SlowHeaders > 0 {
		items = append(items, "slow_headers="+f.SlowHeaders.String())
	}
	if f.Status != 0 {
		items = append(items, "status="+strconv.Itoa(f.Status))
	}
	if f.RetryAfter > 0 {
		items = append(items, "retry_after="+f.RetryAfter.String())
	}
	for _, c := range []struct {
		key string
		n   int
	}{{"drop_after", f.DropAfter}, {"error_after", f.ErrorAfter}, {"stall_after", f.StallAfter}} {
		if c.n != 0 {
			items = append(items, c.key+"="+strconv.Itoa(max(c.n, 0)))
		}
	}
	return strings.Join(items, ",")
}

func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 86400 {
			return 0, errors.New("want 0-86400 seconds")
		}
		return time.Duration(n) * time.Second, nil
	}
	return parseDuration(s)
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 || d > 24*time.Hour {
		return 0, errors.New("want 0 to 24h")
	}
	return d, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > 1<<20 {
		return 0, errors.New("want 0 to 1048576")
	}
	if n == 0 {
		return AfterHeaders, nil
	}
	return n, nil
}

// faultIndex turns a DropAfter-style count into the index of the event the fault
// replaces: -1 for never.
func faultIndex(n int) int {
	switch {
	case n > 0:
		return n
	case n < 0:
		return 0
	}
	return -1
}

// retryAfterValue renders d as the delay-seconds form of Retry-After
// (RFC 9110 §10.2.3), rounded up so a client never retries early.
func retryAfterValue(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
