package privateca

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestServerCertVerifies: a client that trusts only the CA accepts the
// server certificate by address and by name, and one that does not trust
// it refuses the handshake.
func TestServerCertVerifies(t *testing.T) {
	t.Parallel()
	f, err := Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := Pool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if st, err := os.Stat(f.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, %v; want 0600", st.Mode(), err)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := trusting.Get(srv.URL)
	if err != nil {
		t.Fatalf("client trusting the CA: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	strange := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if resp, err := strange.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the CA accepted the certificate")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("want a certificate error, got %v", err)
	}
}

func TestPoolRefusesNonPEM(t *testing.T) {
	t.Parallel()
	p := t.TempDir() + "/empty.pem"
	if err := os.WriteFile(p, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pool(p); err == nil {
		t.Fatal("want an error")
	}
	if _, err := Pool(p + ".missing"); err == nil {
		t.Fatal("want an error for a missing file")
	}
}
