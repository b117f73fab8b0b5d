package route

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Advice is what a backend's 429 or 5xx asks of the gateway.
type Advice struct {
	// Pause is how long the backend asked not to be sent more; 0 = it
	// said nothing (the caller's default cooldown applies).
	Pause time.Duration
	// Own says the backend still has capacity by its own count (every
	// x-ratelimit-remaining-* or anthropic-ratelimit-*-remaining it sent is
	// above zero): the 429 is this request's alone (a body too large for
	// what is left of the minute, say), so it cools nothing and only this
	// request moves on. One tenant cannot bench an endpoint for everyone
	// by sending what the endpoint cannot take.
	Own bool
}

// resets pairs each reset header with the remaining count it explains:
// a reset counts only when its limit is spent (remaining 0) or the
// backend did not say.
var resets = [...]struct {
	reset, remaining string
	rfc3339          bool
}{
	{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Remaining-Requests", false},
	{"X-Ratelimit-Reset-Tokens", "X-Ratelimit-Remaining-Tokens", false},
	{"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Requests-Remaining", true},
	{"Anthropic-Ratelimit-Tokens-Reset", "Anthropic-Ratelimit-Tokens-Remaining", true},
	{"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Input-Tokens-Remaining", true},
	{"Anthropic-Ratelimit-Output-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Remaining", true},
}

// Advise reads a failed answer's headers, most precise first:
// retry-after-ms (Azure OpenAI), Retry-After (seconds or an HTTP date, RFC
// 9110 §10.2.3), then the longest reset of a spent limit: OpenAI's
// x-ratelimit-reset-requests / -tokens (Go-style durations, "1s",
// "6m0s") and Anthropic's anthropic-ratelimit-*-reset (RFC 3339 times).
// Any positive value counts, however long (a pause past what a Duration
// holds is the longest one): the caller bounds it (Router.Cooldown, by
// MaxCooldown), so a day's Retry-After cools hard for MaxCooldown rather
// than being ignored. Own is only ever set for a 429.
func Advise(h http.Header, status int, now time.Time) Advice {
	var a Advice
	if status == http.StatusTooManyRequests {
		a.Own = capacityLeft(h)
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			a.Pause = scale(ms, time.Millisecond)
			return a
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			if secs > 0 {
				a.Pause = scale(float64(secs), time.Second)
				return a
			}
		} else if t, err := http.ParseTime(v); err == nil && t.After(now) {
			a.Pause = t.Sub(now)
			return a
		}
	}
	for _, r := range resets {
		v := h.Get(r.reset)
		if v == "" || h.Get(r.remaining) != "" && h.Get(r.remaining) != "0" {
			continue
		}
		var d time.Duration
		if r.rfc3339 {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				d = t.Sub(now)
			}
		} else if pd, err := time.ParseDuration(strings.TrimSpace(v)); err == nil {
			d = pd
		}
		if d > a.Pause {
			a.Pause = d
		}
	}
	return a
}

// longest is the longest pause a Duration holds.
const longest = time.Duration(math.MaxInt64)

// scale is v units, saturating at longest.
func scale(v float64, unit time.Duration) time.Duration {
	if v >= float64(longest/unit) {
		return longest
	}
	return time.Duration(v * float64(unit))
}

// capacityLeft reports whether h names at least one remaining count and
// all it names are above zero.
func capacityLeft(h http.Header) bool {
	named := false
	for _, r := range resets {
		v := h.Get(r.remaining)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return false
		}
		named = true
	}
	return named
}
