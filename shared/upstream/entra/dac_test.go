package entra

import (
	"context"
	"flag"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/llmgw/gateway/internal/testing/testtool"
)

// netnsEnv marks the re-executed test binary running inside a fresh network
// namespace, where the only interface is loopback.
const netnsEnv = "ENTRA_TEST_IN_NETNS"

// measureDAC runs TestDefaultAzureCredentialCost, which measures a
// dependency (seconds of a probe that times out), not this package: run it
// when upgrading azidentity or revisiting the numbers of docs/azure.md.
var measureDAC = flag.Bool("measure-dac", false, "run TestDefaultAzureCredentialCost (measures azidentity's DefaultAzureCredential for several seconds)")

// TestDefaultAzureCredentialCost measures what DefaultAzureCredential costs
// on a machine where nothing is configured, the reason this package names
// its credential instead. DefaultAzureCredential probes IMDS at
// 169.254.169.254, which is not ours to reach, so the measurement runs in a
// private network namespace (unshare -n) where that address is either
// unrouted or held by a listener of ours that never answers, the two ways a
// non-Azure host behaves. Results are logged and recorded in docs/azure.md,
// section "Run on Azure Container Apps". It runs only when asked:
//
//	go test ./shared/upstream/entra -run TestDefaultAzureCredentialCost -v -measure-dac
func TestDefaultAzureCredentialCost(t *testing.T) {
	if !*measureDAC && os.Getenv(netnsEnv) != "1" {
		t.Skip("measures a dependency for seconds: run with -measure-dac")
	}
	if os.Getenv(netnsEnv) != "1" {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			testtool.Missing(t, "unshare not found; cannot isolate the IMDS probe (util-linux)")
		}
		// lo up, and 169.254.169.254 held on it so the probe stays local.
		script := `ip link set lo up && ip addr add 169.254.169.254/32 dev lo && exec "$0" -test.run '^TestDefaultAzureCredentialCost$' -test.v`
		cmd := exec.Command(unshare, "-n", "sh", "-c", script, os.Args[0])
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "unshare failed") {
			t.Skipf("no network namespace here: %s", out)
		}
		t.Logf("in a private network namespace:\n%s", out)
		if err != nil {
			t.Fatalf("measurement failed: %v", err)
		}
		return
	}

	// Guard: never probe a real network.
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			t.Fatalf("refusing to measure: interface %s is not loopback", i.Name)
		}
	}
	for _, k := range []string{"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
		"AZURE_USERNAME", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_TOKEN_CREDENTIALS", "IDENTITY_ENDPOINT", "IDENTITY_HEADER",
		"MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT", "IDENTITY_SERVER_THUMBPRINT"} {
		os.Unsetenv(k) // this process exists only for the measurement
	}
	scope := policy.TokenRequestOptions{Scopes: []string{DefaultScope}}
	const bound = 30 * time.Second

	measure := func(t *testing.T) {
		start := time.Now()
		dac, err := azidentity.NewDefaultAzureCredential(nil)
		built := time.Since(start)
		if err != nil {
			t.Fatalf("NewDefaultAzureCredential: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		start = time.Now()
		_, err = dac.GetToken(ctx, scope)
		took := time.Since(start)
		if err == nil {
			t.Fatal("DefaultAzureCredential got a token with nothing configured")
		}
		if took >= bound {
			t.Fatalf("GetToken ran into the %s bound", bound)
		}
		t.Logf("NewDefaultAzureCredential: %s; GetToken failed after %s: %.200s", built, took, oneLine(err.Error()))
	}

	t.Run("imds refuses", measure) // nothing listens on 169.254.169.254:80

	t.Run("imds silent", func(t *testing.T) {
		// Accepts and never answers, like a blackholed route: the probe's
		// own one-second timeout decides.
		ln, err := net.Listen("tcp", "169.254.169.254:80")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		measure(t)

		// The explicit credential against the same silent IMDS: no probe, so
		// only this package's timeout bounds it.
		cred, err := New(Config{Credential: ManagedIdentity, Timeout: 2 * time.Second}, discard())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = cred.Apply(context.Background(), http.Header{})
		t.Logf("explicit managed-identity, timeout 2s: Apply failed after %s: %.120s", time.Since(start), err)
		if err == nil {
			t.Fatal("Apply succeeded against a silent IMDS")
		}
	})
}
