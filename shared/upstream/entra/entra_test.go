package entra

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/upstream"
)

var _ upstream.Credential = (*Credential)(nil)

func newMI(t *testing.T, timeout time.Duration) *Credential {
	t.Helper()
	c, err := New(Config{Credential: ManagedIdentity, ClientID: uniqueClientID(t), Timeout: timeout}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// TestBearerReachesBackend sends a real request through upstream.Target with
// the real azidentity ManagedIdentityCredential behind it, and checks what
// the identity endpoint was asked for and what the backend received.
func TestBearerReachesBackend(t *testing.T) {
	ids := newIdentityServer(t)
	ids.use(t)

	var mu sync.Mutex
	var gotAuth []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(backend.Close)

	clientID := uniqueClientID(t)
	cred, err := New(Config{Credential: ManagedIdentity, ClientID: clientID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	target, err := upstream.NewTarget(upstream.TargetSpec{Kind: "azure-openai", URL: backend.URL, APIVersion: "2024-10-21", Cred: cred})
	if err != nil {
		t.Fatal(err)
	}
	in := http.Header{"Authorization": {"Bearer client-jwt-must-not-pass"}}
	req, err := target.NewRequest(context.Background(), request.ChatCompletions, "gpt-4o", []byte(`{}`), in)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	resp, err := backend.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	issued := ids.tokens()
	if len(issued) != 1 {
		t.Fatalf("identity endpoint issued %d tokens, want 1", len(issued))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gotAuth) != 1 || gotAuth[0] != "Bearer "+issued[0] {
		t.Fatalf("backend saw Authorization %q, want %q", gotAuth, "Bearer "+issued[0])
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	// The Cognitive Services scope reaches the endpoint as a v1 resource.
	if ids.resources[0] != "https://cognitiveservices.azure.com" {
		t.Errorf("resource = %q, want https://cognitiveservices.azure.com", ids.resources[0])
	}
	if ids.clientIDs[0] != clientID {
		t.Errorf("client_id = %q, want the configured user-assigned identity %q", ids.clientIDs[0], clientID)
	}
}

// TestCustomScope checks that a configured scope, not the default, is what
// the identity endpoint receives.
func TestCustomScope(t *testing.T) {
	ids := newIdentityServer(t)
	ids.use(t)
	cred, err := New(Config{Credential: ManagedIdentity, ClientID: uniqueClientID(t), Scope: "api://llm-backend/.default"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cred.Apply(context.Background(), http.Header{}); err != nil {
		t.Fatal(err)
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.resources[0] != "api://llm-backend" {
		t.Errorf("resource = %q, want api://llm-backend", ids.resources[0])
	}
}

// TestCached checks that many requests cost one token request, whether they
// come one after another or all at once while the first fetch is in flight.
func TestCached(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		ids := newIdentityServer(t)
		ids.use(t)
		cred := newMI(t, 0)
		var first string
		for i := range 50 {
			h := http.Header{}
			if err := cred.Apply(context.Background(), h); err != nil {
				t.Fatalf("Apply %d: %v", i, err)
			}
			if i == 0 {
				first = h.Get("Authorization")
			} else if got := h.Get("Authorization"); got != first {
				t.Fatalf("Apply %d set %q, want the cached %q", i, got, first)
			}
		}
		if n := ids.requests.Load(); n != 1 {
			t.Fatalf("identity endpoint got %d requests for 50 Apply calls, want 1", n)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		ids := newIdentityServer(t)
		ids.use(t)
		gate, arrived := make(chan struct{}), make(chan struct{}, 100)
		ids.set(func(s *identityServer) { s.gate, s.arrived = gate, arrived })
		cred := newMI(t, 30*time.Second)

		const callers = 50
		var wg, started sync.WaitGroup
		got := make([]string, callers)
		errs := make([]error, callers)
		started.Add(callers)
		for i := range callers {
			wg.Go(func() {
				started.Done()
				h := http.Header{}
				errs[i] = cred.Apply(context.Background(), h)
				got[i] = h.Get("Authorization")
			})
		}
		started.Wait()
		<-arrived // the one fetch is at the endpoint; every caller must share it
		close(gate)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if got[i] == "" || got[i] != got[0] {
				t.Fatalf("caller %d got %q, caller 0 got %q", i, got[i], got[0])
			}
		}
		if n := ids.requests.Load(); n != 1 {
			t.Fatalf("identity endpoint got %d requests for %d concurrent callers, want 1", n, callers)
		}
	})
}

// TestStartFetchesInBackground checks the cold-start path: Start returns at
// once, the token request happens without any caller, and the first Apply
// then finds the token cached.
func TestStartFetchesInBackground(t *testing.T) {
	ids := newIdentityServer(t)
	ids.use(t)
	gate := make(chan struct{})
	ids.set(func(s *identityServer) { s.gate = gate })
	cred := newMI(t, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	cred.Start(ctx) // must not block on the held identity endpoint
	close(gate)
	waitFor(t, "the background fetch", 20*time.Second, func() bool { return len(ids.tokens()) == 1 })
	waitFor(t, "the token to be cached", 20*time.Second, func() bool {
		return cred.cur.Load() != nil
	})
	h := http.Header{}
	if err := cred.Apply(ctx, h); err != nil {
		t.Fatal(err)
	}
	if want := "Bearer " + ids.tokens()[0]; h.Get("Authorization") != want {
		t.Fatalf("Authorization = %q, want %q", h.Get("Authorization"), want)
	}
	if n := ids.requests.Load(); n != 1 {
		t.Fatalf("identity endpoint got %d requests, want 1", n)
	}
}

// TestRefreshBeforeExpiry issues tokens that live refreshMargin+2s and
// expects Start's loop to fetch a second one by itself, which Apply then
// hands out.
func TestRefreshBeforeExpiry(t *testing.T) {
	ids := newIdentityServer(t)
	ids.use(t)
	ids.set(func(s *identityServer) { s.lifetime = refreshMargin + 2*time.Second })
	cred := newMI(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cred.Start(ctx)

	waitFor(t, "a background refresh", 30*time.Second, func() bool { return len(ids.tokens()) >= 2 })
	toks := ids.tokens()
	if toks[0] == toks[1] {
		t.Fatal("refresh returned the same token")
	}
	waitFor(t, "Apply to hand out the refreshed token", 30*time.Second, func() bool {
		h := http.Header{}
		if err := cred.Apply(ctx, h); err != nil {
			t.Fatal(err)
		}
		return h.Get("Authorization") != "Bearer "+toks[0]
	})
	cancel()
}

// TestOutage checks failure while no token is cached: Apply fails within
// its timeout, names the credential, leaks no token even when the endpoint
// echoes one, and succeeds once the endpoint is back.
func TestOutage(t *testing.T) {
	const leaked = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWFrIn0.c2lnbmF0dXJl"
	t.Run("500 then recovery", func(t *testing.T) {
		ids := newIdentityServer(t)
		ids.use(t)
		ids.set(func(s *identityServer) {
			s.failWith = http.StatusInternalServerError
			s.failBody = `{"error":"down","access_token":"secret-in-body","debug":"` + leaked + `"}`
		})
		const timeout = 3 * time.Second
		cred := newMI(t, timeout)

		start := time.Now()
		err := cred.Apply(context.Background(), http.Header{})
		elapsed := time.Since(start)
		if err == nil {
			t.Fatal("Apply succeeded against a failing identity endpoint")
		}
		if elapsed > 3*timeout {
			t.Errorf("Apply took %s, want it bounded by the %s timeout", elapsed, timeout)
		}
		msg := err.Error()
		t.Logf("outage error: %s", msg)
		if !strings.HasPrefix(msg, "entra managed-identity credential: token request failed") {
			t.Errorf("error %q does not name the credential", msg)
		}
		for _, secret := range []string{leaked, "secret-in-body"} {
			if strings.Contains(msg, secret) {
				t.Errorf("error leaks %q: %s", secret, msg)
			}
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind != ManagedIdentity {
			t.Errorf("error is not an *Error of kind %s: %#v", ManagedIdentity, err)
		}

		ids.set(func(s *identityServer) { s.failWith = 0 })
		var h http.Header
		waitFor(t, "recovery", 30*time.Second, func() bool {
			h = http.Header{}
			return cred.Apply(context.Background(), h) == nil
		})
		if want := "Bearer " + ids.tokens()[0]; h.Get("Authorization") != want {
			t.Fatalf("after recovery Authorization = %q, want %q", h.Get("Authorization"), want)
		}
	})
	t.Run("endpoint closed", func(t *testing.T) {
		ids := newIdentityServer(t)
		ids.use(t)
		ids.Close() // connection refused from now on
		const timeout = 3 * time.Second
		cred := newMI(t, timeout)
		start := time.Now()
		err := cred.Apply(context.Background(), http.Header{})
		if err == nil {
			t.Fatal("Apply succeeded with the identity endpoint closed")
		}
		if elapsed := time.Since(start); elapsed > 3*timeout {
			t.Errorf("Apply took %s, want it bounded by the %s timeout", elapsed, timeout)
		}
		if !strings.Contains(err.Error(), "entra managed-identity credential") {
			t.Errorf("error %q does not name the credential", err)
		}
	})
	t.Run("endpoint hangs", func(t *testing.T) {
		ids := newIdentityServer(t)
		ids.use(t)
		gate := make(chan struct{})
		t.Cleanup(func() { close(gate) })
		ids.set(func(s *identityServer) { s.gate = gate })
		const timeout = time.Second
		cred := newMI(t, timeout)
		err := cred.Apply(context.Background(), http.Header{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Apply against a hanging endpoint = %v, want a deadline error", err)
		}
		// A caller's own shorter deadline wins over the credential's timeout.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := cred.Apply(ctx, http.Header{}); err == nil {
			t.Fatal("Apply with a cancelled context succeeded")
		}
	})
}

// TestRefreshFailureKeepsToken checks that a failing refresh does not take
// away a token that is still valid.
func TestRefreshFailureKeepsToken(t *testing.T) {
	ids := newIdentityServer(t)
	ids.use(t)
	ids.set(func(s *identityServer) { s.lifetime = refreshMargin + 2*time.Second })
	cred := newMI(t, 2*time.Second)
	h := http.Header{}
	if err := cred.Apply(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	ids.set(func(s *identityServer) { s.failWith = http.StatusServiceUnavailable })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cred.Start(ctx)
	waitFor(t, "failed refreshes", 30*time.Second, func() bool { return ids.requests.Load() >= 3 })
	h2 := http.Header{}
	if err := cred.Apply(ctx, h2); err != nil {
		t.Fatalf("Apply during a refresh outage: %v", err)
	}
	if h2.Get("Authorization") != h.Get("Authorization") {
		t.Fatalf("Authorization changed during an outage: %q → %q", h.Get("Authorization"), h2.Get("Authorization"))
	}
}

// TestAzureCLIUnavailable uses the real AzureCLICredential on a machine
// without az: Apply must fail fast and say which credential failed.
func TestAzureCLIUnavailable(t *testing.T) {
	if _, err := exec.LookPath("az"); err == nil {
		t.Skip("az is installed here; this test needs a machine without it")
	}
	cred, err := New(Config{Credential: AzureCLI, Timeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = cred.Apply(context.Background(), http.Header{})
	if err == nil || !strings.HasPrefix(err.Error(), "entra azure-cli credential: ") {
		t.Fatalf("Apply = %v, want an error naming the azure-cli credential", err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Setenv("AZURE_TENANT_ID", "")
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", "")
	t.Setenv("AZURE_CLIENT_ID", "")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "unknown kind", cfg: Config{Credential: "default"}, want: `entra: invalid config: credential: must be managed-identity, workload-identity or azure-cli, not "default"`},
		{name: "empty kind", cfg: Config{}, want: `entra: invalid config: credential: must be managed-identity, workload-identity or azure-cli, not ""`},
		{name: "cli with client id", cfg: Config{Credential: AzureCLI, ClientID: "x"}, want: "entra: invalid config: client_id: not used by the Azure CLI"},
		{name: "workload identity without env", cfg: Config{Credential: WorkloadIdentity}, want: "entra: invalid config: credential: environment variable AZURE_TENANT_ID is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("New = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	cred, err := New(Config{Credential: ManagedIdentity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cred.scope != DefaultScope || cred.timeout != DefaultTimeout {
		t.Fatalf("scope, timeout = %q, %s; want %q, %s", cred.scope, cred.timeout, DefaultScope, DefaultTimeout)
	}
}

func TestRefreshIn(t *testing.T) {
	tests := []struct {
		name      string
		remaining time.Duration
		want      time.Duration
	}{
		{name: "24h token: half-life", remaining: 24 * time.Hour, want: 12 * time.Hour},
		{name: "1h token: half-life", remaining: time.Hour, want: 30 * time.Minute},
		{name: "8m token: margin", remaining: 8 * time.Minute, want: 3 * time.Minute},
		{name: "margin+2s token: margin", remaining: refreshMargin + 2*time.Second, want: 2 * time.Second},
		{name: "3m token: half-life", remaining: 3 * time.Minute, want: 90 * time.Second},
		{name: "expired: floor", remaining: -time.Minute, want: minBackoff},
		{name: "1s token: floor", remaining: time.Second, want: minBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refreshIn(tt.remaining); got != tt.want {
				t.Fatalf("refreshIn(%s) = %s, want %s", tt.remaining, got, tt.want)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "jwt", in: "got eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc-_ here", want: "got [REDACTED] here"},
		{name: "access_token field", in: `body {"access_token": "opaque", "x":1}`, want: `body {"access_token":"[REDACTED]", "x":1}`},
		{name: "clean", in: "connection refused", want: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact(tt.in); got != tt.want {
				t.Fatalf("redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// BenchmarkApplyCached is the per-request cost with a token cached.
func BenchmarkApplyCached(b *testing.B) {
	c := newCredential(Config{Credential: ManagedIdentity, Scope: DefaultScope, Timeout: time.Second}, nil, discard())
	c.cur.Store(&cached{header: "Bearer t", usableTil: time.Now().Add(time.Hour)})
	h := http.Header{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Apply(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}
