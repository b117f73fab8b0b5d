package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeELF is a tiny ELF64 header for machine, with one PT_INTERP program
// header when dynamic: enough for the builder's checks, not runnable.
func fakeELF(machine elf.Machine, dynamic bool, marker string) []byte {
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	phnum, phoff := uint16(0), uint64(0)
	if dynamic {
		phnum, phoff = 1, 64
	}
	le := binary.LittleEndian
	for _, v := range []any{uint16(elf.ET_EXEC), uint16(machine), uint32(1), uint64(0x400000), phoff, uint64(0),
		uint32(0), uint16(64), uint16(56), phnum, uint16(64), uint16(0), uint16(0)} {
		_ = binary.Write(&b, le, v)
	}
	if dynamic {
		for _, v := range []any{uint32(elf.PT_INTERP), uint32(4), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(1)} {
			_ = binary.Write(&b, le, v)
		}
	}
	b.WriteString(marker)
	return b.Bytes()
}

type fixture struct {
	dir, ca string
	bins    map[string][]byte // arch → binary content
	opts    Options
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, ca: filepath.Join(dir, "ca.crt"), bins: map[string][]byte{}}
	if err := os.WriteFile(f.ca, []byte("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.opts = Options{Out: filepath.Join(dir, "oci"), CACerts: f.ca, Tag: "test"}
	for arch, m := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		p := filepath.Join(dir, "gateway-"+arch)
		f.bins[arch] = fakeELF(m, false, "gateway for "+arch)
		if err := os.WriteFile(p, f.bins[arch], 0o755); err != nil {
			t.Fatal(err)
		}
		f.opts.Binaries = append(f.opts.Binaries, Binary{OS: "linux", Arch: arch, Path: p})
	}
	slices.SortFunc(f.opts.Binaries, func(a, b Binary) int { return strings.Compare(a.Arch, b.Arch) })
	return f
}

// readBlob reads a blob and checks it against its digest and size.
func readBlob(t *testing.T, out string, d descriptor) []byte {
	t.Helper()
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(out, "blobs", "sha256", hexSum))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexSum || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match digest/size", d.Digest)
	}
	return b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

// untar reads a gzip layer and checks its diff_id.
func untar(t *testing.T, gz []byte, diffID string) map[string]entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != diffID {
		t.Fatalf("layer does not match diff_id %s", diffID)
	}
	files := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		files["/"+strings.TrimSuffix(h.Name, "/")] = entry{h, body}
	}
}

func TestBuildLayout(t *testing.T) {
	f := newFixture(t)
	res, err := Build(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	out := f.opts.Out
	if b, err := os.ReadFile(filepath.Join(out, "oci-layout")); err != nil || !strings.Contains(string(b), `"imageLayoutVersion":"1.0.0"`) {
		t.Fatalf("oci-layout = %q, %v", b, err)
	}
	top := decode[index](t, must(os.ReadFile(filepath.Join(out, "index.json"))))
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != mediaIndex || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Fatalf("index.json = %+v, want one tagged image index", top)
	}
	if top.Manifests[0].Digest != res.Index {
		t.Fatalf("index.json points at %s, Build reported %s", top.Manifests[0].Digest, res.Index)
	}
	idx := decode[index](t, readBlob(t, out, top.Manifests[0]))

	var arches []string
	for _, md := range idx.Manifests {
		if md.MediaType != mediaManifest || md.Platform == nil || md.Platform.OS != "linux" {
			t.Fatalf("index entry %+v is not a linux image manifest", md)
		}
		arch := md.Platform.Architecture
		arches = append(arches, arch)
		t.Run(arch, func(t *testing.T) {
			m := decode[manifest](t, readBlob(t, out, md))
			cfg := decode[imageConfig](t, readBlob(t, out, m.Config))
			c := cfg.Config
			if cfg.Architecture != arch || cfg.OS != "linux" {
				t.Errorf("config platform %s/%s, index says linux/%s", cfg.OS, cfg.Architecture, arch)
			}
			if !slices.Equal(c.Entrypoint, []string{"/gateway"}) {
				t.Errorf("Entrypoint = %q", c.Entrypoint)
			}
			if c.User != "65532:65532" {
				t.Errorf("User = %q", c.User)
			}
			if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 1 {
				t.Errorf("ExposedPorts = %v", c.ExposedPorts)
			}
			if !slices.Contains(c.Env, "PORT=8080") {
				t.Errorf("Env = %q, want PORT=8080", c.Env)
			}
			if len(m.Layers) != len(cfg.RootFS.DiffIDs) {
				t.Fatalf("%d layers, %d diff_ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
			}
			fs := map[string]entry{}
			for i, ld := range m.Layers {
				if ld.MediaType != mediaLayer {
					t.Errorf("layer media type %q", ld.MediaType)
				}
				for k, v := range untar(t, readBlob(t, out, ld), cfg.RootFS.DiffIDs[i]) {
					fs[k] = v
				}
			}
			gw, ok := fs["/gateway"]
			if !ok || !bytes.Equal(gw.body, f.bins[arch]) || gw.hdr.Mode&0o111 == 0 {
				t.Errorf("/gateway missing, wrong, or not executable")
			}
			if ca := fs["/etc/ssl/certs/ca-certificates.crt"]; !bytes.Equal(ca.body, must(os.ReadFile(f.ca))) {
				t.Errorf("CA bundle missing or different")
			}
			if pw := string(fs["/etc/passwd"].body); !strings.Contains(pw, "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd = %q, want the nonroot user 65532", pw)
			}
			if tmp := fs["/tmp"]; tmp.hdr == nil || tmp.hdr.Typeflag != tar.TypeDir {
				t.Errorf("/tmp missing")
			}
		})
	}
	if !slices.Equal(arches, []string{"amd64", "arm64"}) {
		t.Fatalf("arches = %q, want amd64 and arm64", arches)
	}

	// Reproducible: the same inputs give the same index digest.
	res2, err := Build(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Index != res.Index {
		t.Fatalf("second build: index %s, first %s", res2.Index, res.Index)
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name string
		bin  []byte
		arch string
		want string
	}{
		{name: "dynamic", bin: fakeELF(elf.EM_X86_64, true, ""), arch: "amd64", want: "dynamically linked"},
		{name: "wrong arch", bin: fakeELF(elf.EM_AARCH64, false, ""), arch: "amd64", want: "not amd64"},
		{name: "not elf", bin: []byte("#!/bin/sh\n"), arch: "amd64", want: "not an ELF"},
		{name: "unknown arch", bin: fakeELF(elf.EM_386, false, ""), arch: "386", want: "want amd64 or arm64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			p := filepath.Join(f.dir, "bad")
			if err := os.WriteFile(p, tt.bin, 0o755); err != nil {
				t.Fatal(err)
			}
			f.opts.Binaries = []Binary{{OS: "linux", Arch: tt.arch, Path: p}}
			_, err := Build(f.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
