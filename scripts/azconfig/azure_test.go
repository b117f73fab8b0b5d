package azconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/llmgw/gateway/scripts/stub"
)

// fakeAzure stands in for Azure's public endpoints on loopback. The gateway
// reaches them by their real names through HTTPS_PROXY: the proxy accepts
// CONNECT only for the hosts it serves (so nothing leaves the machine) and
// terminates TLS with a certificate for the requested name, signed by a test
// CA the gateway trusts through SSL_CERT_FILE.
type fakeAzure struct {
	CAPEM    []byte
	ProxyURL string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	hosts map[string]http.Handler
	conns chan net.Conn

	mu    sync.Mutex
	certs map[string]*tls.Certificate
}

func newFakeAzure(t *testing.T, hosts map[string]http.Handler) *fakeAzure {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "azconfig test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	f := &fakeAzure{
		CAPEM: pemBlock("CERTIFICATE", der),
		ca:    ca, caKey: key, hosts: hosts,
		conns: make(chan net.Conn),
		certs: map[string]*tls.Certificate{},
	}

	// The TLS side: one server for every tunnelled connection, routing by
	// Host.
	tlsSrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			h, ok := f.hosts[host]
			if !ok {
				http.Error(w, "unknown host", http.StatusMisdirectedRequest)
				return
			}
			h.ServeHTTP(w, r)
		}),
		TLSConfig: &tls.Config{GetCertificate: f.certificate, MinVersion: tls.VersionTLS12},
	}
	ln := &chanListener{conns: f.conns, done: make(chan struct{})}
	go func() { _ = tlsSrv.ServeTLS(ln, "", "") }()

	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if r.Method != http.MethodConnect || err != nil || f.hosts[host] == nil {
			http.Error(w, "this proxy only tunnels to the fake Azure hosts", http.StatusForbidden)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			conn.Close()
			return
		}
		select {
		case f.conns <- conn:
		case <-ln.done:
			conn.Close()
		}
	}))
	f.ProxyURL = proxy.URL
	t.Cleanup(func() {
		proxy.Close()
		_ = tlsSrv.Close()
		ln.Close()
	})
	return f
}

// certificate mints a leaf for the requested server name.
func (f *fakeAzure) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.certs[hello.ServerName]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: hello.ServerName},
		DNSNames:     []string{hello.ServerName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	f.certs[hello.ServerName] = c
	return c, nil
}

// chanListener hands the proxy's tunnelled connections to a server.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// entraDirectory is login.microsoftonline.com for one directory: its v2.0
// OpenID configuration and signing keys, shaped like Entra's (JWKs carry
// kid, x5t, n, e, x5c and issuer, but no alg), and the access tokens it
// would issue.
type entraDirectory struct {
	tenantID string
	key      *rsa.PrivateKey
	kid      string
	certDER  []byte

	discoveries atomic.Int64
}

func newEntraDirectory(t *testing.T, tenantID string) *entraDirectory {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "accounts.accesscontrol.windows.net"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(der)
	return &entraDirectory{tenantID: tenantID, key: key, kid: base64.RawURLEncoding.EncodeToString(sum[:]), certDER: der}
}

func (d *entraDirectory) issuer() string { return loginEndpoint + d.tenantID + "/v2.0" }

func (d *entraDirectory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	base := "https://login.microsoftonline.com/" + d.tenantID
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	switch r.URL.Path {
	case "/" + d.tenantID + "/v2.0/.well-known/openid-configuration":
		d.discoveries.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"token_endpoint":                        base + "/oauth2/v2.0/token",
			"token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt", "client_secret_basic"},
			"jwks_uri":                              base + "/discovery/v2.0/keys",
			"response_modes_supported":              []string{"query", "fragment", "form_post"},
			"subject_types_supported":               []string{"pairwise"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported":              []string{"code", "id_token", "code id_token", "id_token token"},
			"scopes_supported":                      []string{"openid", "profile", "email", "offline_access"},
			"issuer":                                d.issuer(),
			"request_uri_parameter_supported":       false,
			"userinfo_endpoint":                     "https://graph.microsoft.com/oidc/userinfo",
			"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
			"http_logout_supported":                 true,
			"frontchannel_logout_supported":         true,
			"end_session_endpoint":                  base + "/oauth2/v2.0/logout",
			"claims_supported":                      []string{"sub", "iss", "cloud_instance_name", "aud", "exp", "iat", "auth_time", "acr", "nonce", "tid", "ver", "at_hash"},
			"tenant_region_scope":                   "EU",
			"cloud_instance_name":                   "microsoftonline.com",
			"cloud_graph_host_name":                 "graph.windows.net",
			"msgraph_host":                          "graph.microsoft.com",
		})
	case "/" + d.tenantID + "/discovery/v2.0/keys":
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]any{d.jwk()}})
	default:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_tenant","error_description":"AADSTS90002: Tenant not found."}`)
	}
}

// jwk is the directory's signing key as Entra publishes it: no alg, and
// the issuer it signs for (the common endpoint writes {tenantid} there).
func (d *entraDirectory) jwk() map[string]any {
	pub := d.key.PublicKey
	return map[string]any{
		"kty":    "RSA",
		"use":    "sig",
		"kid":    d.kid,
		"x5t":    d.kid,
		"n":      base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e":      base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
		"x5c":    []string{base64.StdEncoding.EncodeToString(d.certDER)},
		"issuer": loginEndpoint + "{tenantid}/v2.0",
	}
}

// accessToken is a v2.0 access token of this directory for the API, as
// Entra issues it to a daemon app (client credentials, an app role) or, with
// delegated set, to a signed-in user through an app (scp). claims override.
func (d *entraDirectory) accessToken(t *testing.T, aud string, delegated bool, override map[string]any) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{
		"aud":    aud,
		"iss":    d.issuer(),
		"iat":    now.Add(-5 * time.Minute).Unix(),
		"nbf":    now.Add(-5 * time.Minute).Unix(),
		"exp":    now.Add(time.Hour).Unix(),
		"aio":    "k2BgYJg8zLz1n2gvW9tV1nGmXbYhAQ==",
		"azp":    callerAppID,
		"azpacr": "1",
		"oid":    callerSPOID,
		"rh":     "1.AXkAv_iYcvGGr0GRqy18wBHbRyprbm4dPI5PmnsdLD5PWmt5AAB5AA.",
		"sub":    callerSPOID,
		"tid":    d.tenantID,
		"uti":    "QXNrZWRBbmRBbnN3ZXJlZA",
		"ver":    "2.0",
	}
	if delegated {
		c["scp"] = "access_as_user"
		c["name"] = "Ada Lovelace"
		c["preferred_username"] = "ada@contoso.com"
		c["idtyp"] = "user"
	} else {
		c["roles"] = []string{"Gateway.Invoke"}
		c["idtyp"] = "app"
	}
	for k, v := range override {
		c[k] = v
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = d.kid
	s, err := tok.SignedString(d.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// managedIdentity is the endpoint Container Apps gives an app's
// user-assigned identities (IDENTITY_ENDPOINT, X-IDENTITY-HEADER,
// api-version 2019-08-01). It answers only for the identities the
// deployment made, each with its own tokens.
type managedIdentity struct {
	secret    string
	clientIDs map[string]bool
	asked     sync.Map // client ID + " " + resource → count
}

// token is identity clientID's token for resource.
func (m *managedIdentity) token(clientID, resource string) string {
	return "mi-token-" + clientID + "-for-" + strings.TrimPrefix(resource, "https://")
}

func (m *managedIdentity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("client_id")
	if r.Header.Get("X-IDENTITY-HEADER") != m.secret || !m.clientIDs[id] {
		http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
		return
	}
	res := q.Get("resource")
	n, _ := m.asked.LoadOrStore(id+" "+res, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":%q,"expires_on":"%d","resource":%q,"token_type":"Bearer","client_id":%q}`,
		m.token(id, res), time.Now().Add(24*time.Hour).Unix(), res, id)
}

// entraLogin is login.microsoftonline.com for several directories: each
// directory's own documents, and the multi-tenant keys endpoint
// (/common/discovery/v2.0/keys), which publishes every directory's signing
// keys, as Entra's common keys sign every directory's tokens.
type entraLogin struct {
	dirs       map[string]*entraDirectory
	commonKeys atomic.Int64
}

func (l *entraLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/common/discovery/v2.0/keys" {
		l.commonKeys.Add(1)
		var keys []map[string]any
		for _, d := range l.dirs {
			keys = append(keys, d.jwk())
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
		return
	}
	tid, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if d, ok := l.dirs[tid]; ok {
		d.ServeHTTP(w, r)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"error":"invalid_tenant","error_description":"AADSTS90002: Tenant not found."}`)
}

// fakeAccount is one Azure OpenAI account: it answers only the tokens of
// the identities that have Cognitive Services OpenAI User on it (401
// otherwise, as Azure does), and records who called.
type fakeAccount struct {
	granted map[string]string // bearer token → identity client ID
	backend *stub.Server
	key     string // the stub's own key, put in place of the caller's

	mu    sync.Mutex
	calls []call
}

// call is one request an account accepted: who made it, for which path.
type call struct{ ClientID, Path string }

func (a *fakeAccount) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := a.granted[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"PermissionDenied","message":"The principal lacks the required data action"}}`)
		return
	}
	a.mu.Lock()
	a.calls = append(a.calls, call{id, r.URL.Path})
	a.mu.Unlock()
	r.Header.Set("Authorization", "Bearer "+a.key)
	a.backend.ServeHTTP(w, r)
}

// accepted lists the calls the account accepted, in order.
func (a *fakeAccount) accepted() []call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]call(nil), a.calls...)
}

func pemBlock(kind string, der []byte) []byte {
	var b strings.Builder
	b.WriteString("-----BEGIN " + kind + "-----\n")
	enc := base64.StdEncoding.EncodeToString(der)
	for len(enc) > 64 {
		b.WriteString(enc[:64] + "\n")
		enc = enc[64:]
	}
	b.WriteString(enc + "\n-----END " + kind + "-----\n")
	return []byte(b.String())
}
