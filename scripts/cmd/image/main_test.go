package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
)

// TestRun writes a layout from a real static binary for this machine's
// architecture, with SOURCE_DATE_EPOCH set, and rejects bad flags.
func TestRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image holds a linux binary; this test builds one for the host")
	}
	bin := lambdatest.BuildTestBinary(t, "./testdata/static")
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return "1700000000"
		}
		return ""
	}
	platform := "linux/" + runtime.GOARCH
	var stdout, stderr bytes.Buffer
	args := []string{"image", "-out", filepath.Join(dir, "oci"), "-ca", ca, "-bin", platform + "=" + bin}
	if err := run(args, env, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), platform) || !strings.Contains(stdout.String(), "layout on disk") {
		t.Fatalf("output %q", stdout.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "oci", "index.json")); err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name   string
		args   []string
		getenv func(string) string
	}{
		{"no -bin", []string{"image", "-ca", ca}, env},
		{"-bin without os/arch", []string{"image", "-bin", "amd64=x"}, env},
		{"bad SOURCE_DATE_EPOCH", []string{"image", "-bin", platform + "=" + bin, "-out", filepath.Join(dir, "oci2"), "-ca", ca},
			func(string) string { return "yesterday" }},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := run(tt.args, tt.getenv, &stdout, &stderr); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
