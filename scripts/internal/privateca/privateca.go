// Package privateca writes a throwaway certificate authority and one
// server certificate it signed for the loopback interface: the private CA
// a backend behind TLS is reached through, as the bench's TLS backend legs
// and their tests need it. Nothing it writes is meant to outlive the run
// (the certificates expire after a day) or to be committed.
package privateca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write leaves in its folder.
type Files struct {
	CA   string // the CA's certificate: what a client trusts
	Cert string // the server's certificate, signed by the CA
	Key  string // the server's private key (PKCS #8)
}

// Names are what the server certificate is valid for: 127.0.0.1 for
// clients that dial the address (Go's, which check IP SANs), and localhost
// for those that verify a host name only (nginx's proxy_ssl_name).
var Names = struct {
	IP  net.IP
	DNS string
}{net.IPv4(127, 0, 0, 1), "localhost"}

// validity is a day: longer than any run, short enough that a copy left
// behind is useless.
const validity = 24 * time.Hour

// Write generates the CA and the server certificate (ECDSA P-256, TLS's
// common choice for new keys) and writes them into dir as ca.pem,
// server.pem and server-key.pem, readable by the owner only where secret.
func Write(dir string) (Files, error) {
	f := Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "server.pem"),
		Key:  filepath.Join(dir, "server-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("CA key: %w", err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "llm-gateway bench CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("server key: %w", err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: Names.DNS},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{Names.IP},
		DNSNames:     []string{Names.DNS},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &key.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return f, fmt.Errorf("server key: %w", err)
	}
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{f.CA, "CERTIFICATE", caDER, 0o644},
		{f.Cert, "CERTIFICATE", srvDER, 0o644},
		{f.Key, "PRIVATE KEY", keyDER, 0o600},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		if err := os.WriteFile(w.path, data, w.mode); err != nil {
			return f, fmt.Errorf("write %s: %w", filepath.Base(w.path), err)
		}
	}
	return f, nil
}

// Pool reads a CA file into a pool of its own, without the system's roots:
// what the bench's clients trust.
func Pool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return pool, nil
}
