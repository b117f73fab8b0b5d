package billing

import (
	"errors"
	"fmt"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
)

// Kind is what sort of refusal a Refusal is: the status hint server maps
// to an HTTP status (server/errors.go, refusalError).
type Kind uint8

const (
	// Invalid: the request asks for what its tenant may not use, or for
	// what no backend accepts under its budget (400,
	// invalid_request_error).
	Invalid Kind = iota + 1
	// OverBudget: a limit has no room for the request, now or ever (429;
	// Refusal.Type names the limit's window).
	OverBudget
	// Failed: billing cannot decide, a bug or a catalogue the config check
	// should have refused (500, server_error).
	Failed
)

// Refusal is a request billing refuses, with what its error answer says.
type Refusal struct {
	Kind Kind
	// Type is OpenAI's error type of an OverBudget refusal: the window
	// that refused ("tokens", "insufficient_quota", "spend"). The other
	// kinds take their kind's.
	Type                 string
	Code, Param, Message string
	// RetryAfter is when the refusing window resets; 0 when waiting will
	// not help.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Message }

// failed is the refusal of a request billing cannot decide.
func failed(msg string) *Refusal {
	return &Refusal{Kind: Failed, Code: "budget_error", Message: msg}
}

// Refuse is the refusal of a reservation the store did not allow (d), in
// OpenAI's words: rate_limit_exceeded (type tokens) for the per-minute
// limit, insufficient_quota for the quota, the spend limits' own
// (spendRefusal); RetryAfter is when the window resets, at least a
// second. now is the time the decision was read at; currency the
// catalogue's, which a spend refusal names.
func Refuse(tenantID string, d budget.Decision, now time.Time, currency string) *Refusal {
	// The level that refused: the tenant, or a project or user below it.
	who := d.Label(tenantID, d.RefusedLevel)
	win := d.Refusal()
	retry := max(win.Reset.Sub(now), time.Second)
	if d.RefusedBy.Money() {
		return spendRefusal(who, d, win, retry, currency)
	}
	if d.RefusedBy != budget.LimitNone && d.Requested > win.Limit {
		return tooLargeForBudget(who, d, win)
	}
	switch d.RefusedBy {
	case budget.LimitTPM:
		return &Refusal{Kind: OverBudget, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: retry,
			Message: fmt.Sprintf("Rate limit reached for %s on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %s.",
				who, win.Limit, win.Used, d.Requested, retry.Round(time.Millisecond))}
	case budget.LimitQuota:
		return &Refusal{Kind: OverBudget, Type: "insufficient_quota", Code: "insufficient_quota", RetryAfter: retry,
			Message: fmt.Sprintf("You exceeded your current token quota for %s: Limit %d, Used %d, Requested %d; it resets at %s.",
				who, win.Limit, win.Used, d.Requested, win.Reset.UTC().Format(time.RFC3339))}
	}
	// An id that was reserved before (request ids are unique: not expected).
	return failed("the token budget refused a repeated request id")
}

// spendRefusal refuses a request a spend limit has no room for, naming
// the limit, what was spent and the limit in the currency: a daily or
// monthly limit is insufficient_quota, the per-minute one
// rate_limit_exceeded; RetryAfter when the window ends, none when the
// request's least cost is above the whole limit.
func spendRefusal(who string, d budget.Decision, win budget.Window, retry time.Duration, currency string) *Refusal {
	typ, code := "insufficient_quota", "insufficient_quota"
	if d.RefusedBy == budget.LimitSpendMinute {
		typ, code = "spend", "rate_limit_exceeded"
	}
	if d.MoneyRequested > win.Limit {
		return &Refusal{Kind: OverBudget, Type: typ, Code: "request_too_large_for_budget",
			Message: fmt.Sprintf("Request too large for %s's spend limit (%s): it costs at least %s %s (its prompt bound and least output at the dearest tier it may be served at) and the limit is %s %s, so it can never run. The input or output tokens must be reduced in order to run successfully.",
				who, d.RefusedBy, price.Format(d.MoneyRequested), currency, price.Format(win.Limit), currency)}
	}
	return &Refusal{Kind: OverBudget, Type: typ, Code: code, RetryAfter: retry,
		Message: fmt.Sprintf("%s spent %s of %s %s %s; this request needs at least %s. It resets at %s.",
			who, price.Format(win.Used), price.Format(win.Limit), currency, periodText(d.RefusedBy), price.Format(d.MoneyRequested), win.Reset.UTC().Format(time.RFC3339))}
}

// periodText names a spend limit's period in a refusal.
func periodText(k budget.Limit) string {
	switch k {
	case budget.LimitSpendMinute:
		return "this minute"
	case budget.LimitSpendDay:
		return "today (UTC)"
	}
	return "this month (UTC)"
}

// tooLargeForBudget refuses a request whose least reservation (its prompt
// bound and least output) is above the whole limit that refused it: it
// can never run, so no RetryAfter (a Claude Code request was once told
// to retry at midnight, when it would be refused again). The type stays
// the window's, so clients classify it as before; the code says that
// waiting will not help.
func tooLargeForBudget(who string, d budget.Decision, win budget.Window) *Refusal {
	typ, limit := "tokens", "tokens per min (TPM)"
	if d.RefusedBy == budget.LimitQuota {
		typ, limit = "insufficient_quota", "token quota"
	}
	return &Refusal{Kind: OverBudget, Type: typ, Code: "request_too_large_for_budget",
		Message: fmt.Sprintf("Request too large for %s's %s: it needs at least %d tokens (its prompt bound and least output) and the limit is %d, so it can never run. The input or output tokens must be reduced in order to run successfully.",
			who, limit, d.Requested, win.Limit)}
}

// thinkingOverCap: the Messages API's thinking.budget_tokens does not fit
// below the output cap of the tenant's token budget.
func thinkingOverCap(budgetTokens, maxOutput int64) *Refusal {
	return &Refusal{Kind: Invalid, Code: "thinking_budget_over_cap", Param: "thinking.budget_tokens",
		Message: fmt.Sprintf("thinking.budget_tokens %d must be below max_tokens, which this tenant's token budget caps at %d", budgetTokens, maxOutput)}
}

// tierNotAllowed refuses a service_tier the tenant may not use.
func tierNotAllowed(asked string, allowed price.Tiers) *Refusal {
	return &Refusal{Kind: Invalid, Code: "service_tier_not_allowed", Param: "service_tier",
		Message: fmt.Sprintf("service_tier %q is not available to this tenant: it may use %s (or auto). The operator allows tiers with tenants[].service_tiers.", asked, allowed)}
}

// featureNotEnabled: the body asks for a server-side feature the tenant's
// config does not allow.
func featureNotEnabled(param, feature string) *Refusal {
	return &Refusal{Kind: Invalid, Code: "feature_not_enabled", Param: param,
		Message: fmt.Sprintf("'%s' asks for the server-side feature %s, which is off for this tenant: it runs, stores or bills outside tokens on the backend account every tenant shares. The operator enables it with tenants[].features (name: %s).", param, feature, feature)}
}

// betaNotEnabled: the body carries field, which the anthropic-beta beta
// gates, and the beta is not allowed for the tenant.
func betaNotEnabled(field, beta string) *Refusal {
	return &Refusal{Kind: Invalid, Code: "beta_not_enabled", Param: field,
		Message: fmt.Sprintf("'%s' needs the anthropic-beta %s, which is off for this tenant: it stores state in, or bills beyond tokens on, the backend account every tenant shares. Remove '%s', or ask the operator to list %s in tenants[].anthropic_beta.", field, beta, field, beta)}
}

// unboundedUses: a priced server tool without max_uses, for a tenant
// with a token budget.
func unboundedUses(param, feature string) *Refusal {
	return &Refusal{Kind: Invalid, Code: "missing_required_parameter", Param: param,
		Message: fmt.Sprintf("'%s' is required: each use of %s is charged to this tenant's token budget, and without max_uses the backend may run it without bound. Set max_uses on the tool.", param, feature)}
}

// unreadable: a tool whose reading would depend on the backend's JSON
// decoder (request.FeaturesOf's *KeyError or *IntError), in the words
// and code ParseBody's refusals of the same kind have.
func unreadable(err error) *Refusal {
	r := &Refusal{Kind: Invalid, Message: err.Error()}
	var ke *request.KeyError
	var ie *request.IntError
	var me *request.MemberError
	switch {
	case errors.As(err, &me):
		r.Code, r.Param = me.Code(), me.Param
	case errors.As(err, &ke):
		r.Code, r.Param = ke.Code(), ke.Param
	case errors.As(err, &ie):
		r.Code, r.Param = ie.Code(), ie.Param
	default:
		r.Kind, r.Code = Failed, "budget_error"
	}
	return r
}

// unknownTool: a tool type the gateway does not know may be a server tool,
// so it is refused (fails closed).
func unknownTool(param string) *Refusal {
	return &Refusal{Kind: Invalid, Code: "unsupported_tool", Param: param,
		Message: fmt.Sprintf("'%s' is a tool type the gateway does not know: it may run on the backend account every tenant shares, so it is not served. Use a function tool, or a server tool the operator enabled with tenants[].features.", param)}
}
