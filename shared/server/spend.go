package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
)

// spendView answers GET /v1/llmgw/spend: the caller's own tenant's spend
// and token windows, read from the ledger, with the caller's JWT (no admin
// credential). Nothing of another tenant is reachable: the tenant is the
// token's.
func (s *Server) spendView(w http.ResponseWriter, r *http.Request, ex *exchange) error {
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}
	v := spendReport{Object: "llmgw.spend", Tenant: t.ID, Levels: []spendLevel{}}
	if s.Prices != nil {
		v.Currency, v.PriceVersion = s.Prices.Currency, s.Prices.Version
	}
	if s.Budgets == nil {
		return writeJSON(w, ex, v)
	}
	lim, ok := s.Budgets.Limits(t.ID)
	if !ok || !lim.Enforced() {
		return writeJSON(w, ex, v)
	}
	// Two store operations: taken from the tenant's prompt-count bucket,
	// so a tenant polling its spend floods nobody's store but its own
	// share.
	ctx := ex.context(r)
	if err := s.take(ctx, w, ex, t.ID, true); err != nil {
		return err
	}
	d, err := s.Budgets.Windows(ctx, t.ID, ex.bill.Scope, "spend-view/"+ex.id)
	if err != nil {
		if errors.Is(err, budget.ErrUnavailable) {
			return budgetUnavailable()
		}
		return budgetFailed("the budget store could not be read")
	}
	v.Levels = append(v.Levels, viewLevel("tenant", t.ID, d.Tenant(), lim.QuotaPeriod))
	// The levels below the tenant the caller's token names, in the order
	// they are reserved at (its project, then its user).
	for i, l := range lim.Levels.Of(ex.bill.Scope) {
		if i < len(d.Levels) {
			kind, name, _ := strings.Cut(l.Name, ":")
			v.Levels = append(v.Levels, viewLevel(kind, name, d.Levels[i], l.Limits.QuotaPeriod))
		}
	}
	return writeJSON(w, ex, v)
}

// viewLevel is one level's windows in the spend view.
func viewLevel(kind, name string, d budget.Windows, quota budget.Period) spendLevel {
	lv := spendLevel{Level: kind, Name: name, Spend: []spendWindow{}, Tokens: []spendWindow{}}
	for i, win := range d.Spend {
		if win.Limit > 0 {
			lv.Spend = append(lv.Spend, spendWindow{Period: [3]string{"minute", "day", "month"}[i],
				Limit: price.Format(win.Limit), Used: price.Format(win.Used), Remaining: price.Format(win.Remaining), Resets: win.Reset.UTC().Format(time.RFC3339)})
		}
	}
	for _, tw := range []struct {
		period string
		win    budget.Window
	}{{"minute", d.TPM}, {quota.String(), d.Quota}} {
		if tw.win.Limit > 0 {
			lv.Tokens = append(lv.Tokens, spendWindow{Period: tw.period, Limit: strconv.FormatInt(tw.win.Limit, 10),
				Used: strconv.FormatInt(tw.win.Used, 10), Remaining: strconv.FormatInt(tw.win.Remaining, 10), Resets: tw.win.Reset.UTC().Format(time.RFC3339)})
		}
	}
	return lv
}

// spendReport is GET /v1/llmgw/spend's answer.
type spendReport struct {
	Object       string       `json:"object"`
	Tenant       string       `json:"tenant"`
	Currency     string       `json:"currency,omitempty"`
	PriceVersion string       `json:"price_version,omitempty"`
	Levels       []spendLevel `json:"levels"`
}

// spendLevel is one level's windows (tenant, project or user): money as
// decimal amounts of the currency, tokens as counts.
type spendLevel struct {
	Level  string        `json:"level"`
	Name   string        `json:"name"`
	Spend  []spendWindow `json:"spend"`
	Tokens []spendWindow `json:"tokens"`
}

type spendWindow struct {
	Period    string `json:"period"`
	Limit     string `json:"limit"`
	Used      string `json:"used"`
	Remaining string `json:"remaining"`
	Resets    string `json:"resets_at"`
}
