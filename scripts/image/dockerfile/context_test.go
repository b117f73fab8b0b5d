package dockerfile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// buildContext is what of the tracked files a build sends with the
// repository's .dockerignore, read and matched by the library BuildKit and
// the Docker CLI use (moby/patternmatcher), with the file list git tracks.
func buildContext(t *testing.T, dockerignore string, files []string) []string {
	t.Helper()
	patterns, err := ignorefile.ReadAll(strings.NewReader(dockerignore))
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	var in []string
	for _, f := range files {
		excluded, err := pm.MatchesOrParentMatches(f)
		if err != nil {
			t.Fatal(err)
		}
		if !excluded {
			in = append(in, f)
		}
	}
	return in
}

func trackedFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestBuildContextIsTheAllowList: .dockerignore lets in what the build
// reads (go.mod, go.sum, the Dockerfile for a remote build, the gateway's
// packages without their tests) and nothing else, so no stray file (a
// committed binary, azd's .azure/, node_modules) is uploaded by azd deploy
// or copied into the build stage; the Dockerfile copies only from it. The
// old deny-list sent every tracked file.
func TestBuildContextIsTheAllowList(t *testing.T) {
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	files := trackedFiles(t)
	// What a working tree may hold untracked, next to what git tracks.
	strays := []string{"gateway.exe", ".azure/prod/.env", "bin/gateway", "scripts/sdktest/node_modules/openai/index.js", "shared/server/server.test", "notes.md"}
	ctx := buildContext(t, string(ignore), append(slices.Clone(files), strays...))
	allowed := regexp.MustCompile(`^(go\.mod|go\.sum|Dockerfile|(functions|shared)/.*\.go)$`)
	for _, f := range ctx {
		if !allowed.MatchString(f) || strings.HasSuffix(f, "_test.go") || strings.Contains(f, "/testdata/") {
			t.Errorf("%s enters the build context", f)
		}
	}
	for _, want := range []string{"go.mod", "go.sum", "Dockerfile", "functions/gateway/main.go"} {
		if !slices.Contains(ctx, want) {
			t.Errorf("%s is missing from the build context", want)
		}
	}
	// Every package the build compiles is in the context: go list, over
	// the same tags and platform the Dockerfile builds with.
	cmd := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}", "./functions/gateway")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	abs, _ := filepath.Abs(root)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(abs, fields[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module from the module cache
		}
		for _, f := range fields[1:] {
			if p := filepath.ToSlash(filepath.Join(rel, f)); !slices.Contains(ctx, p) {
				t.Errorf("the build compiles %s, which .dockerignore leaves out", p)
			}
		}
	}
	// The same check catches the old deny-list.
	old := ".git/\n.azure/\nbin/\nbench-out/\n**/node_modules/\n*.test\n*.prof\n"
	if got := buildContext(t, old, []string{"gateway.exe", "README.md", "go.mod"}); !slices.Contains(got, "gateway.exe") {
		t.Error("the check does not see a binary through a deny-list")
	}
	// The Dockerfile copies from nothing else.
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(t, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.stages {
		for _, cmd := range st.Commands {
			c, ok := cmd.(interface{ String() string })
			if !ok || !strings.HasPrefix(strings.ToUpper(c.String()), "COPY ") || strings.Contains(c.String(), "--from=") {
				continue
			}
			srcs := strings.Fields(c.String())[1:]
			for _, s := range srcs[:len(srcs)-1] {
				s = strings.TrimSuffix(s, "/")
				if s == "." || !slices.ContainsFunc(ctx, func(f string) bool { return f == s || strings.HasPrefix(f, s+"/") }) {
					t.Errorf("stage %q: %s copies %s, which is not in the build context as .dockerignore allows it", st.Name, c.String(), s)
				}
			}
		}
	}
}

// goVersion is the Go release go.mod requires (its toolchain line when it
// has one, else its go line).
func goVersion(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(mod); m != nil {
		return string(m[1])
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// baseImageProblems returns what is wrong with one FROM image: a Docker Hub
// image (anonymous pulls from ACR Tasks' shared addresses hit Docker Hub's
// rate limit: toomanyrequests), or a Go image whose release is not the one
// go.mod requires.
func baseImageProblems(image, goVer string) []string {
	if image == "scratch" {
		return nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return []string{image + ": " + err.Error()}
	}
	var out []string
	if d := reference.Domain(named); d == "docker.io" {
		out = append(out, image+": pulled from Docker Hub")
	}
	if strings.HasSuffix(reference.Path(named), "/golang") || reference.Path(named) == "library/golang" {
		tagged, ok := named.(reference.Tagged)
		if !ok || !strings.HasPrefix(tagged.Tag()+"-", goVer+"-") {
			out = append(out, image+": not Go "+goVer+", the release go.mod requires")
		}
	}
	return out
}

// TestBaseImage: no stage pulls from Docker Hub, and the Go build stage is
// the Microsoft build of Go on MCR at the release go.mod requires. Whether
// the tag exists on MCR only a pull can tell (mcr.microsoft.com is not
// reachable from the test machines); the tag follows the published pattern
// of microsoft/go-images (the shared tag X.Y.Z).
func TestBaseImage(t *testing.T) {
	goVer := goVersion(t)
	for _, tc := range []struct {
		image string
		bad   bool
	}{
		{"golang:1.26", true},
		{"docker.io/library/golang:" + goVer, true},
		{"mcr.microsoft.com/oss/go/microsoft/golang:1.20", true},
		{"mcr.microsoft.com/oss/go/microsoft/golang:" + goVer, false},
		{"mcr.microsoft.com/oss/go/microsoft/golang:" + goVer + "-1-bookworm", false},
		{"alpine", true},
		{"scratch", false},
	} {
		if got := len(baseImageProblems(tc.image, goVer)) > 0; got != tc.bad {
			t.Errorf("baseImageProblems(%q) = %v, want bad=%v", tc.image, baseImageProblems(tc.image, goVer), tc.bad)
		}
	}
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(t, src)
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]bool{}
	sawGo := false
	for _, st := range p.stages {
		if !stages[st.BaseName] {
			t.Logf("stage %q FROM %s", st.Name, st.BaseName)
			for _, problem := range baseImageProblems(st.BaseName, goVer) {
				t.Error(problem)
			}
			if strings.HasPrefix(st.BaseName, "mcr.microsoft.com/oss/go/microsoft/golang:") {
				sawGo = true
			}
		}
		stages[st.Name] = true
	}
	if !sawGo {
		t.Error("no stage builds with the Microsoft build of Go (mcr.microsoft.com/oss/go/microsoft/golang)")
	}
	if !regexp.MustCompile(`(?m)^ENV GOTOOLCHAIN=local\b`).Match(src) {
		t.Error("the build stage does not pin GOTOOLCHAIN=local: a mismatch would fetch another toolchain instead of failing")
	}
	if !regexp.MustCompile(`(?m)^ENV .*\bMS_GO_NOSYSTEMCRYPTO=1\b`).Match(src) {
		t.Error("the build stage does not set MS_GO_NOSYSTEMCRYPTO=1: the Microsoft build of Go needs cgo for its default crypto, and the binary is static")
	}
}

// maxTrackedBytes bounds one tracked file: the largest the repository
// needs is a few hundred KB (README.md, the bench plots); a build output
// or a binary is tens of MB.
const maxTrackedBytes = 2 << 20

// executableMagic are the first bytes of the executable formats Go builds:
// ELF, PE (Windows), Mach-O (both byte orders, 32 and 64 bit, universal)
// and WebAssembly.
var executableMagic = [][]byte{
	[]byte("\x7fELF"), []byte("MZ"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf}, {0xce, 0xfa, 0xed, 0xfe}, {0xcf, 0xfa, 0xed, 0xfe}, {0xca, 0xfe, 0xba, 0xbe},
	[]byte("\x00asm"),
}

// trackedProblem says what is wrong with a tracked file of this content,
// or "".
func trackedProblem(name string, head []byte, size int64) string {
	if size > maxTrackedBytes {
		return name + " is " + strconv.FormatInt(size>>20, 10) + " MiB: build outputs go to bin/ (ignored), not the tree"
	}
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m) {
			return name + " is an executable: build it with make, do not commit it"
		}
	}
	return ""
}

// TestNoBinariesTracked: no tracked file is an executable or over 2 MiB.
// A 29.7 MB gateway.exe was once committed and, outside both ignore
// files, uploaded by every azd deploy. Scripts (a #! line) are fine.
func TestNoBinariesTracked(t *testing.T) {
	for _, tc := range []struct {
		name string
		head []byte
		size int64
		bad  bool
	}{
		{"gateway.exe", []byte("MZ\x90\x00"), 29_717_504, true},
		{"bootstrap", []byte("\x7fELF\x02\x01"), 9 << 20, true},
		{"small-elf", []byte("\x7fELF\x02\x01"), 4096, true},
		{"gateway-darwin", []byte{0xcf, 0xfa, 0xed, 0xfe}, 8 << 20, true},
		{"dump.json", []byte("{}"), 3 << 20, true},
		{"run.sh", []byte("#!/bin/sh\n"), 200, false},
		{"README.md", []byte("# llmgw"), 160_000, false},
	} {
		if got := trackedProblem(tc.name, tc.head, tc.size) != ""; got != tc.bad {
			t.Errorf("trackedProblem(%s) = %q, want bad=%v", tc.name, trackedProblem(tc.name, tc.head, tc.size), tc.bad)
		}
	}
	for _, f := range trackedFiles(t) {
		path := filepath.Join(root, f)
		fi, err := os.Lstat(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		head := make([]byte, 8)
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := fh.Read(head)
		fh.Close()
		if p := trackedProblem(f, head[:n], fi.Size()); p != "" {
			t.Error(p)
		}
	}
}
