// Package dockerfile checks the repository's Dockerfile with BuildKit's own
// parser (github.com/moby/buildkit/frontend/dockerfile): it must parse
// without an unknown instruction or a lint warning, keep to what ACR Tasks'
// dependency scanner reads (azd deploy with remoteBuild), and describe the
// same image as `make image`, whose settings are read from a real image
// layout written by the command `make image` runs. It is its own module so
// that BuildKit stays out of the gateway's go.mod; `make bicepcheck` (part
// of `make test`) runs it.
package dockerfile

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// root is the repository root, three levels up from this directory.
var root = filepath.Join("..", "..", "..")

// parsed is a Dockerfile read by BuildKit: its stages and lint warnings.
type parsed struct {
	stages   []instructions.Stage
	warnings []string
}

func parse(t *testing.T, src []byte) (*parsed, error) {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	p := &parsed{}
	for _, w := range res.Warnings {
		p.warnings = append(p.warnings, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, _ []parser.Range) {
		p.warnings = append(p.warnings, rule+": "+msg)
	}})
	p.stages, _, err = instructions.Parse(res.AST, lint)
	return p, err
}

// acrProblems returns the FROM lines ACR's dependency scanner cannot read:
// it splits each line on spaces and accepts only `FROM image` and
// `FROM image AS name` (Azure/acr#697: a --platform flag fails the build).
func acrProblems(src []byte) []string {
	var bad []string
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		if len(f) == 2 || (len(f) == 4 && strings.EqualFold(f[2], "AS")) {
			if !strings.HasPrefix(f[1], "-") {
				continue
			}
		}
		bad = append(bad, line)
	}
	return bad
}

func TestDockerfileParses(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(t, src)
	if err != nil {
		t.Fatalf("BuildKit cannot parse the Dockerfile: %v", err)
	}
	if len(p.warnings) > 0 {
		t.Errorf("BuildKit lint warnings:\n  %s", strings.Join(p.warnings, "\n  "))
	}
	if len(p.stages) < 2 {
		t.Fatalf("want a build stage and a final stage, got %d stages", len(p.stages))
	}
	for _, st := range p.stages {
		if st.Platform != "" {
			t.Errorf("stage %q: FROM --platform=%s: ACR Tasks cannot build it (Azure/acr#697); cross-compile with GOOS/GOARCH instead", st.Name, st.Platform)
		}
	}
	if bad := acrProblems(src); len(bad) > 0 {
		t.Errorf("FROM lines ACR's dependency scanner cannot read: %q", bad)
	}
}

func TestCheckerCatchesBrokenDockerfiles(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"stray Markdown fence", "FROM scratch\nUSER 1\n```\n"},
		{"unknown instruction", "FROM scratch\nCOPPY a /a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parse(t, []byte(tc.src)); err == nil {
				t.Fatal("parsed without an error")
			}
		})
	}
	for _, src := range []string{
		"FROM --platform=$BUILDPLATFORM golang:1.26 AS build\nFROM scratch\n",
		"FROM --platform=linux/amd64 golang:1.26 AS build\nFROM scratch\n",
	} {
		if len(acrProblems([]byte(src))) != 1 {
			t.Errorf("ACR check missed %q", src)
		}
		p, err := parse(t, []byte(src))
		if err != nil || p.stages[0].Platform == "" {
			t.Errorf("BuildKit did not report the platform of %q (err %v)", src, err)
		}
	}
	if p, err := parse(t, []byte("FROM golang:1.26 as build\nFROM scratch\n")); err != nil || len(p.warnings) == 0 {
		t.Errorf("mixed-case FROM ... as gave no lint warning (err %v)", err)
	}
}

// imageConfig is the part of an OCI image config the Dockerfile decides.
type imageConfig struct {
	User         string              `json:"User"`
	Entrypoint   []string            `json:"Entrypoint"`
	Env          []string            `json:"Env"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	WorkingDir   string              `json:"WorkingDir"`
}

// dockerfileConfig is what the Dockerfile's final stage sets.
func dockerfileConfig(t *testing.T, st instructions.Stage) (imageConfig, []string) {
	t.Helper()
	var c imageConfig
	var copies []string
	for _, cmd := range st.Commands {
		switch cmd := cmd.(type) {
		case *instructions.UserCommand:
			c.User = cmd.User
		case *instructions.EntrypointCommand:
			if cmd.PrependShell {
				t.Errorf("ENTRYPOINT is in shell form; scratch has no shell")
			}
			c.Entrypoint = cmd.CmdLine
		case *instructions.EnvCommand:
			for _, kv := range cmd.Env {
				c.Env = append(c.Env, kv.Key+"="+kv.Value)
			}
		case *instructions.ExposeCommand:
			for _, p := range cmd.Ports {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				if c.ExposedPorts == nil {
					c.ExposedPorts = map[string]struct{}{}
				}
				c.ExposedPorts[p] = struct{}{}
			}
		case *instructions.WorkdirCommand:
			c.WorkingDir = cmd.Path
		case *instructions.CopyCommand:
			copies = append(copies, cmd.DestPath)
		}
	}
	return c, copies
}

// makeImage runs the image writer `make image` runs, on a tiny static
// binary and a throwaway CA bundle, and returns the config of the one
// manifest and the files of its base layer by path.
func makeImage(t *testing.T) (imageConfig, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	// A static linux/amd64 executable: the image builder checks the ELF.
	// -trimpath as make test builds everything else, so the runtime it
	// links is compiled once per run, not twice.
	src := filepath.Join(dir, "tiny")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module tiny\n\ngo 1.26\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	bin := filepath.Join(dir, "gateway-linux-amd64")
	run(t, src, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-buildvcs=false -trimpath"}, "go", "build", "-o", bin, ".")
	ca := filepath.Join(dir, "ca.pem")
	must(t, os.WriteFile(ca, selfSignedPEM(t), 0o644))
	out := filepath.Join(dir, "oci")
	run(t, root, nil, "go", "run", imageCommand(t), "-out", out, "-ca", ca, "-bin", "linux/amd64="+bin)

	var top struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	readJSON(t, filepath.Join(out, "index.json"), &top)
	var idx struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	readJSON(t, blob(out, top.Manifests[0].Digest), &idx)
	var m struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	readJSON(t, blob(out, idx.Manifests[0].Digest), &m)
	var cfg struct {
		Config imageConfig `json:"config"`
	}
	readJSON(t, blob(out, m.Config.Digest), &cfg)
	return cfg.Config, layerFiles(t, blob(out, m.Layers[0].Digest))
}

func TestDockerfileMatchesMakeImage(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(t, src)
	if err != nil {
		t.Fatal(err)
	}
	got, copies := dockerfileConfig(t, p.stages[len(p.stages)-1])
	want, base := makeImage(t)

	slices.Sort(got.Env)
	slices.Sort(want.Env)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"USER", got.User, want.User},
		{"ENTRYPOINT", got.Entrypoint, want.Entrypoint},
		{"ENV", got.Env, want.Env},
		{"EXPOSE", got.ExposedPorts, want.ExposedPorts},
		{"WORKDIR", got.WorkingDir, want.WorkingDir},
	} {
		g, _ := json.Marshal(c.got)
		w, _ := json.Marshal(c.want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s: Dockerfile %s, make image %s", c.name, g, w)
		}
	}

	// The build stage writes the same root filesystem under /rootfs, which
	// the final stage copies to /: every file of make image's base layer is
	// made there, the text files with the same content.
	if !slices.Contains(copies, "/") {
		t.Errorf("the final stage copies no root filesystem to / (COPY destinations %q)", copies)
	}
	build := ""
	for _, cmd := range p.stages[0].Commands {
		if r, ok := cmd.(*instructions.RunCommand); ok {
			build += strings.Join(r.CmdLine, " ") + "\n"
		}
	}
	for path, content := range base {
		if !strings.Contains(build, "/rootfs/"+strings.TrimSuffix(path, "/")) {
			t.Errorf("make image has /%s; the Dockerfile's build stage does not make /rootfs/%s", path, path)
		}
		// Text files other than the CA bundle (the build machine's in both).
		if content != "" && !strings.Contains(content, "BEGIN CERTIFICATE") {
			line := "printf '" + strings.ReplaceAll(content, "\n", `\n`) + "' > /rootfs/" + path
			if !strings.Contains(build, line) {
				t.Errorf("/%s differs: want the build stage to run %s", path, line)
			}
		}
	}
	if !strings.Contains(build, "-o /rootfs"+want.Entrypoint[0]) {
		t.Errorf("the build stage does not write the binary to /rootfs%s", want.Entrypoint[0])
	}
}

// imageCommand is the package `make image` runs to write the layout, read
// from the Makefile's image target.
func imageCommand(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^image:.*\n(?:\t.*\n)*?\t\$\(GO\) run (\S+) -out`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile's image target runs no `$(GO) run PACKAGE -out ...`")
	}
	return string(m[1])
}

func blob(dir, digest string) string {
	return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "dockerfile test CA"},
		NotBefore:    time.Now(),
		NotAfter:     time.Now().Add(time.Hour),
		IsCA:         true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
