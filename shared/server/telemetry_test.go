package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/shared/telemetry"
)

// TestRouteOf: http.route takes only bounded values, whatever the path.
func TestRouteOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/chat/completions":                                  "/v1/chat/completions",
		"/v1/responses/resp_123":                                "/v1/responses/{response_id}",
		"/v1/models/gpt-4o":                                     "/v1/models/{model}",
		"/openai/deployments/prod-4o/chat/completions":          "/openai/deployments/{deployment}/chat/completions",
		"/openai/deployments/prod-4o/anything/the/caller/wants": "other",
		"/openai/v1/chat/completions":                           "/openai/v1/chat/completions",
		"/v1/secret-path-123":                                   "other",
		"/healthz":                                              "/healthz",
		"/v1/messages":                                          "/v1/messages",
		"/v1/messages/count_tokens":                             "/v1/messages/count_tokens",
		"/openai/responses":                                     "/openai/v1/responses",
		"/openai/responses/resp_1/cancel":                       "/openai/v1/responses/{response_id}",
		"/openai/models":                                        "/openai/v1/models",
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// recordingTelemetry keeps what End was told.
type recordingTelemetry struct {
	mu   sync.Mutex
	ends []telemetry.Request
}

func (*recordingTelemetry) Begin(ctx context.Context, _, _ string, _ http.Header) context.Context {
	return ctx
}

func (*recordingTelemetry) Attempt(ctx context.Context, _ *http.Request, _ *telemetry.Attempt) context.Context {
	return ctx
}

func (*recordingTelemetry) AttemptEnd(context.Context, *telemetry.Attempt, telemetry.Result) {}

func (*recordingTelemetry) Stream(context.Context, string, int64) {}

func (r *recordingTelemetry) End(_ context.Context, req *telemetry.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends = append(r.ends, *req)
}

// TestUnknownTenantIsUnknown: a valid token whose tenant the table does not
// have is refused 403 and exported, and logged, as tenant "unknown", never
// as its claim, so no caller can add a series; a tenant in the table is
// exported as itself. (Before: the claim's value, 211 characters in one
// try, became an llmgw.tenant.id value.)
func TestUnknownTenantIsUnknown(t *testing.T) {
	t.Parallel()
	tel := &recordingTelemetry{}
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Telemetry = tel
	}, http.HandlerFunc(sseBackend))
	claim := "attacker-" + strings.Repeat("x", 200)
	resp, body := g.call(t, "POST", "/v1/chat/completions", claim, streamBody)
	if resp.StatusCode != 403 || errorCode(t, body) != "tenant_not_allowed" {
		t.Fatalf("unknown tenant: %d %s", resp.StatusCode, body)
	}
	if got := g.lastLog(t)["tenant"]; got != UnknownTenant {
		t.Errorf("access log tenant %q, want %q", got, UnknownTenant)
	}
	if resp, body := g.call(t, "POST", "/v1/chat/completions", "t1", streamBody); resp.StatusCode != 200 {
		t.Fatalf("known tenant: %d %s", resp.StatusCode, body)
	}
	tel.mu.Lock()
	defer tel.mu.Unlock()
	if len(tel.ends) != 2 || tel.ends[0].Tenant != UnknownTenant || tel.ends[1].Tenant != "t1" {
		t.Fatalf("exported tenants %+v, want [unknown t1]", tel.ends)
	}
	for _, e := range tel.ends {
		if strings.Contains(e.Tenant+e.TenantName, "attacker") {
			t.Fatalf("the claim was exported: %+v", e)
		}
	}
}
