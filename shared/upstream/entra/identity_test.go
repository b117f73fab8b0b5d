package entra

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// identityServer speaks the managed-identity protocol Azure Container Apps
// and App Service expose (api-version 2019-08-01): GET $IDENTITY_ENDPOINT
// ?api-version=…&resource=…&client_id=… with header X-IDENTITY-HEADER.
type identityServer struct {
	*httptest.Server
	secret   string
	requests atomic.Int64

	mu        sync.Mutex
	lifetime  time.Duration
	failWith  int           // non-zero: answer every request with this status
	failBody  string        // body of failing answers
	gate      chan struct{} // non-nil: hold each request until it is closed
	arrived   chan struct{} // receives once per request, if non-nil
	resources []string
	clientIDs []string
	issued    []string
}

func newIdentityServer(t *testing.T) *identityServer {
	t.Helper()
	s := &identityServer{secret: "header-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36), lifetime: time.Hour}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// use points azidentity at s. azidentity reads these at construction, so the
// calling test must not be parallel.
func (s *identityServer) use(t *testing.T) {
	t.Setenv("IDENTITY_ENDPOINT", s.URL+"/msi/token")
	t.Setenv("IDENTITY_HEADER", s.secret)
	for _, k := range []string{"IDENTITY_SERVER_THUMBPRINT", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT"} {
		t.Setenv(k, "")
	}
}

func (s *identityServer) serve(w http.ResponseWriter, r *http.Request) {
	n := s.requests.Add(1)
	s.mu.Lock()
	gate, arrived, fail, body, life := s.gate, s.arrived, s.failWith, s.failBody, s.lifetime
	s.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	q := r.URL.Query()
	switch {
	case r.URL.Path != "/msi/token" || r.Method != http.MethodGet:
		http.Error(w, "not found", http.StatusNotFound)
		return
	case r.Header.Get("X-IDENTITY-HEADER") != s.secret:
		http.Error(w, `{"error":"bad X-IDENTITY-HEADER"}`, http.StatusUnauthorized)
		return
	case q.Get("api-version") != "2019-08-01" || q.Get("resource") == "":
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	case fail != 0:
		http.Error(w, body, fail)
		return
	}
	tok := fmt.Sprintf("tok-%d-%s", n, strconv.FormatInt(time.Now().UnixNano(), 36))
	s.mu.Lock()
	s.resources = append(s.resources, q.Get("resource"))
	s.clientIDs = append(s.clientIDs, q.Get("client_id"))
	s.issued = append(s.issued, tok)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"access_token": tok,
		"expires_on":   strconv.FormatInt(time.Now().Add(life).Unix(), 10),
		"resource":     q.Get("resource"),
		"token_type":   "Bearer",
		"client_id":    q.Get("client_id"),
	})
}

func (s *identityServer) set(f func(s *identityServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *identityServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.issued...)
}

// uniqueClientID keeps tests apart: MSAL caches managed-identity tokens in a
// process-wide cache keyed by identity and resource.
func uniqueClientID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
