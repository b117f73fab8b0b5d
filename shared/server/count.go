package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
)

// maxCountAnswer bounds the count endpoint's answer: {"input_tokens":N}.
const maxCountAnswer = 4 << 10

// exactPrompt asks the pool's count endpoint (the row's Counter) for the
// request's exact input tokens, so a prompt bound the tenant cannot afford
// is not refused when the prompt itself fits (issue 30: Claude Code's
// first request bounds at about 4 times its count). It is the gateway's
// own call: no request token is taken from the tenant's bucket, and it
// is made only on the refusal path, once, bounded by CountTimeout. ok is
// false when the operation has no counter or the count failed, timed out
// or cannot be true: the caller refuses as it would have.
func (s *Server) exactPrompt(ctx context.Context, ex *exchange, in http.Header, pool *route.Pool, op request.Operation, body *request.Body, raw []byte) (int64, bool) {
	counter, ok := op.Counter()
	if !ok || pool == nil {
		return 0, false
	}
	var scratch [8]*route.Endpoint
	order, _ := s.Router.Order(pool, scratch[:0], 1, 0)
	if len(order) == 0 {
		return 0, false
	}
	target := s.Targets[order[0]]
	if !target.Supports(counter) {
		return 0, false
	}
	cb, err := dispatch.CountBody(raw, counter, target.BodyModel(body.Model))
	if err != nil {
		return 0, false
	}
	cctx, cancel := context.WithTimeout(ctx, s.CountTimeout)
	defer cancel()
	req, err := target.NewRequest(cctx, counter, body.Model, cb, in)
	if err != nil {
		return 0, false
	}
	req.Header.Set("X-Request-Id", ex.id)
	resp, err := s.Client.Do(req)
	if err != nil {
		s.Log.Info("input-token count failed: the prompt bound stands", "request_id", ex.id, "pool", pool.Name, "err", err)
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.Log.Info("input-token count refused: the prompt bound stands", "request_id", ex.id, "pool", pool.Name, "status", resp.StatusCode)
		return 0, false
	}
	var v struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCountAnswer)).Decode(&v); err != nil ||
		v.InputTokens == nil || *v.InputTokens < 1 || *v.InputTokens > budget.MaxTokens {
		s.Log.Warn("input-token count answer cannot be true: the prompt bound stands", "request_id", ex.id, "pool", pool.Name)
		return 0, false
	}
	return *v.InputTokens, true
}
